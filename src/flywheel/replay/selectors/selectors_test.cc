#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "flywheel/base/rng.h"
#include "flywheel/replay/selectors/interface.h"

namespace flywheel::replay {
namespace {

using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------
// Helpers

// Upper critical value of the chi-square distribution with `dof` degrees of
// freedom at significance 0.001, by the Wilson-Hilferty approximation
//   x = k (1 - 2/(9k) + z sqrt(2/(9k)))^3,  z = Phi^{-1}(0.999),
// which is within 0.15% of the tabulated values for k >= 20 (k = 99: 148.3
// against the table's 148.23). Every sampler below uses a fixed seed, so each
// statistic is one fixed number, not a flaky draw.
double ChiSquareCritical999(int dof) {
  constexpr double kZ999 = 3.090232306167813;  // standard normal 0.999 quantile
  const double k = dof;
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - a + kZ999 * std::sqrt(a), 3);
}

// Pearson's statistic sum (observed - expected)^2 / expected over keys with
// expected probability > 0; `dof` gets (number of such keys) - 1.
double ChiSquare(const std::map<ItemKey, int64_t>& counts, const std::map<ItemKey, double>& probs,
                 int64_t samples, int* dof) {
  double stat = 0;
  int bins = 0;
  for (const auto& [key, p] : probs) {
    if (p == 0) continue;
    const double expected = p * static_cast<double>(samples);
    auto it = counts.find(key);
    const double observed = it == counts.end() ? 0.0 : static_cast<double>(it->second);
    stat += (observed - expected) * (observed - expected) / expected;
    ++bins;
  }
  *dof = bins - 1;
  return stat;
}

std::string Msg(const Status& s) { return std::string(s.message()); }

// Draws `samples` keys; returns how often each key came up.
std::map<ItemKey, int64_t> Histogram(ItemSelector& s, int64_t samples) {
  std::map<ItemKey, int64_t> counts;
  for (int64_t i = 0; i < samples; ++i) {
    auto r = s.Sample();
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) break;
    ++counts[r->key];
  }
  return counts;
}

// p^a / sum p^a with the selector's convention 0^0 = 1; uniform if all zero.
std::map<ItemKey, double> PrioritizedProbs(const std::map<ItemKey, double>& priorities,
                                           double exponent) {
  std::map<ItemKey, double> w;
  double total = 0;
  for (const auto& [k, p] : priorities) {
    w[k] = exponent == 0 ? 1.0 : std::pow(p, exponent);
    total += w[k];
  }
  for (auto& [k, x] : w) x = total == 0 ? 1.0 / static_cast<double>(w.size()) : x / total;
  return w;
}

// Samples then deletes until empty; returns the keys in the order sampled.
std::vector<ItemKey> Drain(ItemSelector& s) {
  std::vector<ItemKey> order;
  while (s.size() > 0) {
    auto r = s.Sample();
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) break;
    EXPECT_EQ(r->probability, 1.0);
    order.push_back(r->key);
    EXPECT_TRUE(s.Delete(r->key).ok());
  }
  return order;
}

void InsertAll(ItemSelector& s, const std::vector<std::pair<ItemKey, double>>& items) {
  for (const auto& [k, p] : items) ASSERT_TRUE(s.Insert(k, p).ok()) << k;
}

// ---------------------------------------------------------------------------
// Behaviour every selector shares (errors, Clear, deletes), parameterized.

struct SelectorCase {
  std::string name;
  std::function<std::unique_ptr<ItemSelector>()> make;
  std::string describe;
};

std::vector<SelectorCase> AllSelectors() {
  return {
      {"Uniform", [] { return NewUniformSelector(7); }, "Uniform"},
      {"Prioritized0", [] { return NewPrioritizedSelector(0, 7); },
       "Prioritized(priority_exponent=0)"},
      {"Prioritized06", [] { return NewPrioritizedSelector(0.6, 7); },
       "Prioritized(priority_exponent=0.6)"},
      {"Prioritized1", [] { return NewPrioritizedSelector(1, 7); },
       "Prioritized(priority_exponent=1)"},
      {"Fifo", [] { return NewFifoSelector(); }, "Fifo"},
      {"Lifo", [] { return NewLifoSelector(); }, "Lifo"},
      {"MinHeap", [] { return NewMinHeapSelector(); }, "MinHeap"},
      {"MaxHeap", [] { return NewMaxHeapSelector(); }, "MaxHeap"},
  };
}

void PrintTo(const SelectorCase& c, std::ostream* os) { *os << c.name; }

