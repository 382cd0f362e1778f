#include "flywheel/table/deletion_vector.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace flywheel::table {
namespace {

TEST(DeletionVectorTest, LiveToPhysicalSkipsDeletedRows) {
  DeletionVector dv({0, 3, 4, 9});
  // Physical rows 0..11 minus {0,3,4,9} = 1 2 5 6 7 8 10 11.
  const std::vector<int64_t> live = {1, 2, 5, 6, 7, 8, 10, 11};
  for (size_t i = 0; i < live.size(); ++i) EXPECT_EQ(dv.LiveToPhysical(static_cast<int64_t>(i)), live[i]);
  EXPECT_TRUE(dv.Contains(4));
  EXPECT_FALSE(dv.Contains(5));
}

TEST(DeletionVectorTest, LiveToPhysicalMatchesBruteForceOnRandomSets) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 500);
    std::set<int64_t> del;
    for (int64_t r = 0; r < n; ++r) {
      if (rng() % 3 == 0) del.insert(r);
    }
    DeletionVector dv(std::vector<int64_t>(del.begin(), del.end()));
    int64_t live = 0;
    for (int64_t r = 0; r < n; ++r) {
      if (del.count(r)) continue;
      ASSERT_EQ(dv.LiveToPhysical(live), r);
      live++;
    }
  }
}

TEST(DeletionVectorTest, UnionReportsOverlap) {
  bool overlap = true;
  auto u = DeletionVector({1, 5}).Union(DeletionVector({2, 6}), &overlap);
  EXPECT_FALSE(overlap);
  EXPECT_EQ(u.rows(), (std::vector<int64_t>{1, 2, 5, 6}));
  DeletionVector({1, 5}).Union(DeletionVector({5}), &overlap);
  EXPECT_TRUE(overlap);
}

TEST(DeletionVectorTest, EncodeDecodeAndCorruption) {
  DeletionVector dv({0, 7, 1000, 1001});
  const std::string data = dv.Encode();
  auto back = DeletionVector::Decode(data, 2000, "d.dv");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rows(), dv.rows());
  // Rows beyond the fragment are refused.
  EXPECT_TRUE(absl::IsDataLoss(DeletionVector::Decode(data, 1001, "d.dv").status()));
  for (size_t i = 0; i < data.size(); ++i) {
    std::string bad = data;
    bad[i] ^= 0x40;
    auto r = DeletionVector::Decode(bad, 2000, "d.dv");
    ASSERT_FALSE(r.ok()) << "flip at " << i;
    EXPECT_NE(std::string(r.status().message()).find("d.dv"), std::string::npos);
  }
  for (size_t len = 0; len < data.size(); ++len) {
    EXPECT_FALSE(DeletionVector::Decode(data.substr(0, len), 2000, "d.dv").ok()) << len;
  }
}

}  // namespace
}  // namespace flywheel::table
