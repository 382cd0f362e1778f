// The insert log alone: concurrent appenders (group commit), rotation while
// they append, replay of exactly what was appended, and damage handling.
#include "flywheel/replay/service/insert_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "flywheel/io/temp_dir.h"

namespace flywheel::replay {
namespace {

Item MakeItem(uint64_t key) {
  std::vector<int64_t> steps = {static_cast<int64_t>(key), static_cast<int64_t>(key) + 1};
  auto chunk = Chunk::Make(key, format::DataType::Scalar(format::TypeId::kInt64), 2, steps.data(),
                           format::Codec::kLz4);
  EXPECT_TRUE(chunk.ok()) << chunk.status();
  Item item;
  item.key = key;
  item.priority = 0.5 + static_cast<double>(key);
  item.columns.push_back(TrajectoryColumn{"x", {*chunk}, 0, 2});
  return item;
}

TEST(InsertLogTest, ConcurrentAppendsAndRotationsReplayEveryItemOnce) {
  for (const char* sync : {"none", "always"}) {
    SCOPED_TRACE(sync);
    io::TempDir tmp("fw_insert_log");
    const std::string dir = tmp.Sub("log");
    constexpr int kThreads = 4, kPerThread = 300;
    {
      auto log = InsertLog::Open(dir, *ParseInsertLogSync(sync));
      ASSERT_TRUE(log.ok()) << log.status();
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
          for (int i = 0; i < kPerThread; ++i) {
            ASSERT_TRUE((*log)->Append("t", MakeItem(1 + static_cast<uint64_t>(t * kPerThread + i))).ok());
          }
        });
      }
      for (int r = 0; r < 5; ++r) ASSERT_TRUE((*log)->Rotate().ok());
      for (auto& th : threads) th.join();
      EXPECT_EQ((*log)->items_appended(), kThreads * kPerThread);
    }
    std::set<uint64_t> seen;
    auto r = InsertLog::Replay(dir, -1, [&](const std::string& table, Item item) -> Status {
      EXPECT_EQ(table, "t");
      EXPECT_TRUE(seen.insert(item.key).second) << "item " << item.key << " twice";
      EXPECT_EQ(item.priority, 0.5 + static_cast<double>(item.key));
      std::vector<int64_t> got(2);
      EXPECT_TRUE(item.columns.at(0).Decode(got.data()).ok());
      EXPECT_EQ(got, (std::vector<int64_t>{static_cast<int64_t>(item.key), static_cast<int64_t>(item.key) + 1}));
      return absl::OkStatus();
    });
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->items, kThreads * kPerThread);
    EXPECT_EQ(r->torn_bytes, 0);
    EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kPerThread));
  }
}

TEST(InsertLogTest, CoveredSegmentsAreNotReplayedAndAreDeleted) {
  io::TempDir tmp("fw_insert_log");
  const std::string dir = tmp.Sub("log");
  auto log = *InsertLog::Open(dir, InsertLogSync::kNone);
  ASSERT_TRUE(log->Append("t", MakeItem(1)).ok());
  const int64_t closed = *log->Rotate();
  ASSERT_TRUE(log->Append("t", MakeItem(2)).ok());
  ASSERT_TRUE(log->Covered(/*checkpoint_id=*/7, closed).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/segment-0.log"));
  std::vector<uint64_t> keys;
  auto r = InsertLog::Replay(dir, 7, [&](const std::string&, Item item) {
    keys.push_back(item.key);
    return absl::OkStatus();
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(keys, (std::vector<uint64_t>{2}));
}

TEST(InsertLogTest, ARecordDamagedInTheMiddleEndsTheSegmentThere) {
  io::TempDir tmp("fw_insert_log");
  const std::string dir = tmp.Sub("log");
  {
    auto log = *InsertLog::Open(dir, InsertLogSync::kNone);
    for (uint64_t k = 1; k <= 3; ++k) ASSERT_TRUE(log->Append("t", MakeItem(k)).ok());
  }
  const std::string seg = dir + "/segment-0.log";
  const auto size = std::filesystem::file_size(seg);
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size) - 10);
    f.put('\x5a');  // inside the last item record
  }
  std::vector<uint64_t> keys;
  auto r = InsertLog::Replay(dir, -1, [&](const std::string&, Item item) {
    keys.push_back(item.key);
    return absl::OkStatus();
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(keys, (std::vector<uint64_t>{1, 2}));
  EXPECT_GT(r->torn_bytes, 0);
  // A file that is not a segment is refused, not replayed.
  std::ofstream(dir + "/segment-5.log") << "not an insert log";
  EXPECT_TRUE(absl::IsDataLoss(InsertLog::Replay(dir, -1, [](const std::string&, Item) { return absl::OkStatus(); }).status()));
}

}  // namespace
}  // namespace flywheel::replay