class AnySelectorTest : public ::testing::TestWithParam<SelectorCase> {
 protected:
  std::unique_ptr<ItemSelector> s_ = GetParam().make();
};

TEST_P(AnySelectorTest, DescribeNamesTheSelector) {
  EXPECT_EQ(s_->Describe(), GetParam().describe);
}

TEST_P(AnySelectorTest, InsertOfExistingKeyIsAlreadyExistsAndKeepsSize) {
  ASSERT_TRUE(s_->Insert(42, 1.0).ok());
  Status st = s_->Insert(42, 2.0);
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(Msg(st), HasSubstr("key 42"));
  EXPECT_THAT(Msg(st), HasSubstr(GetParam().describe));
  EXPECT_EQ(s_->size(), 1);
}

TEST_P(AnySelectorTest, DeleteOfMissingKeyIsNotFound) {
  ASSERT_TRUE(s_->Insert(1, 1.0).ok());
  Status st = s_->Delete(77);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(st), HasSubstr("key 77"));
  EXPECT_THAT(Msg(st), HasSubstr(GetParam().describe));
  EXPECT_EQ(s_->size(), 1);
  // Deleting twice: the second is NotFound.
  EXPECT_TRUE(s_->Delete(1).ok());
  EXPECT_EQ(s_->Delete(1).code(), absl::StatusCode::kNotFound);
}

TEST_P(AnySelectorTest, UpdateOfMissingKeyIsNotFound) {
  Status st = s_->Update(9, 1.0);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(st), HasSubstr("key 9"));
  EXPECT_THAT(Msg(st), HasSubstr(GetParam().describe));
  EXPECT_EQ(s_->size(), 0);
}

