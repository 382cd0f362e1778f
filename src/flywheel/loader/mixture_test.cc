#include "flywheel/loader/mixture.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace flywheel::loader {
namespace {

TEST(MixtureTest, ProportionsAreWithinBinomialBounds) {
  const std::vector<double> w = {1, 2, 7};
  auto m = *Mixture::Create(w, 5);
  const int64_t n = 200000;
  for (int64_t epoch : {0, 3}) {
    std::vector<int64_t> counts(3, 0);
    m.Count(epoch, 0, n, counts.data());
    for (int t = 0; t < 3; ++t) {
      const double p = w[t] / 10;
      const double sd = std::sqrt(n * p * (1 - p));
      EXPECT_NEAR(static_cast<double>(counts[t]), n * p, 5 * sd)
          << "table " << t << " epoch " << epoch;
    }
  }
}

TEST(MixtureTest, CountAgreesWithFillAndIsDeterministic) {
  auto m = *Mixture::Create({3, 1}, 11);
  auto m2 = *Mixture::Create({3, 1}, 11);
  std::vector<int32_t> a(1000), b(1000);
  m.Fill(2, 500, 1500, a.data());
  m2.Fill(2, 500, 1500, b.data());
  EXPECT_EQ(a, b);
  std::vector<int64_t> counts(2, 0);
  m.Count(2, 500, 1500, counts.data());
  int64_t zeros = 0;
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(a[i], m.TableAt(2, 500 + i));
    zeros += a[i] == 0;
  }
  EXPECT_EQ(counts[0], zeros);
  EXPECT_EQ(counts[0] + counts[1], 1000);
  std::vector<int32_t> other(1000);
  m.Fill(3, 500, 1500, other.data());
  EXPECT_NE(a, other);  // each epoch draws anew
}

TEST(MixtureTest, ManyTablesUseEveryTable) {
  std::vector<double> w(40, 1.0);
  auto m = *Mixture::Create(w, 1);
  std::vector<int64_t> counts(40, 0);
  m.Count(0, 0, 40000, counts.data());
  for (int t = 0; t < 40; ++t) EXPECT_NEAR(counts[t], 1000, 5 * std::sqrt(1000.0)) << t;
}

TEST(MixtureTest, RejectsBadWeights) {
  EXPECT_TRUE(absl::IsInvalidArgument(Mixture::Create({}, 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Mixture::Create({1, 0}, 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Mixture::Create({1, -2}, 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Mixture::Create({1, std::nan("")}, 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      Mixture::Create({1, std::numeric_limits<double>::infinity()}, 0).status()));
}

}  // namespace
}  // namespace flywheel::loader
