#include "flywheel/loader/partition.h"

#include <gtest/gtest.h>

#include <vector>

namespace flywheel::loader {
namespace {

TEST(PartitionTest, FullGlobalBatchIsRankOrderedConcatenation) {
  PartitionOptions o{32, 0, 4, false};
  for (int r = 0; r < 4; ++r) {
    o.rank = r;
    const PositionRange p = RankBatch(1000, 128, o);
    EXPECT_EQ(p.begin, 128 + r * 32);
    EXPECT_EQ(p.end, 128 + (r + 1) * 32);
  }
  EXPECT_EQ(NextGlobalStart(1000, 128, o), 256);
  EXPECT_EQ(NextGlobalStart(1000, 896, o), 1000);
}

// Every position of the epoch exactly once, every rank the same number of
// batches, tail batches within one row of each other.
TEST(PartitionTest, EveryPositionOnceAcrossRanksWithoutDropLast) {
  for (int w = 1; w <= 5; ++w) {
    for (int64_t b : {1, 3, 8}) {
      for (int64_t n : {0, 1, 2, 5, 7, 24, 25, 100, 101}) {
        std::vector<int> seen(n, 0);
        PartitionOptions o{b, 0, w, false};
        const int64_t served = ServedPositions(n, o);
        ASSERT_EQ(served, n);
        int64_t batches = 0;
        for (int64_t s = 0; s < served; s = NextGlobalStart(served, s, o)) {
          int64_t lo = INT64_MAX, hi = 0;
          for (int r = 0; r < w; ++r) {
            o.rank = r;
            const PositionRange p = RankBatch(served, s, o);
            ASSERT_LE(p.size(), b);
            ASSERT_GE(p.size(), 0);
            lo = std::min(lo, p.size());
            hi = std::max(hi, p.size());
            for (int64_t i = p.begin; i < p.end; ++i) seen[i]++;
          }
          EXPECT_LE(hi - lo, 1) << "w=" << w << " b=" << b << " n=" << n;
          batches++;
        }
        EXPECT_EQ(batches, BatchesPerEpoch(served, o));
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(seen[i], 1) << "w=" << w << " b=" << b << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(PartitionTest, TailWithFewerRowsThanRanksGivesSomeRanksEmptyBatches) {
  PartitionOptions o{4, 0, 4, false};
  // 18 positions: one full global batch (16), then 2 left for 4 ranks.
  std::vector<int64_t> sizes;
  for (int r = 0; r < 4; ++r) {
    o.rank = r;
    sizes.push_back(RankBatch(18, 16, o).size());
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{1, 1, 0, 0}));
}

TEST(PartitionTest, DropLastServesOnlyFullGlobalBatches) {
  PartitionOptions o{8, 1, 3, true};
  EXPECT_EQ(ServedPositions(100, o), 96);
  EXPECT_EQ(BatchesPerEpoch(96, o), 4);
  for (int64_t s = 0; s < 96; s = NextGlobalStart(96, s, o))
    EXPECT_EQ(RankBatch(96, s, o).size(), 8);
  EXPECT_EQ(ServedPositions(23, o), 0);
}

TEST(PartitionTest, ValidateNamesTheBadField) {
  EXPECT_TRUE(absl::IsInvalidArgument((PartitionOptions{0, 0, 1, false}.Validate())));
  auto s = PartitionOptions{4, 2, 2, false}.Validate();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("rank"), absl::string_view::npos) << s;
  EXPECT_TRUE(absl::IsInvalidArgument((PartitionOptions{4, 0, 0, false}.Validate())));
  EXPECT_TRUE(absl::IsInvalidArgument((PartitionOptions{4, -1, 2, false}.Validate())));
  EXPECT_TRUE((PartitionOptions{4, 1, 2, true}.Validate().ok()));
}

}  // namespace
}  // namespace flywheel::loader