TEST_P(AnySelectorTest, SampleOfEmptySelectorIsFailedPrecondition) {
  auto r = s_->Sample();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(r.status()), HasSubstr(GetParam().describe));
  ASSERT_TRUE(s_->Insert(3, 1.0).ok());
  ASSERT_TRUE(s_->Delete(3).ok());
  EXPECT_EQ(s_->Sample().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(AnySelectorTest, NegativeNanOrInfinitePriorityIsInvalidArgument) {
  for (double bad : {-1.0, -1e-300, kNaN, kInf, -kInf}) {
    Status st = s_->Insert(5, bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(Msg(st), HasSubstr("key 5"));
    EXPECT_THAT(Msg(st), HasSubstr(GetParam().describe));
    EXPECT_EQ(s_->size(), 0);
  }
  // The refused key was not half-inserted.
  ASSERT_TRUE(s_->Insert(5, 2.0).ok());
  for (double bad : {-1.0, kNaN, kInf}) {
    EXPECT_EQ(s_->Update(5, bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto r = s_->Sample();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->key, 5u);
  EXPECT_EQ(r->probability, 1.0);
}

TEST_P(AnySelectorTest, ZeroPriorityIsAccepted) {
  EXPECT_TRUE(s_->Insert(1, 0.0).ok());
  EXPECT_TRUE(s_->Update(1, 0.0).ok());
  auto r = s_->Sample();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->key, 1u);
  EXPECT_EQ(r->probability, 1.0);
}

TEST_P(AnySelectorTest, ClearRemovesEverythingAndKeysCanBeReinserted) {
  for (ItemKey k = 0; k < 100; ++k) ASSERT_TRUE(s_->Insert(k, 1.0 + static_cast<double>(k)).ok());
  s_->Clear();
  EXPECT_EQ(s_->size(), 0);
  EXPECT_EQ(s_->Sample().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s_->Delete(3).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(s_->Insert(3, 1.0).ok());
  auto r = s_->Sample();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->key, 3u);
}

TEST_P(AnySelectorTest, DeletedKeysAreNeverSampled) {
  for (ItemKey k = 0; k < 200; ++k) {
    ASSERT_TRUE(s_->Insert(k, 0.5 + static_cast<double>(k % 7)).ok());
  }
  std::set<ItemKey> live;
  for (ItemKey k = 0; k < 200; ++k) {
    if (k % 3 == 0 || k > 150) {
      ASSERT_TRUE(s_->Delete(k).ok());
    } else {
      live.insert(k);
    }
  }
  ASSERT_EQ(s_->size(), static_cast<int64_t>(live.size()));
  for (int i = 0; i < 20000; ++i) {
    auto r = s_->Sample();
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(live.count(r->key)) << "sampled deleted key " << r->key;
  }
  // Draining by sample + delete visits exactly the live keys.
  std::set<ItemKey> drained;
  while (s_->size() > 0) {
    auto r = s_->Sample();
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(live.count(r->key)) << "sampled deleted key " << r->key;
    ASSERT_TRUE(drained.insert(r->key).second);
    ASSERT_TRUE(s_->Delete(r->key).ok());
  }
  EXPECT_EQ(drained, live);
}

// Randomized differential test against a simple reference model: 10,000
// random operations (inserts, deletes, updates of present and absent keys,
// invalid priorities, samples, the odd Clear), in phases that grow the
// selector to a few hundred keys and shrink it back, checking every status
// code, size(), and each sample against the model.
TEST_P(AnySelectorTest, MatchesReferenceModelUnderRandomOperations) {
  const std::string name = GetParam().name;
  struct Entry {
    double priority;
    uint64_t seq;
  };
  std::map<ItemKey, Entry> model;
  uint64_t seq = 0;
  SplitMix64 rng(12345);
  const double priorities[] = {0.0, 0.5, 1.0, 1.0, 2.0, 3.25, 7.0};  // repeats: heap ties
  auto random_priority = [&] {
    return rng.Uniform(2) ? priorities[rng.Uniform(7)] : 10 * rng.UniformDouble();
  };
  double exponent = name == "Prioritized0" ? 0.0 : name == "Prioritized06" ? 0.6 : 1.0;
  // Coverage of growth and shrinkage: the model peaks above 200 keys and
  // later falls to 30 or fewer (the prioritized tree grows past 256 leaves
  // and shrinks back).
  size_t peak = 0;  // since the last Clear
  size_t max_size = 0;
  bool shrank_after_peak = false;

  for (int op = 0; op < 10000; ++op) {
    const bool growing = (op / 1500) % 2 == 0;
    const uint64_t dice = rng.Uniform(100);
    const uint64_t insert_end = growing ? 40 : 5, delete_end = growing ? 55 : 60;
    // Deletes and updates target a present key 1/4 of the time while growing,
    // 3/4 while shrinking; otherwise a random (often absent) key.
    ItemKey key = rng.Uniform(400);
    if (dice >= insert_end && !model.empty() && rng.Uniform(4) < (growing ? 1u : 3u)) {
      key = std::next(model.begin(), static_cast<long>(rng.Uniform(model.size())))->first;
    }
    if (dice < insert_end) {  // Insert
      const double p = rng.Uniform(50) == 0 ? -1.0 : random_priority();
      Status st = s_->Insert(key, p);
      if (p < 0) {
        ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << op;
      } else if (model.count(key)) {
        ASSERT_EQ(st.code(), absl::StatusCode::kAlreadyExists) << op;
      } else {
        ASSERT_TRUE(st.ok()) << op << ": " << st;
        model[key] = Entry{p, seq++};
      }
    } else if (dice < delete_end) {  // Delete
      Status st = s_->Delete(key);
      if (model.erase(key)) {
        ASSERT_TRUE(st.ok()) << op << ": " << st;
      } else {
        ASSERT_EQ(st.code(), absl::StatusCode::kNotFound) << op;
      }
    } else if (dice < 75) {  // Update
      const double p = random_priority();
      Status st = s_->Update(key, p);
      auto it = model.find(key);
      if (it != model.end()) {
        ASSERT_TRUE(st.ok()) << op << ": " << st;
        it->second.priority = p;  // heaps: ties keep insertion order
      } else {
        ASSERT_EQ(st.code(), absl::StatusCode::kNotFound) << op;
      }
    } else if (dice < 99 || rng.Uniform(40) != 0) {  // Sample
      auto r = s_->Sample();
      if (model.empty()) {
        ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << op;
        continue;
      }
      ASSERT_TRUE(r.ok()) << op << ": " << r.status();
      ASSERT_TRUE(model.count(r->key)) << op << ": sampled absent key " << r->key;
      auto best = model.begin();
      if (name == "Fifo" || name == "Lifo" || name == "MinHeap" || name == "MaxHeap") {
        for (auto it = model.begin(); it != model.end(); ++it) {
          const Entry& a = it->second;
          const Entry& b = best->second;
          bool before = false;
          if (name == "Fifo") before = a.seq < b.seq;
          if (name == "Lifo") before = a.seq > b.seq;
          if (name == "MinHeap")
            before = a.priority < b.priority || (a.priority == b.priority && a.seq < b.seq);
          if (name == "MaxHeap")
            before = a.priority > b.priority || (a.priority == b.priority && a.seq < b.seq);
          if (before) best = it;
        }
        ASSERT_EQ(r->key, best->first) << op;
        ASSERT_EQ(r->probability, 1.0) << op;
      } else if (name == "Uniform") {
        ASSERT_EQ(r->probability, 1.0 / static_cast<double>(model.size())) << op;
      } else {
        std::map<ItemKey, double> pr;
        for (const auto& [k, e] : model) pr[k] = e.priority;
        const double expected = PrioritizedProbs(pr, exponent)[r->key];
        ASSERT_GT(expected, 0) << op << ": sampled a key with zero probability";
        ASSERT_NEAR(r->probability, expected, 1e-12 * expected) << op;
      }
    } else {  // Clear, rarely
      s_->Clear();
      model.clear();
      peak = 0;  // only deletes count as shrinking
    }
    ASSERT_EQ(s_->size(), static_cast<int64_t>(model.size())) << op;
    peak = std::max(peak, model.size());
    max_size = std::max(max_size, model.size());
    if (peak > 200 && model.size() <= 30) shrank_after_peak = true;
  }
  EXPECT_GT(max_size, 200u);
  EXPECT_TRUE(shrank_after_peak);
}

INSTANTIATE_TEST_SUITE_P(AllSelectors, AnySelectorTest, ::testing::ValuesIn(AllSelectors()),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------
// Fifo / Lifo

TEST(FifoSelectorTest, SamplesOldestInsertedFirst) {
  auto s = NewFifoSelector();
  InsertAll(*s, {{5, 9.0}, {3, 1.0}, {8, 4.0}, {1, 0.0}});
  EXPECT_EQ(Drain(*s), (std::vector<ItemKey>{5, 3, 8, 1}));
}

TEST(FifoSelectorTest, DeletesInTheMiddleAndAtTheEndsKeepOrder) {
  auto s = NewFifoSelector();
  InsertAll(*s, {{1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}});
  ASSERT_TRUE(s->Delete(3).ok());
  ASSERT_TRUE(s->Delete(1).ok());  // the head
  ASSERT_TRUE(s->Delete(6).ok());  // the tail
  ASSERT_TRUE(s->Insert(7, 1).ok());
  EXPECT_EQ(Drain(*s), (std::vector<ItemKey>{2, 4, 5, 7}));
}

TEST(FifoSelectorTest, UpdateDoesNotReorderAndReinsertGoesToTheBack) {
  auto s = NewFifoSelector();
  InsertAll(*s, {{1, 1}, {2, 1}, {3, 1}});
  ASSERT_TRUE(s->Update(1, 100).ok());
  ASSERT_TRUE(s->Update(3, 0).ok());
  ASSERT_TRUE(s->Delete(2).ok());
  ASSERT_TRUE(s->Insert(2, 1).ok());
  EXPECT_EQ(Drain(*s), (std::vector<ItemKey>{1, 3, 2}));
}

TEST(LifoSelectorTest, SamplesNewestInsertedFirst) {
  auto s = NewLifoSelector();
  InsertAll(*s, {{5, 9.0}, {3, 1.0}, {8, 4.0}, {1, 0.0}});
  EXPECT_EQ(Drain(*s), (std::vector<ItemKey>{1, 8, 3, 5}));
}

TEST(LifoSelectorTest, DeletesInTheMiddleAndAtTheEndsKeepOrder) {
  auto s = NewLifoSelector();
  InsertAll(*s, {{1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}});
  ASSERT_TRUE(s->Delete(4).ok());
  ASSERT_TRUE(s->Delete(6).ok());  // the newest
  ASSERT_TRUE(s->Delete(1).ok());  // the oldest
  ASSERT_TRUE(s->Update(2, 50).ok());
  ASSERT_TRUE(s->Insert(9, 1).ok());
  EXPECT_EQ(Drain(*s), (std::vector<ItemKey>{9, 5, 3, 2}));
}

// ---------------------------------------------------------------------------
// MinHeap / MaxHeap

TEST(HeapSelectorTest, MinHeapSamplesSmallestPriorityFirst) {
  auto s = NewMinHeapSelector();
  InsertAll(*s, {{1, 5.0}, {2, 0.5}, {3, 9.0}, {4, 0.0}, {5, 2.5}, {6, 7.0}});
  EXPECT_EQ(Drain(*s), (std::vector<ItemKey>{4, 2, 5, 1, 6, 3}));
}

TEST(HeapSelectorTest, MaxHeapSamplesLargestPriorityFirst) {
  auto s = NewMaxHeapSelector();
  InsertAll(*s, {{1, 5.0}, {2, 0.5}, {3, 9.0}, {4, 0.0}, {5, 2.5}, {6, 7.0}});
  EXPECT_EQ(Drain(*s), (std::vector<ItemKey>{3, 6, 1, 5, 2, 4}));
}

TEST(HeapSelectorTest, TiesAreBrokenByInsertionOrderOldestFirst) {
  for (bool max_heap : {false, true}) {
    auto s = max_heap ? NewMaxHeapSelector() : NewMinHeapSelector();
    // Keys deliberately not in key order.
    InsertAll(*s, {{30, 1.0}, {10, 1.0}, {20, 1.0}, {5, 1.0}, {40, 1.0}});
    EXPECT_EQ(Drain(*s), (std::vector<ItemKey>{30, 10, 20, 5, 40})) << max_heap;
  }
}

TEST(HeapSelectorTest, TiesKeepInsertionOrderAfterUpdates) {
  auto s = NewMinHeapSelector();
  InsertAll(*s, {{1, 1.0}, {2, 1.0}, {3, 1.0}});
  // Key 1 leaves the tie group and comes back; it is still the oldest.
  ASSERT_TRUE(s->Update(1, 5.0).ok());
  auto r = s->Sample();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->key, 2u);
  ASSERT_TRUE(s->Update(1, 1.0).ok());
  ASSERT_TRUE(s->Update(2, 1.0).ok());  // same priority: no move
  EXPECT_EQ(Drain(*s), (std::vector<ItemKey>{1, 2, 3}));
}

TEST(HeapSelectorTest, UpdateMovesKeyUpAndDown) {
  auto s = NewMinHeapSelector();
  for (ItemKey k = 1; k <= 20; ++k) ASSERT_TRUE(s->Insert(k, static_cast<double>(k)).ok());
  ASSERT_TRUE(s->Update(15, 0.5).ok());  // to the top
  EXPECT_EQ(s->Sample()->key, 15u);
  ASSERT_TRUE(s->Update(15, 100).ok());  // to the bottom
  EXPECT_EQ(s->Sample()->key, 1u);
  ASSERT_TRUE(s->Update(1, 10.5).ok());  // into the middle
  ASSERT_TRUE(s->Update(7, 2.5).ok());
  std::vector<ItemKey> expected = {2,  7,  3,  4,  5,  6,  8,  9,  10, 1,
                                   11, 12, 13, 14, 16, 17, 18, 19, 20, 15};
  EXPECT_EQ(Drain(*s), expected);
}

TEST(HeapSelectorTest, DeletesInTheMiddleKeepOrder) {
  auto s = NewMaxHeapSelector();
  for (ItemKey k = 1; k <= 30; ++k) ASSERT_TRUE(s->Insert(k, static_cast<double>(k % 10)).ok());
  for (ItemKey k : {9u, 19u, 5u, 14u, 22u, 30u}) ASSERT_TRUE(s->Delete(k).ok());
  // Priorities k % 10 descending; ties by insertion order (= key order here).
  std::vector<ItemKey> expected = {29, 8,  18, 28, 7,  17, 27, 6, 16, 26, 15, 25,
                                   4,  24, 3,  13, 23, 2,  12, 1, 11, 21, 10, 20};
  EXPECT_EQ(Drain(*s), expected);
}

// ---------------------------------------------------------------------------
// Uniform

TEST(ChiSquareHelperTest, CriticalValueMatchesTables) {
  // Tabulated 0.999 quantiles (NIST/SEMATECH e-Handbook, table 1.3.6.7.4).
  EXPECT_NEAR(ChiSquareCritical999(99), 148.230, 0.15);
  EXPECT_NEAR(ChiSquareCritical999(49), 85.351, 0.15);
  EXPECT_NEAR(ChiSquareCritical999(39), 72.055, 0.15);
}

TEST(UniformSelectorTest, ProbabilityIsOneOverSize) {
  auto s = NewUniformSelector(1);
  for (ItemKey k = 0; k < 37; ++k) {
    ASSERT_TRUE(s->Insert(k, static_cast<double>(k)).ok());
    auto r = s->Sample();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->probability, 1.0 / static_cast<double>(k + 1));
    EXPECT_LE(r->key, k);
  }
  for (ItemKey k = 0; k < 30; ++k) ASSERT_TRUE(s->Delete(k).ok());
  auto r = s->Sample();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->probability, 1.0 / 7);
  EXPECT_GE(r->key, 30u);
}

TEST(UniformSelectorTest, PassesChiSquareOver100KeysAnd200kSamples) {
  auto s = NewUniformSelector(2024);
  std::map<ItemKey, double> probs;
  for (ItemKey k = 0; k < 100; ++k) {
    ASSERT_TRUE(s->Insert(1000 + 17 * k, 1.0).ok());
    probs[1000 + 17 * k] = 0.01;
  }
  const int64_t n = 200000;
  int dof = 0;
  const double stat = ChiSquare(Histogram(*s, n), probs, n, &dof);
  ASSERT_EQ(dof, 99);
  EXPECT_LT(stat, ChiSquareCritical999(dof)) << stat;
}

TEST(UniformSelectorTest, StaysUniformAfterSwapRemoveDeletes) {
  auto s = NewUniformSelector(5);
  std::map<ItemKey, double> probs;
  for (ItemKey k = 0; k < 100; ++k) ASSERT_TRUE(s->Insert(k, 1.0).ok());
  for (ItemKey k = 0; k < 100; ++k) {
    if (k % 2 == 0) {
      ASSERT_TRUE(s->Delete(k).ok());
    } else {
      probs[k] = 1.0 / 50;
    }
  }
  const int64_t n = 100000;
  int dof = 0;
  const double stat = ChiSquare(Histogram(*s, n), probs, n, &dof);
  ASSERT_EQ(dof, 49);
  EXPECT_LT(stat, ChiSquareCritical999(dof)) << stat;
}

TEST(UniformSelectorTest, SameSeedGivesSameSequenceDifferentSeedDoesNot) {
  auto a = NewUniformSelector(99), b = NewUniformSelector(99), c = NewUniformSelector(100);
  for (ItemKey k = 0; k < 1000; ++k) {
    ASSERT_TRUE(a->Insert(k, 1).ok());
    ASSERT_TRUE(b->Insert(k, 1).ok());
    ASSERT_TRUE(c->Insert(k, 1).ok());
  }
  int differ = 0;
  for (int i = 0; i < 1000; ++i) {
    const ItemKey ka = a->Sample()->key;
    ASSERT_EQ(ka, b->Sample()->key);
    differ += ka != c->Sample()->key;
  }
  EXPECT_GT(differ, 900);
}

// ---------------------------------------------------------------------------
// Prioritized

// 40 keys with priorities 0.25, 0.35, ..., 4.15 and key 40 with priority 0.
std::map<ItemKey, double> ChiSquarePriorities() {
  std::map<ItemKey, double> p;
  for (ItemKey k = 0; k < 40; ++k) p[k] = 0.25 + 0.1 * static_cast<double>(k);
  p[40] = 0.0;
  return p;
}

class PrioritizedDistributionTest : public ::testing::TestWithParam<double> {};

TEST_P(PrioritizedDistributionTest, MatchesPriorityPowerOverSumByChiSquare) {
  const double exponent = GetParam();
  const std::map<ItemKey, double> priorities = ChiSquarePriorities();
  const std::map<ItemKey, double> probs = PrioritizedProbs(priorities, exponent);
  auto s = NewPrioritizedSelector(exponent, 31337);
  for (const auto& [k, p] : priorities) ASSERT_TRUE(s->Insert(k, p).ok());

  const int64_t n = 200000;
  std::map<ItemKey, int64_t> counts;
  for (int64_t i = 0; i < n; ++i) {
    auto r = s->Sample();
    ASSERT_TRUE(r.ok());
    ++counts[r->key];
    // The reported probability is the model's, to rounding of the sum.
    const double expected = probs.at(r->key);
    ASSERT_NEAR(r->probability, expected, 1e-14 * expected) << r->key;
  }
  int dof = 0;
  const double stat = ChiSquare(counts, probs, n, &dof);
  EXPECT_EQ(dof, exponent == 0 ? 40 : 39);
  EXPECT_LT(stat, ChiSquareCritical999(dof)) << stat;
  if (exponent > 0) {
    EXPECT_EQ(counts.count(40), 0u) << "priority 0 was sampled";
  } else {
    EXPECT_GT(counts[40], 0) << "exponent 0 must sample priority-0 keys too";
  }
  // The test can tell distributions apart: the same counts are far off the
  // model of a different exponent.
  int wrong_dof = 0;
  const double wrong =
      ChiSquare(counts, PrioritizedProbs(priorities, exponent == 0.6 ? 1.0 : 0.6), n, &wrong_dof);
  EXPECT_GT(wrong, 10 * ChiSquareCritical999(wrong_dof)) << wrong;
}

INSTANTIATE_TEST_SUITE_P(Exponents, PrioritizedDistributionTest, ::testing::Values(0.0, 0.6, 1.0),
                         [](const auto& info) {
                           return info.param == 0   ? std::string("Exponent0")
                                  : info.param == 1 ? std::string("Exponent1")
                                                    : std::string("Exponent06");
                         });

TEST(PrioritizedSelectorTest, ProbabilitiesAreExactlyThoseOfTheModel) {
  // Integer priorities with exponent 1 and any priorities with exponent 0
  // have exact sums, so the reported probabilities equal the model's bits.
  auto s = NewPrioritizedSelector(1.0, 3);
  InsertAll(*s, {{1, 1.0}, {2, 2.0}, {3, 5.0}, {4, 0.0}});
  std::map<ItemKey, double> expected = {{1, 1.0 / 8}, {2, 2.0 / 8}, {3, 5.0 / 8}};
  std::set<ItemKey> seen;
  for (int i = 0; i < 1000; ++i) {
    auto r = s->Sample();
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(expected.count(r->key)) << r->key;
    EXPECT_EQ(r->probability, expected[r->key]);
    seen.insert(r->key);
  }
  EXPECT_EQ(seen.size(), 3u);

  auto u = NewPrioritizedSelector(0.0, 3);
  InsertAll(*u, {{1, 0.0}, {2, 7.5}, {3, 1e-9}});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(u->Sample()->probability, 1.0 / 3);
}

TEST(PrioritizedSelectorTest, AllZeroPrioritiesSampleUniformly) {
  auto s = NewPrioritizedSelector(0.6, 77);
  std::map<ItemKey, double> probs;
  for (ItemKey k = 0; k < 50; ++k) {
    ASSERT_TRUE(s->Insert(k, 0.0).ok());
    probs[k] = 1.0 / 50;
  }
  const int64_t n = 100000;
  std::map<ItemKey, int64_t> counts;
  for (int64_t i = 0; i < n; ++i) {
    auto r = s->Sample();
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->probability, 1.0 / 50);
    ++counts[r->key];
  }
  int dof = 0;
  const double stat = ChiSquare(counts, probs, n, &dof);
  EXPECT_LT(stat, ChiSquareCritical999(dof)) << stat;
  // One positive priority takes every sample.
  ASSERT_TRUE(s->Update(17, 0.25).ok());
  for (int i = 0; i < 1000; ++i) {
    auto r = s->Sample();
    ASSERT_EQ(r->key, 17u);
    ASSERT_EQ(r->probability, 1.0);
  }
  // And back to all zero: uniform again.
  ASSERT_TRUE(s->Update(17, 0.0).ok());
  std::set<ItemKey> seen;
  for (int i = 0; i < 2000; ++i) seen.insert(s->Sample()->key);
  EXPECT_EQ(seen.size(), 50u);
}

