#include "flywheel/replay/chunk.h"

#include <gtest/gtest.h>

#include <numeric>

#include "flywheel/io/memory_cap_testing.h"

namespace flywheel::replay {
namespace {

using format::DataType;
using format::TypeId;

TEST(ChunkTest, CompressesAndDecodesSlicesWithEveryCodec) {
  std::vector<float> steps(10 * 4);
  std::iota(steps.begin(), steps.end(), 0.f);
  for (auto codec : {format::Codec::kNone, format::Codec::kLz4, format::Codec::kZstd}) {
    auto c = Chunk::Make(7, DataType::Tensor(TypeId::kFloat32, {4}), 10, steps.data(), codec);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*c)->num_steps(), 10);
    std::vector<float> out(3 * 4);
    ASSERT_TRUE((*c)->CopySteps(2, 3, out.data()).ok());
    for (int i = 0; i < 12; ++i) EXPECT_EQ(out[i], 8.f + i);
    EXPECT_TRUE(absl::IsOutOfRange((*c)->CopySteps(8, 3, out.data())));
  }
}

// A chunk whose step count its stored bytes cannot justify (from the wire or
// a checkpoint) is refused before any sample allocates for it.
TEST(ChunkTest, StepCountBeyondWhatTheStoredBytesCanHoldIsRefused) {
  std::vector<float> steps(16, 1.f);
  auto ok = Chunk::Make(1, DataType::Scalar(TypeId::kFloat32), 16, steps.data(), format::Codec::kZstd);
  ASSERT_TRUE(ok.ok()) << ok.status();
  const std::string& stored = (*ok)->compressed();
  for (int64_t claim : {int64_t{1} << 40, int64_t{1} << 30}) {
    // Under a 256 MB address-space cap (the crafted-input suite).
    const std::string got = io::UnderMemoryCap(256, [&]() -> std::string {
      auto lie = Chunk::FromCompressed(2, DataType::Scalar(TypeId::kFloat32), claim, format::Codec::kZstd, stored);
      return lie.ok() ? "ok" : std::string(lie.status().message());
    });
    EXPECT_NE(got.find("cannot hold"), std::string::npos) << claim << ": " << got;
  }
  // What it really holds is accepted.
  EXPECT_TRUE(Chunk::FromCompressed(3, DataType::Scalar(TypeId::kFloat32), 16, format::Codec::kZstd, stored).ok());
}

TEST(ChunkTest, TrajectorySpansChunksAndChecksBounds) {
  std::vector<int32_t> a = {0, 1, 2, 3}, b = {4, 5, 6};
  auto ca = *Chunk::Make(1, DataType::Scalar(TypeId::kInt32), 4, a.data());
  auto cb = *Chunk::Make(2, DataType::Scalar(TypeId::kInt32), 3, b.data());
  TrajectoryColumn col{"x", {ca, cb}, 2, 4};
  ASSERT_TRUE(col.Validate().ok());
  std::vector<int32_t> out(4);
  ASSERT_TRUE(col.Decode(out.data()).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 4, 5}));
  col.length = 6;
  EXPECT_TRUE(absl::IsInvalidArgument(col.Validate()));
  auto cf = *Chunk::Make(3, DataType::Scalar(TypeId::kFloat32), 1, b.data());
  TrajectoryColumn mixed{"x", {ca, cf}, 0, 5};
  EXPECT_TRUE(absl::IsInvalidArgument(mixed.Validate()));
}

TEST(ChunkTest, ChunksAreFreedWithTheLastReference) {
  const int64_t before = Chunk::LiveCount();
  {
    int64_t v = 1;
    auto c = *Chunk::Make(1, DataType::Scalar(TypeId::kInt64), 1, &v);
    TrajectoryColumn a{"x", {c}, 0, 1}, b{"x", {c}, 0, 1};
    c.reset();
    EXPECT_EQ(Chunk::LiveCount(), before + 1);
  }
  EXPECT_EQ(Chunk::LiveCount(), before);
}

}  // namespace
}  // namespace flywheel::replay
