#include "flywheel/replay/writer.h"

#include <gtest/gtest.h>

namespace flywheel::replay {
namespace {

using format::DataType;
using format::TypeId;

std::unique_ptr<ReplayTable> FifoTable(const std::string& name) {
  ReplayTableOptions o;
  o.name = name;
  o.sampler = NewFifoSelector();
  auto t = ReplayTable::Create(std::move(o));
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

// Appends `n` steps: obs = float32[2] {i, -i}, action = int32 i.
void AppendSteps(TrajectoryWriter& w, int first, int n) {
  for (int i = first; i < first + n; ++i) {
    float obs[2] = {static_cast<float>(i), static_cast<float>(-i)};
    int32_t action = i;
    ASSERT_TRUE(w.Append({{"obs", DataType::Tensor(TypeId::kFloat32, {2}), obs},
                          {"action", DataType::Scalar(TypeId::kInt32), &action}})
                    .ok());
  }
}

TEST(TrajectoryWriterTest, ItemsReferenceTheLastStepsAcrossChunks) {
  auto t = FifoTable("t");
  TrajectoryWriter w({{"t", t.get()}}, ReplayWriterOptions{.chunk_length = 4});
  AppendSteps(w, 0, 10);
  auto key = w.CreateItem("t", 1.0, {{"obs", 3}, {"action", 5}});
  ASSERT_TRUE(key.ok()) << key.status();
  auto s = t->Sample();
  ASSERT_TRUE(s.ok());
  const Item& item = *s->item;
  EXPECT_EQ(item.key, *key);
  std::vector<float> obs(6);
  ASSERT_TRUE(item.columns[0].Decode(obs.data()).ok());
  EXPECT_EQ(obs, (std::vector<float>{7, -7, 8, -8, 9, -9}));
  std::vector<int32_t> actions(5);
  ASSERT_TRUE(item.columns[1].Decode(actions.data()).ok());
  EXPECT_EQ(actions, (std::vector<int32_t>{5, 6, 7, 8, 9}));
  // 10 steps with chunk_length 4: chunks of 4, 4, then the 2 pending steps
  // were chunked by CreateItem; the 5 actions span two chunks.
  EXPECT_EQ(item.columns[1].chunks.size(), 2u);
}

TEST(TrajectoryWriterTest, OverlappingItemsShareChunks) {
  auto t = FifoTable("t");
  TrajectoryWriter w({{"t", t.get()}}, ReplayWriterOptions{.chunk_length = 8});
  AppendSteps(w, 0, 8);
  const int64_t live_before = Chunk::LiveCount();
  ASSERT_TRUE(w.CreateItem("t", 1.0, {{"action", 3}}).ok());
  ASSERT_TRUE(w.CreateItem("t", 1.0, {{"action", 2}}).ok());
  EXPECT_EQ(Chunk::LiveCount(), live_before);  // no new chunks: both use the full chunk
  auto a = *t->Sample(), b = *t->Sample();
  EXPECT_EQ(a.item->columns[0].chunks[0].get(), b.item->columns[0].chunks[0].get());
}

TEST(TrajectoryWriterTest, ErrorsAreClear) {
  auto t = FifoTable("t");
  TrajectoryWriter w({{"t", t.get()}}, ReplayWriterOptions{.chunk_length = 2, .max_history = 4});
  AppendSteps(w, 0, 3);
  EXPECT_TRUE(absl::IsNotFound(w.CreateItem("nope", 1, {{"obs", 1}}).status()));
  EXPECT_TRUE(absl::IsNotFound(w.CreateItem("t", 1, {{"reward", 1}}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(w.CreateItem("t", 1, {{"obs", 4}}).status()));
  int64_t wrong = 1;
  Status s = w.Append({{"action", DataType::Scalar(TypeId::kInt64), &wrong}});
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(std::string(s.message()).find("holds int32"), std::string::npos) << s;
  float obs[2] = {0, 0};
  Status missing = w.Append({{"obs", DataType::Tensor(TypeId::kFloat32, {2}), obs}});
  EXPECT_TRUE(absl::IsInvalidArgument(missing));
  EXPECT_NE(std::string(missing.message()).find("no value for column 'action'"), std::string::npos) << missing;
  AppendSteps(w, 3, 20);
  auto dropped = w.CreateItem("t", 1, {{"obs", 20}});
  EXPECT_TRUE(absl::IsOutOfRange(dropped.status())) << dropped.status();
  EXPECT_NE(std::string(dropped.status().message()).find("already dropped"), std::string::npos);
  ASSERT_TRUE(w.EndEpisode().ok());
  EXPECT_TRUE(absl::IsNotFound(w.CreateItem("t", 1, {{"obs", 1}}).status()));
}

}  // namespace
}  // namespace flywheel::replay