TEST(PrioritizedSelectorTest, MatchesModelAfterDeletesAndUpdatesByChiSquare) {
  SplitMix64 rng(8);
  auto s = NewPrioritizedSelector(0.6, 8);
  std::map<ItemKey, double> priorities;
  for (ItemKey k = 0; k < 300; ++k) {
    const double p = 10 * rng.UniformDouble();
    ASSERT_TRUE(s->Insert(k, p).ok());
    priorities[k] = p;
  }
  // Delete down to 60 keys (the tree shrinks) and update the rest.
  for (ItemKey k = 0; k < 300; ++k) {
    if (k % 5 != 0) {
      ASSERT_TRUE(s->Delete(k).ok());
      priorities.erase(k);
    }
  }
  for (auto& [k, p] : priorities) {
    p = 0.1 + 5 * rng.UniformDouble();
    ASSERT_TRUE(s->Update(k, p).ok());
  }
  const std::map<ItemKey, double> probs = PrioritizedProbs(priorities, 0.6);
  const int64_t n = 200000;
  int dof = 0;
  const double stat = ChiSquare(Histogram(*s, n), probs, n, &dof);
  ASSERT_EQ(dof, 59);
  EXPECT_LT(stat, ChiSquareCritical999(dof)) << stat;
}

// Numerical stability: 2,000,000 updates whose weights span 18 orders of
// magnitude (where summing deltas into the tree would leave absolute errors
// far larger than the final weights), then a final pass to small priorities;
// every reported probability must match a brute-force sum to 1e-9 relative,
// and the selector must behave exactly like one built from scratch.
TEST(PrioritizedSelectorTest, StaysExactAfterTwoMillionRandomUpdates) {
  constexpr int kKeys = 1000;
  auto s = NewPrioritizedSelector(1.0, 4242);
  SplitMix64 rng(1);
  std::vector<double> priority(kKeys);
  for (int k = 0; k < kKeys; ++k) {
    priority[k] = rng.UniformDouble();
    ASSERT_TRUE(s->Insert(k, priority[k]).ok());
  }
  for (int i = 0; i < 2000000; ++i) {
    const int k = static_cast<int>(rng.Uniform(kKeys));
    priority[k] = std::pow(10.0, -6.0 + 18.0 * rng.UniformDouble());  // 1e-6 .. 1e12
    ASSERT_TRUE(s->Update(k, priority[k]).ok());
  }
  for (int k = 0; k < kKeys; ++k) {
    priority[k] = 0.001 + rng.UniformDouble();
    ASSERT_TRUE(s->Update(k, priority[k]).ok());
  }
  long double exact = 0;
  for (double p : priority) exact += p;
  auto fresh = NewPrioritizedSelector(1.0, 4242);
  for (int k = 0; k < kKeys; ++k) ASSERT_TRUE(fresh->Insert(k, priority[k]).ok());
  for (int i = 0; i < 10000; ++i) {
    auto r = s->Sample();
    ASSERT_TRUE(r.ok());
    const double expected = static_cast<double>(priority[r->key] / exact);
    ASSERT_NEAR(r->probability, expected, 1e-9 * expected) << r->key;
    auto f = fresh->Sample();
    ASSERT_EQ(r->key, f->key);
    ASSERT_EQ(r->probability, f->probability);
  }
}

