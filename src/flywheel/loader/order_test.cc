#include "flywheel/loader/order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

namespace flywheel::loader {
namespace {

// Every index of [0, n) exactly once.
void ExpectPermutation(const std::vector<int64_t>& v, int64_t n, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(v.size()), n) << what;
  std::vector<uint8_t> seen(n, 0);
  for (int64_t x : v) {
    ASSERT_TRUE(x >= 0 && x < n) << what << ": " << x << " outside [0, " << n << ")";
    ASSERT_FALSE(seen[x]) << what << ": " << x << " twice";
    seen[x] = 1;
  }
}

std::vector<int64_t> Sizes() {
  return {1,   2,    3,    4,    5,    7,    8,    9,    13,   15,    16,    17,
          31,  32,   33,   63,   64,   65,   97,   127,  128,  129,   255,   256,
          257, 1000, 1023, 1024, 1025, 4093, 8191, 8192, 8193, 65521, 65536, 65537};
}

TEST(KeyedBijectionTest, IsExactAndInvertibleForManySizes) {
  for (int64_t n : Sizes()) {
    for (uint64_t key : {0ULL, 1ULL, 0xdeadbeefULL}) {
      KeyedBijection f(static_cast<uint64_t>(n), key);
      std::vector<int64_t> out(n);
      for (int64_t x = 0; x < n; ++x) {
        out[x] = static_cast<int64_t>(f.Forward(static_cast<uint64_t>(x)));
        ASSERT_EQ(f.Inverse(static_cast<uint64_t>(out[x])), static_cast<uint64_t>(x)) << n;
      }
      ExpectPermutation(out, n, "n=" + std::to_string(n));
    }
  }
}

TEST(KeyedBijectionTest, HugeDomainsStayInRangeAndInvert) {
  for (uint64_t n : {(uint64_t{1} << 40) + 3, uint64_t{10'000'000'019}, uint64_t{1} << 62}) {
    KeyedBijection f(n, 42);
    for (uint64_t x : {uint64_t{0}, uint64_t{1}, n / 2, n - 1}) {
      const uint64_t y = f.Forward(x);
      EXPECT_LT(y, n);
      EXPECT_EQ(f.Inverse(y), x);
    }
  }
}

TEST(KeyedBijectionTest, ForwardRangeAgreesWithForward) {
  // Sizes around powers of two (most cycle walking), ranges crossing the
  // 256-input chunks and the 8- and 16-input lanes, and offsets into huge
  // domains; with and without the vector code (where the CPU has it).
  for (bool simd : {true, false}) {
  KeyedBijection::AllowSimdForTesting(simd);
  for (uint64_t n : {uint64_t{1}, uint64_t{5}, uint64_t{257}, uint64_t{1025}, uint64_t{65537},
                     (uint64_t{1} << 40) + 3, uint64_t{1} << 62}) {
    KeyedBijection f(n, 99);
    for (uint64_t first : {uint64_t{0}, n / 3, n > 600 ? n - 600 : uint64_t{0}}) {
      const size_t count = static_cast<size_t>(std::min<uint64_t>(n - first, 600));
      std::vector<uint64_t> got(count);
      f.ForwardRange(first, count, got.data());
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(got[i], f.Forward(first + i)) << "n=" << n << " x=" << first + i << " simd=" << simd;
      }
    }
  }
  }
  KeyedBijection::AllowSimdForTesting(true);
}

TEST(SampleOrderTest, EveryModeIsAPermutationForManySizes) {
  std::vector<OrderOptions> modes = {
      {false, ShuffleMode::kRow, 1, 1},   {true, ShuffleMode::kRow, 1, 1},
      {true, ShuffleMode::kBlock, 1, 1},  {true, ShuffleMode::kBlock, 7, 1},
      {true, ShuffleMode::kBlock, 7, 3},  {true, ShuffleMode::kBlock, 64, 16},
      {true, ShuffleMode::kBlock, 100, 4}};
  for (const auto& m : modes) {
    for (int64_t n : Sizes()) {
      if (n > 10000) continue;
      for (int64_t epoch : {0, 1, 5}) {
        auto o = SampleOrder::Create(n, 7, epoch, m);
        ASSERT_TRUE(o.ok()) << o.status();
        std::vector<int64_t> at(n), fill(n);
        for (int64_t p = 0; p < n; ++p) at[p] = o->At(p);
        o->Fill(0, n, fill.data());
        const std::string what =
            "n=" + std::to_string(n) + " mode=" + std::string(ShuffleModeName(m.mode)) +
            " block=" + std::to_string(m.block_rows) + " window=" + std::to_string(m.window_blocks);
        ExpectPermutation(at, n, what);
        ASSERT_EQ(at, fill) << what;
        // Fill of a sub-range agrees too.
        if (n > 10) {
          std::vector<int64_t> part(n / 2);
          o->Fill(3, 3 + n / 2, part.data());
          ASSERT_TRUE(std::equal(part.begin(), part.end(), at.begin() + 3)) << what;
        }
      }
    }
  }
}

TEST(SampleOrderTest, NoShuffleIsIdentity) {
  auto o = *SampleOrder::Create(100, 1, 3, OrderOptions{false});
  for (int64_t p = 0; p < 100; ++p) EXPECT_EQ(o.At(p), p);
}

TEST(SampleOrderTest, PureFunctionOfSeedAndEpoch) {
  const int64_t n = 1000;
  auto order = [&](uint64_t seed, int64_t epoch) {
    auto o = *SampleOrder::Create(n, seed, epoch, OrderOptions{});
    std::vector<int64_t> v(n);
    o.Fill(0, n, v.data());
    return v;
  };
  EXPECT_EQ(order(1, 0), order(1, 0));
  EXPECT_NE(order(1, 0), order(1, 1));
  EXPECT_NE(order(1, 0), order(2, 0));
  // Different epochs share few fixed positions (like independent shuffles: ~1).
  auto a = order(1, 0), b = order(1, 1);
  int same = 0;
  for (int64_t p = 0; p < n; ++p) same += a[p] == b[p];
  EXPECT_LT(same, 10);
}

TEST(SampleOrderTest, RejectsBadOptions) {
  EXPECT_TRUE(absl::IsInvalidArgument(
      SampleOrder::Create(10, 0, 0, {true, ShuffleMode::kBlock, 0, 4}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      SampleOrder::Create(10, 0, 0, {true, ShuffleMode::kBlock, 4, 0}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SampleOrder::Create(10, 0, -1, OrderOptions{}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseShuffleMode("pages").status()));
  EXPECT_EQ(*ParseShuffleMode("block"), ShuffleMode::kBlock);
}

// Over many epochs, every ordering of a small domain comes up about equally
// often (chi-square over the 120 permutations of 5 elements).
TEST(SampleOrderTest, SmallDomainPermutationsAreNearUniformOverEpochs) {
  const int kEpochs = 60000;
  std::map<std::vector<int64_t>, int> counts;
  for (int e = 0; e < kEpochs; ++e) {
    auto o = *SampleOrder::Create(5, 99, e, OrderOptions{});
    std::vector<int64_t> v(5);
    o.Fill(0, 5, v.data());
    counts[v]++;
  }
  EXPECT_EQ(counts.size(), 120u);
  const double expect = kEpochs / 120.0;
  double chi2 = 0;
  for (const auto& [perm, c] : counts) chi2 += (c - expect) * (c - expect) / expect;
  chi2 += (120 - counts.size()) * expect;
  std::printf("chi-square of 120 permutations over %d epochs: %.1f (119 dof, mean 119, sd 15.4)\n",
              kEpochs, chi2);
  EXPECT_LT(chi2, 119 + 6 * 15.4);
}

// The first two positions over many epochs: every ordered pair of rows
// about equally often.
TEST(SampleOrderTest, LeadingPairIsNearUniformOverEpochs) {
  for (int64_t n : {10, 37}) {
    const int kEpochs = 40000;
    std::map<std::pair<int64_t, int64_t>, int> counts;
    for (int e = 0; e < kEpochs; ++e) {
      auto o = *SampleOrder::Create(n, 5, e, OrderOptions{});
      counts[{o.At(0), o.At(1)}]++;
    }
    const double cells = static_cast<double>(n * (n - 1));
    const double expect = kEpochs / cells;
    double chi2 = (cells - static_cast<double>(counts.size())) * expect;
    for (const auto& [pair, c] : counts) chi2 += (c - expect) * (c - expect) / expect;
    const double dof = cells - 1;
    std::printf("n=%lld: chi-square of leading pairs %.1f (%.0f dof)\n", static_cast<long long>(n),
                chi2, dof);
    EXPECT_LT(chi2, dof + 6 * std::sqrt(2 * dof)) << n;
  }
}

struct Quality {
  double correlation;       // Pearson r of (position, row)
  double displacement;      // mean |row - position| / n (uniform shuffle: 1/3)
  double neighbour_gap;     // mean |row(p+1) - row(p)| / n (uniform shuffle: 1/3)
  double blocks_per_batch;  // distinct 100-row blocks per 256 consecutive positions
};

Quality Measure(const SampleOrder& o) {
  const int64_t n = o.n();
  std::vector<int64_t> v(n);
  o.Fill(0, n, v.data());
  double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0, disp = 0, gap = 0;
  for (int64_t p = 0; p < n; ++p) {
    const double x = static_cast<double>(p), y = static_cast<double>(v[p]);
    sx += x;
    sy += y;
    sxx += x * x;
    syy += y * y;
    sxy += x * y;
    disp += std::abs(y - x);
    if (p + 1 < n) gap += std::abs(static_cast<double>(v[p + 1]) - y);
  }
  const double dn = static_cast<double>(n);
  Quality q;
  q.correlation = (dn * sxy - sx * sy) / std::sqrt((dn * sxx - sx * sx) * (dn * syy - sy * sy));
  q.displacement = disp / dn / dn;
  q.neighbour_gap = gap / (dn - 1) / dn;
  double blocks = 0;
  int batches = 0;
  for (int64_t b = 0; b + 256 <= n; b += 256, ++batches) {
    std::set<int64_t> s;
    for (int64_t p = b; p < b + 256; ++p) s.insert(v[p] / 100);
    blocks += static_cast<double>(s.size());
  }
  q.blocks_per_batch = blocks / batches;
  return q;
}

// The figures docs/loader.md quotes ("Shuffle quality").
TEST(SampleOrderTest, ShuffleQualityFigures) {
  const int64_t n = 1'000'000;
  struct Case {
    const char* name;
    OrderOptions options;
  };
  const Case cases[] = {{"none", {false}},
                        {"row", {true, ShuffleMode::kRow}},
                        {"block 100x16", {true, ShuffleMode::kBlock, 100, 16}},
                        {"block 100x64", {true, ShuffleMode::kBlock, 100, 64}}};
  for (const auto& c : cases) {
    auto o = *SampleOrder::Create(n, 1234, 0, c.options);
    const Quality q = Measure(o);
    std::printf("%-14s r=%+.5f displacement=%.4f neighbour_gap=%.4f blocks/256-batch=%.1f\n",
                c.name, q.correlation, q.displacement, q.neighbour_gap, q.blocks_per_batch);
    if (!c.options.shuffle) continue;
    // Independent shuffles of u units (rows, or blocks in block mode) give
    // r with standard deviation 1/sqrt(u).
    const double units = c.options.mode == ShuffleMode::kRow ? n : n / c.options.block_rows;
    EXPECT_LT(std::abs(q.correlation), 4 / std::sqrt(units)) << c.name;
    EXPECT_NEAR(q.displacement, 1.0 / 3, 0.005) << c.name;
    if (c.options.mode == ShuffleMode::kRow) {
      EXPECT_NEAR(q.neighbour_gap, 1.0 / 3, 0.005) << c.name;
      EXPECT_GT(q.blocks_per_batch, 250);
    } else {
      // Neighbours come from different blocks of the window most of the time,
      // yet a batch reads at most the window's blocks (+1 at a window edge).
      EXPECT_GT(q.neighbour_gap, 0.3) << c.name;
      EXPECT_LE(q.blocks_per_batch, 2.0 * static_cast<double>(c.options.window_blocks)) << c.name;
    }
  }
}

TEST(SampleOrderTest, BlockModeKeepsEachWindowsRowsTogether) {
  // n = 1005 rows, blocks of 10 (the last holds 5), windows of 4 blocks: each
  // run of positions of one window covers whole blocks.
  const OrderOptions opt{true, ShuffleMode::kBlock, 10, 4};
  auto o = *SampleOrder::Create(1005, 3, 2, opt);
  std::vector<int64_t> v(1005);
  o.Fill(0, 1005, v.data());
  int64_t p = 0;
  int windows = 0;
  while (p < 1005) {
    std::set<int64_t> blocks;
    int64_t rows = 0;
    // A window holds 40 rows, or 35 when it holds the short block.
    const int64_t want = std::min<int64_t>(40, 1005 - p);
    for (int64_t i = 0; i < want; ++i) blocks.insert(v[p + i] / 10);
    for (int64_t b : blocks) rows += b == 100 ? 5 : 10;
    if (rows != want) {  // the window held the short block: 35 rows
      blocks.clear();
      rows = 0;
      for (int64_t i = 0; i < 35; ++i) blocks.insert(v[p + i] / 10);
      for (int64_t b : blocks) rows += b == 100 ? 5 : 10;
      ASSERT_EQ(rows, 35) << "window at " << p;
      p += 35;
    } else {
      p += want;
    }
    EXPECT_LE(blocks.size(), 4u);
    windows++;
  }
  EXPECT_EQ(windows, 26);  // ceil(101 / 4)
}

TEST(StreamSeedTest, StreamsDiffer) {
  EXPECT_NE(StreamSeed(1, 0), StreamSeed(1, 1));
  EXPECT_NE(StreamSeed(1, 0), StreamSeed(2, 0));
  EXPECT_EQ(StreamSeed(5, 3), StreamSeed(5, 3));
}

}  // namespace
}  // namespace flywheel::loader
