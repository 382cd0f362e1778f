#include "flywheel/replay/table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"

namespace flywheel::replay {
namespace {

using format::DataType;
using format::TypeId;

// An item whose single column "x" holds one int64 step equal to `key`.
Item MakeItem(ItemKey key, double priority = 1.0) {
  int64_t v = static_cast<int64_t>(key);
  auto chunk = *Chunk::Make(key, DataType::Scalar(TypeId::kInt64), 1, &v);
  return Item{key, priority, 0, {TrajectoryColumn{"x", {chunk}, 0, 1}}};
}

int64_t ValueOf(const SampledItem& s) {
  int64_t v = 0;
  EXPECT_TRUE(s.item->columns[0].Decode(&v).ok());
  return v;
}

std::unique_ptr<ReplayTable> MakeTable(ReplayTableOptions o) {
  auto t = ReplayTable::Create(std::move(o));
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

TEST(ReplayTableTest, QueueSamplesEachItemOnceInOrderAndBlocksWhenFull) {
  ReplayTableOptions o;
  o.name = "queue";
  o.sampler = NewFifoSelector();
  o.remover = NewFifoSelector();
  o.max_size = 3;
  o.max_times_sampled = 1;
  o.rate_limiter = RateLimiterOptions::Queue(3);
  auto t = MakeTable(std::move(o));
  for (ItemKey k = 1; k <= 3; ++k) ASSERT_TRUE(t->Insert(MakeItem(k)).ok());
  Status full = t->Insert(MakeItem(4), absl::Milliseconds(30));
  EXPECT_TRUE(absl::IsDeadlineExceeded(full)) << full;
  EXPECT_NE(std::string(full.message()).find("insert"), std::string::npos) << full;
  for (ItemKey k = 1; k <= 3; ++k) {
    auto s = t->Sample(absl::Seconds(1));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(ValueOf(*s), static_cast<int64_t>(k));
    EXPECT_EQ(s->probability, 1.0);
  }
  EXPECT_EQ(t->Info().size, 0);
  EXPECT_TRUE(absl::IsDeadlineExceeded(t->Sample(absl::Milliseconds(20)).status()));
}

TEST(ReplayTableTest, RemoverEvictsAtMaxSize) {
  ReplayTableOptions o;
  o.name = "evict";
  o.remover = NewMinHeapSelector();
  o.max_size = 3;
  auto t = MakeTable(std::move(o));
  ASSERT_TRUE(t->Insert(MakeItem(1, 5.0)).ok());
  ASSERT_TRUE(t->Insert(MakeItem(2, 1.0)).ok());
  ASSERT_TRUE(t->Insert(MakeItem(3, 9.0)).ok());
  ASSERT_TRUE(t->Insert(MakeItem(4, 7.0)).ok());  // evicts key 2 (lowest priority)
  std::set<int64_t> keys;
  for (const auto& item : t->Items()) keys.insert(static_cast<int64_t>(item->key));
  EXPECT_EQ(keys, (std::set<int64_t>{1, 3, 4}));
  EXPECT_EQ(t->Info().num_episodes_evicted, 1);
}

TEST(ReplayTableTest, MaxTimesSampledDeletesItems) {
  ReplayTableOptions o;
  o.name = "twice";
  o.max_times_sampled = 2;
  auto t = MakeTable(std::move(o));
  ASSERT_TRUE(t->Insert(MakeItem(1)).ok());
  EXPECT_EQ(t->Sample()->times_sampled, 1);
  EXPECT_EQ(t->Sample()->times_sampled, 2);
  EXPECT_EQ(t->Info().size, 0);
  EXPECT_EQ(t->Info().limiter.deletes, 1);
}

TEST(ReplayTableTest, SignatureIsCheckedOnInsert) {
  ReplayTableOptions o;
  o.name = "sig";
  o.signature = Signature{{{"x", DataType::Scalar(TypeId::kInt64)}}};
  auto t = MakeTable(std::move(o));
  EXPECT_TRUE(t->Insert(MakeItem(1)).ok());
  float f = 1;
  auto chunk = *Chunk::Make(9, DataType::Scalar(TypeId::kFloat32), 1, &f);
  Status s = t->Insert(Item{2, 1.0, 0, {TrajectoryColumn{"x", {chunk}, 0, 1}}});
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(std::string(s.message()).find("signature says int64"), std::string::npos) << s;
  s = t->Insert(Item{3, 1.0, 0, {TrajectoryColumn{"y", {chunk}, 0, 1}}});
  EXPECT_NE(std::string(s.message()).find("'y' is not in the table signature"), std::string::npos) << s;
  EXPECT_TRUE(absl::IsAlreadyExists(t->Insert(MakeItem(1))));
  EXPECT_TRUE(absl::IsInvalidArgument(t->Insert(MakeItem(5, -1.0))));
  Item twice = MakeItem(6);
  twice.columns.push_back(twice.columns[0]);
  s = t->Insert(std::move(twice));
  EXPECT_NE(std::string(s.message()).find("column 'x' twice"), std::string::npos) << s;
}

TEST(ReplayTableTest, PrioritiesMutateAndDeleteByKey) {
  ReplayTableOptions o;
  o.name = "prio";
  o.sampler = NewMaxHeapSelector();
  auto t = MakeTable(std::move(o));
  for (ItemKey k = 1; k <= 3; ++k) ASSERT_TRUE(t->Insert(MakeItem(k, static_cast<double>(k))).ok());
  EXPECT_EQ(ValueOf(*t->Sample()), 3);
  auto missing = t->MutatePriorities({{1, 10.0}, {42, 1.0}}, {3, 77});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(*missing, 2);
  EXPECT_EQ(ValueOf(*t->Sample()), 1);
  EXPECT_EQ(t->Info().size, 2);
  t->Reset();
  EXPECT_EQ(t->Info().size, 0);
  EXPECT_EQ(t->Info().limiter.inserts, 0);
}

TEST(ReplayTableTest, BlockedSampleIsExplainedAndReleasedByInsert) {
  ReplayTableOptions o;
  o.name = "minsize";
  o.rate_limiter = RateLimiterOptions::MinSize(2);
  auto t = MakeTable(std::move(o));
  ASSERT_TRUE(t->Insert(MakeItem(1)).ok());
  absl::Notification done;
  Result<SampledItem> got = absl::UnknownError("not run");
  std::thread sampler([&] {
    got = t->Sample(absl::Seconds(30));
    done.Notify();
  });
  // Wait (bounded) until the sampler is blocked, then read the explanation.
  for (int i = 0; i < 2000 && t->Info().blocked_samples == 0; ++i) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(t->Info().blocked_samples, 1);
  const std::string why = t->Explain();
  EXPECT_NE(why.find("table 'minsize'"), std::string::npos) << why;
  EXPECT_NE(why.find("min_size_to_sample"), std::string::npos) << why;
  ASSERT_TRUE(t->Insert(MakeItem(2)).ok());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  sampler.join();
  ASSERT_TRUE(got.ok()) << got.status();
}

TEST(ReplayTableTest, CloseCancelsBlockedCalls) {
  ReplayTableOptions o;
  o.name = "closing";
  o.rate_limiter = RateLimiterOptions::MinSize(5);
  auto t = MakeTable(std::move(o));
  absl::Notification done;
  Status result;
  std::thread sampler([&] {
    result = t->Sample().status();
    done.Notify();
  });
  for (int i = 0; i < 2000 && t->Info().blocked_samples == 0; ++i) absl::SleepFor(absl::Milliseconds(1));
  t->Close();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  sampler.join();
  EXPECT_TRUE(absl::IsCancelled(result)) << result;
}

TEST(ReplayTableTest, CancelFlagStopsABlockedCall) {
  ReplayTableOptions o;
  o.name = "cancel";
  o.rate_limiter = RateLimiterOptions::MinSize(5);
  auto t = MakeTable(std::move(o));
  bool cancelled = true;
  EXPECT_TRUE(absl::IsCancelled(t->Sample(absl::Seconds(5), &cancelled).status()));
}

TEST(ReplayTableTest, CancelWakesOnlyTheCallWithThatFlag) {
  ReplayTableOptions o;
  o.name = "cancel2";
  o.rate_limiter = RateLimiterOptions::MinSize(5);
  o.watchdog = absl::ZeroDuration();
  auto t = MakeTable(std::move(o));
  bool flag = false;
  absl::Notification done;
  Status result;
  std::thread sampler([&] {
    result = t->Sample(absl::InfiniteDuration(), &flag).status();
    done.Notify();
  });
  for (int i = 0; i < 2000 && t->Info().blocked_samples == 0; ++i) absl::SleepFor(absl::Milliseconds(1));
  t->Cancel(&flag);
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  sampler.join();
  EXPECT_TRUE(absl::IsCancelled(result)) << result;
  ASSERT_TRUE(t->Insert(MakeItem(1)).ok());  // the table itself stays open
}

TEST(ReplayTableTest, SnapshotKeepsInsertionOrder) {
  ReplayTableOptions o;
  o.name = "order";
  auto t = MakeTable(std::move(o));
  const std::vector<ItemKey> keys = {907, 3, 55, 1, 400000, 12};
  for (ItemKey k : keys) ASSERT_TRUE(t->Insert(MakeItem(k)).ok());
  auto snap = t->TakeSnapshot();
  ASSERT_EQ(snap.items.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(snap.items[i].key, keys[i]);
}

TEST(ReplayTableTest, FlexibleBatchTakesWhatIsAvailable) {
  ReplayTableOptions o;
  o.name = "flex";
  o.sampler = NewFifoSelector();
  o.max_times_sampled = 1;
  o.rate_limiter = RateLimiterOptions::Queue(10);
  auto t = MakeTable(std::move(o));
  for (ItemKey k = 1; k <= 3; ++k) ASSERT_TRUE(t->Insert(MakeItem(k)).ok());
  auto b = t->SampleBatch(8, /*flexible=*/true, absl::Seconds(1));
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->size(), 3u);
  EXPECT_EQ(ValueOf((*b)[2]), 3);
  EXPECT_TRUE(absl::IsDeadlineExceeded(t->SampleBatch(2, false, absl::Milliseconds(20)).status()));
}

// Regression: a batch that timed out waiting for all its items used to
// consume (and with max_times_sampled delete) the items it had taken.
TEST(ReplayTableTest, TimedOutFullBatchTakesNothing) {
  ReplayTableOptions o;
  o.name = "allornothing";
  o.sampler = NewFifoSelector();
  o.max_times_sampled = 1;
  o.rate_limiter = RateLimiterOptions::Queue(10);
  auto t = MakeTable(std::move(o));
  ASSERT_TRUE(t->Insert(MakeItem(1)).ok());
  ASSERT_TRUE(t->Insert(MakeItem(2)).ok());
  auto b = t->SampleBatch(3, /*flexible=*/false, absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(b.status())) << b.status();
  EXPECT_EQ(t->Info().size, 2);
  EXPECT_EQ(t->Info().limiter.samples, 0);
  ASSERT_TRUE(t->Insert(MakeItem(3)).ok());
  auto all = t->SampleBatch(3, false, absl::Seconds(5));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 3u);
}

TEST(ReplayTableTest, OverlappingItemsShareChunksAndFreeThemWhenGone) {
  const int64_t before = Chunk::LiveCount();
  {
    ReplayTableOptions o;
    o.name = "nstep";
    o.max_size = 2;
    auto t = MakeTable(std::move(o));
    std::vector<int64_t> steps = {10, 11, 12, 13};
    auto chunk = *Chunk::Make(100, DataType::Scalar(TypeId::kInt64), 4, steps.data());
    ASSERT_TRUE(t->Insert(Item{1, 1, 0, {TrajectoryColumn{"x", {chunk}, 0, 3}}}).ok());
    ASSERT_TRUE(t->Insert(Item{2, 1, 0, {TrajectoryColumn{"x", {chunk}, 1, 3}}}).ok());
    chunk.reset();
    EXPECT_EQ(Chunk::LiveCount(), before + 1);  // one chunk, two items
    std::vector<int64_t> out(3);
    for (const auto& item : t->Items()) {
      ASSERT_TRUE(item->columns[0].Decode(out.data()).ok());
      EXPECT_EQ(out[0], item->key == 1 ? 10 : 11);
    }
    ASSERT_TRUE(t->MutatePriorities({}, {1, 2}).ok());
  }
  EXPECT_EQ(Chunk::LiveCount(), before);
}

TEST(ReplayTableTest, ConcurrentWritersAndSamplersOnAQueueLoseNothing) {
  ReplayTableOptions o;
  o.name = "mpmc";
  o.sampler = NewFifoSelector();
  o.remover = NewFifoSelector();
  o.max_size = 64;
  o.max_times_sampled = 1;
  o.rate_limiter = RateLimiterOptions::Queue(64);
  auto t = MakeTable(std::move(o));
  constexpr int kWriters = 4, kSamplers = 4, kPerWriter = 2000;
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> seen(kSamplers);
  std::atomic<int> failures{0};
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < kPerWriter; ++i) {
        if (!t->Insert(MakeItem(static_cast<ItemKey>(w * kPerWriter + i + 1)), absl::Seconds(30)).ok()) failures++;
      }
    });
  }
  for (int s = 0; s < kSamplers; ++s) {
    threads.emplace_back([&, s] {
      for (int i = 0; i < kWriters * kPerWriter / kSamplers; ++i) {
        auto got = t->Sample(absl::Seconds(30));
        if (!got.ok()) {
          failures++;
          return;
        }
        seen[s].push_back(ValueOf(*got));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::set<int64_t> all;
  size_t total = 0;
  for (const auto& v : seen) {
    total += v.size();
    all.insert(v.begin(), v.end());
  }
  EXPECT_EQ(total, static_cast<size_t>(kWriters * kPerWriter));
  EXPECT_EQ(all.size(), static_cast<size_t>(kWriters * kPerWriter));
  EXPECT_EQ(t->Info().size, 0);
}

}  // namespace
}  // namespace flywheel::replay