TEST(PrioritizedSelectorTest, ZeroPriorityIsNeverSampledWhileOthersArePositive) {
  auto s = NewPrioritizedSelector(1.0, 11);
  InsertAll(*s, {{1, 0.0}, {2, 1e-300}, {3, 0.0}});
  for (int i = 0; i < 1000; ++i) {
    auto r = s->Sample();
    ASSERT_EQ(r->key, 2u);
    ASSERT_EQ(r->probability, 1.0);
  }
}

TEST(PrioritizedSelectorTest, InvalidExponentRefusesEveryInsertAndUpdate) {
  for (double bad : {-0.5, kNaN, kInf}) {
    auto s = NewPrioritizedSelector(bad);
    Status st = s->Insert(1, 1.0);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(Msg(st), HasSubstr("priority_exponent must be finite and >= 0"));
    EXPECT_EQ(s->size(), 0);
  }
}

TEST(PrioritizedSelectorTest, WeightOrTotalOverflowIsInvalidArgumentAndChangesNothing) {
  auto s = NewPrioritizedSelector(2.0, 1);
  Status st = s->Insert(1, 1e200);  // 1e400 is not a double
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(st), HasSubstr("overflow"));
  EXPECT_EQ(s->size(), 0);

  auto t = NewPrioritizedSelector(1.0, 1);
  ASSERT_TRUE(t->Insert(1, 1e308).ok());
  ASSERT_TRUE(t->Insert(2, 1e307).ok());
  st = t->Insert(3, 1e308);  // sum 2.1e308 > DBL_MAX
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(st), HasSubstr("overflow"));
  EXPECT_EQ(t->size(), 2);
  EXPECT_EQ(t->Update(2, 1e308).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Delete(3).code(), absl::StatusCode::kNotFound);
  std::set<ItemKey> seen;
  for (int i = 0; i < 2000; ++i) {
    auto r = t->Sample();
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->probability, (r->key == 1 ? 1e308 : 1e307) / (1e308 + 1e307));
    seen.insert(r->key);
  }
  EXPECT_EQ(seen, (std::set<ItemKey>{1, 2}));
}

TEST(PrioritizedSelectorTest, SameSeedGivesSameSequence) {
  auto a = NewPrioritizedSelector(0.6, 5), b = NewPrioritizedSelector(0.6, 5);
  for (ItemKey k = 0; k < 500; ++k) {
    ASSERT_TRUE(a->Insert(k, static_cast<double>(k % 13)).ok());
    ASSERT_TRUE(b->Insert(k, static_cast<double>(k % 13)).ok());
  }
  for (int i = 0; i < 1000; ++i) {
    auto ra = a->Sample(), rb = b->Sample();
    ASSERT_EQ(ra->key, rb->key);
    ASSERT_EQ(ra->probability, rb->probability);
  }
}

}  // namespace
}  // namespace flywheel::replay
