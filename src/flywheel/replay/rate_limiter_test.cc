#include "flywheel/replay/rate_limiter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace flywheel::replay {
namespace {

using ::testing::HasSubstr;

// Counter-only tests drive one limiter from one thread; the "owning table's
// mutex" rule is about concurrent callers, so they take no lock. Tests that
// wait use a real mutex.

constexpr double kMax = std::numeric_limits<double>::max();
constexpr double kLowest = std::numeric_limits<double>::lowest();

// Bound on any wait in these tests: a bug fails the test instead of hanging it.
constexpr absl::Duration kTestWait = absl::Seconds(10);

// RateLimiter holds a CondVar, so it cannot move; tests build it on the heap.
std::unique_ptr<RateLimiter> WithState(const RateLimiterOptions& o, int64_t inserts,
                                       int64_t deletes, int64_t samples) {
  auto l = std::make_unique<RateLimiter>(o);
  l->set_state({inserts, deletes, samples});
  return l;
}

void Do(RateLimiter& l, int64_t inserts, int64_t samples = 0, int64_t deletes = 0) {
  for (int64_t i = 0; i < inserts; ++i) l.Insert();
  for (int64_t i = 0; i < samples; ++i) l.Sample();
  for (int64_t i = 0; i < deletes; ++i) l.Delete();
}

// ---------------------------------------------------------------- presets

TEST(RateLimiterTest, PresetsHaveReverbParameters) {
  // reverb/rate_limiters.py: MinSize, SampleToInsertRatio (single-number
  // error_buffer), Queue, Stack.
  const auto min_size = RateLimiterOptions::MinSize(7);
  EXPECT_EQ(min_size.samples_per_insert, 1.0);
  EXPECT_EQ(min_size.min_size_to_sample, 7);
  EXPECT_EQ(min_size.min_diff, kLowest);
  EXPECT_EQ(min_size.max_diff, kMax);

  const auto ratio = RateLimiterOptions::SampleToInsertRatio(2.5, 10, 4);
  EXPECT_EQ(ratio.samples_per_insert, 2.5);
  EXPECT_EQ(ratio.min_size_to_sample, 10);
  EXPECT_EQ(ratio.min_diff, 21.0);  // 10 * 2.5 - 4
  EXPECT_EQ(ratio.max_diff, 29.0);  // 10 * 2.5 + 4

  for (const auto& o : {RateLimiterOptions::Queue(5), RateLimiterOptions::Stack(5)}) {
    EXPECT_EQ(o.samples_per_insert, 1.0);
    EXPECT_EQ(o.min_size_to_sample, 1);
    EXPECT_EQ(o.min_diff, 0.0);
    EXPECT_EQ(o.max_diff, 5.0);
  }
}

TEST(RateLimiterTest, DefaultOptionsAreMinSizeOne) {
  const RateLimiterOptions d;
  const auto m = RateLimiterOptions::MinSize(1);
  EXPECT_EQ(d.samples_per_insert, m.samples_per_insert);
  EXPECT_EQ(d.min_size_to_sample, m.min_size_to_sample);
  EXPECT_EQ(d.min_diff, m.min_diff);
  EXPECT_EQ(d.max_diff, m.max_diff);
  EXPECT_TRUE(d.Validate().ok());
}

TEST(RateLimiterTest, MinSizeBlocksSamplesUntilSizeReached) {
  RateLimiter l(RateLimiterOptions::MinSize(3));
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(l.CanSample()) << "after " << i << " inserts";
    EXPECT_TRUE(l.CanInsert());
    l.Insert();
  }
  EXPECT_TRUE(l.CanSample());
  // Sampling never runs out while the table is big enough.
  Do(l, 0, /*samples=*/1000);
  EXPECT_TRUE(l.CanSample());
  // A delete drops the table under the minimum again.
  l.Delete();
  EXPECT_FALSE(l.CanSample());
  l.Insert();
  EXPECT_TRUE(l.CanSample());
}

TEST(RateLimiterTest, MinSizeNeverBlocksInserts) {
  RateLimiter l(RateLimiterOptions::MinSize(2));
  for (int i = 0; i < 10000; ++i) {
    ASSERT_TRUE(l.CanInsert()) << "insert " << i;
    l.Insert();
  }
  EXPECT_TRUE(l.CanInsert(1000000));
}

TEST(RateLimiterTest, QueueBlocksInsertWhenFull) {
  RateLimiter l(RateLimiterOptions::Queue(3));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(l.CanInsert()) << "after " << i << " inserts";
    l.Insert();
  }
  EXPECT_FALSE(l.CanInsert());
  EXPECT_TRUE(l.CanSample());
  // Reading one item (sample, then the table deletes it) frees one slot.
  l.Sample();
  l.Delete();
  EXPECT_TRUE(l.CanInsert());
  l.Insert();
  EXPECT_FALSE(l.CanInsert());
}

TEST(RateLimiterTest, QueueBlocksSampleWhenEmpty) {
  RateLimiter l(RateLimiterOptions::Queue(3));
  EXPECT_FALSE(l.CanSample());
  Do(l, 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(l.CanSample()) << "after " << i << " reads";
    l.Sample();
    l.Delete();
  }
  EXPECT_FALSE(l.CanSample());
  // Each item is read once even when the table does not delete it: the
  // ratio rule alone blocks the second read.
  l.Insert();
  l.Sample();
  EXPECT_EQ(l.state().inserts - l.state().deletes, 1);
  EXPECT_FALSE(l.CanSample());
}

TEST(RateLimiterTest, QueueAllowsInsertIffFewerThanCapacityUnread) {
  // Exhaustive over small states of a queue used as intended (each read
  // item deleted): insert iff unread < n, sample iff unread >= 1.
  for (int64_t n = 1; n <= 4; ++n) {
    for (int64_t inserts = 0; inserts <= 10; ++inserts) {
      for (int64_t reads = 0; reads <= inserts; ++reads) {
        const auto l = WithState(RateLimiterOptions::Queue(n), inserts, reads, reads);
        const int64_t unread = inserts - reads;
        EXPECT_EQ(l->CanInsert(), unread < n)
            << "n=" << n << " inserts=" << inserts << " reads=" << reads;
        EXPECT_EQ(l->CanSample(), unread >= 1)
            << "n=" << n << " inserts=" << inserts << " reads=" << reads;
      }
    }
  }
}

TEST(RateLimiterTest, StackBlocksLikeQueue) {
  for (int64_t inserts = 0; inserts <= 8; ++inserts) {
    for (int64_t reads = 0; reads <= inserts; ++reads) {
      const auto q = WithState(RateLimiterOptions::Queue(3), inserts, reads, reads);
      const auto s = WithState(RateLimiterOptions::Stack(3), inserts, reads, reads);
      EXPECT_EQ(s->CanInsert(), q->CanInsert());
      EXPECT_EQ(s->CanSample(), q->CanSample());
    }
  }
  RateLimiter stack(RateLimiterOptions::Stack(2));
  Do(stack, 2);
  EXPECT_FALSE(stack.CanInsert());
  stack.Sample();
  stack.Delete();
  EXPECT_TRUE(stack.CanInsert());
}

TEST(RateLimiterTest, SampleToInsertRatioBlocksAtExactCounts) {
  // spi 2, min size 10, buffer 4: min_diff 16, max_diff 24.
  RateLimiter l(RateLimiterOptions::SampleToInsertRatio(2, 10, 4));
  // Stage 1: inserts free, samples blocked until 10 items.
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(l.CanInsert()) << i;
    EXPECT_FALSE(l.CanSample()) << i;
    l.Insert();
  }
  EXPECT_TRUE(l.CanSample());
  // 11th insert: 11*2 - 0 = 22 <= 24; 12th: 24 <= 24; 13th: 26 > 24.
  EXPECT_TRUE(l.CanInsert());
  l.Insert();
  EXPECT_TRUE(l.CanInsert());
  l.Insert();
  EXPECT_FALSE(l.CanInsert());
  EXPECT_FALSE(l.CanInsert(1)) << "same as the default";
  // Two samples re-open inserts: 26 - 1 = 25 > 24, 26 - 2 = 24 <= 24.
  l.Sample();
  EXPECT_FALSE(l.CanInsert());
  l.Sample();
  EXPECT_TRUE(l.CanInsert());
  // Samples: 12*2 - s - 1 >= 16 holds for s <= 7, so 6 more after the 2.
  for (int s = 2; s < 8; ++s) {
    EXPECT_TRUE(l.CanSample()) << "samples=" << s;
    l.Sample();
  }
  EXPECT_FALSE(l.CanSample());
  l.Insert();  // 13*2 - 8 - 1 = 17 >= 16
  EXPECT_TRUE(l.CanSample());
}

TEST(RateLimiterTest, BatchCountsMatchReverb) {
  // CanSample(n): inserts*spi - samples - n >= min_diff;
  // CanInsert(n): inserts + n - deletes <= min_size or (inserts+n)*spi - samples <= max_diff.
  const auto l = WithState(RateLimiterOptions::SampleToInsertRatio(1, 10, 5), 12, 0, 0);
  // min_diff 5, max_diff 15.
  EXPECT_TRUE(l->CanSample(6));   // 12 - 6 = 6 >= 5
  EXPECT_TRUE(l->CanSample(7));   // 5 >= 5
  EXPECT_FALSE(l->CanSample(8));  // 4 < 5
  EXPECT_TRUE(l->CanInsert(3));   // 15 <= 15
  EXPECT_FALSE(l->CanInsert(4));  // 16 > 15
  // Below min size a batch of inserts may pass when it ends at min size.
  const auto small = WithState(RateLimiterOptions::Queue(1), 0, 0, 0);
  EXPECT_TRUE(small->CanInsert(1));
  EXPECT_FALSE(small->CanInsert(2));
}

TEST(RateLimiterTest, SampleToInsertRatioKeepsErrorWithinBuffer) {
  struct Config {
    double spi;
    int64_t min_size;
    double buffer;
  };
  for (const Config& c : {Config{1, 10, 1}, Config{2, 10, 2}, Config{0.5, 20, 1}, Config{4, 5, 8},
                          Config{1.5, 8, 3}, Config{32, 100, 64}}) {
    SCOPED_TRACE(absl::StrCat("spi=", c.spi, " min_size=", c.min_size, " buffer=", c.buffer));
    const auto o = RateLimiterOptions::SampleToInsertRatio(c.spi, c.min_size, c.buffer);
    ASSERT_TRUE(o.Validate().ok()) << o.Validate();
    RateLimiter l(o);
    // An actor and a learner taking turns at random; the table evicts
    // above capacity (so deletes happen, as in a real table).
    const int64_t capacity = c.min_size + 5;
    std::mt19937 rng(42);
    int64_t refused_inserts = 0, refused_samples = 0;
    for (int step = 0; step < 20000; ++step) {
      if (rng() % 2 == 0) {
        if (!l.CanInsert()) {
          ++refused_inserts;
          continue;
        }
        l.Insert();
        if (l.state().inserts - l.state().deletes > capacity) l.Delete();
      } else {
        if (!l.CanSample()) {
          ++refused_samples;
          continue;
        }
        l.Sample();
      }
      const RateLimiterState s = l.state();
      ASSERT_FALSE(!l.CanInsert() && !l.CanSample()) << "deadlock at step " << step << "\n"
                                                     << l.Explain();
      if (s.inserts >= c.min_size) {
        const double error = static_cast<double>(s.inserts) * c.spi -
                             static_cast<double>(s.samples) -
                             static_cast<double>(c.min_size) * c.spi;
        ASSERT_LE(std::abs(error), c.buffer) << "step " << step << "\n" << l.Explain();
      }
    }
    // Both sides progressed and were limited; the long-run ratio is spi.
    const RateLimiterState s = l.state();
    EXPECT_GT(s.inserts, 200);
    EXPECT_GT(s.samples, 1000);
    EXPECT_GT(refused_inserts + refused_samples, 0);
    // |inserts*spi - samples| <= buffer + min_size*spi, divided by inserts.
    const double ratio = static_cast<double>(s.samples) / static_cast<double>(s.inserts);
    EXPECT_NEAR(
        ratio, c.spi,
        (c.buffer + c.spi * static_cast<double>(c.min_size)) / static_cast<double>(s.inserts) +
            1e-12);
  }
}

// ------------------------------------------------------------- validation

TEST(RateLimiterTest, ValidateAcceptsPresets) {
  for (const auto& o :
       {RateLimiterOptions::MinSize(1), RateLimiterOptions::MinSize(1000),
        RateLimiterOptions::Queue(1), RateLimiterOptions::Stack(1), RateLimiterOptions::Queue(100),
        RateLimiterOptions::SampleToInsertRatio(1, 1, 1),
        RateLimiterOptions::SampleToInsertRatio(0.25, 1000, 1),
        RateLimiterOptions::SampleToInsertRatio(4, 100, 4),
        RateLimiterOptions::SampleToInsertRatio(0.1, 50, 1)}) {
    EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  }
}

TEST(RateLimiterTest, ValidateRejectsBadSamplesPerInsert) {
  for (double spi : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    RateLimiterOptions o;
    o.samples_per_insert = spi;
    const Status s = o.Validate();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("samples_per_insert must be finite and > 0, got "));
  }
  RateLimiterOptions o;
  o.samples_per_insert = -1.5;
  EXPECT_EQ(o.Validate().message(), "samples_per_insert must be finite and > 0, got -1.5");
}

TEST(RateLimiterTest, ValidateRejectsMinSizeBelowOne) {
  EXPECT_EQ(RateLimiterOptions::MinSize(0).Validate(),
            absl::InvalidArgumentError("min_size_to_sample must be >= 1, got 0"));
  EXPECT_EQ(RateLimiterOptions::MinSize(-3).Validate(),
            absl::InvalidArgumentError("min_size_to_sample must be >= 1, got -3"));
  EXPECT_TRUE(absl::IsInvalidArgument(RateLimiterOptions::SampleToInsertRatio(1, 0, 2).Validate()));
}

TEST(RateLimiterTest, ValidateRejectsMinDiffAboveMaxDiff) {
  RateLimiterOptions o;
  o.min_diff = 5;
  o.max_diff = 2.5;
  EXPECT_EQ(o.Validate(), absl::InvalidArgumentError("min_diff (5) must be <= max_diff (2.5)"));
  EXPECT_EQ(RateLimiterOptions::Queue(-1).Validate(),
            absl::InvalidArgumentError("min_diff (0) must be <= max_diff (-1)"));
  // A negative error_buffer turns the range inside out.
  EXPECT_TRUE(
      absl::IsInvalidArgument(RateLimiterOptions::SampleToInsertRatio(1, 10, -2).Validate()));
}

TEST(RateLimiterTest, ValidateRejectsNonNumberDiffs) {
  const double inf = std::numeric_limits<double>::infinity();
  RateLimiterOptions o;
  o.min_diff = std::nan("");
  EXPECT_EQ(o.Validate(), absl::InvalidArgumentError("min_diff must be a number, got nan"));
  o = RateLimiterOptions();
  o.max_diff = std::nan("");
  EXPECT_EQ(o.Validate(), absl::InvalidArgumentError("max_diff must be a number, got nan"));
  o = RateLimiterOptions();
  o.min_diff = inf;
  o.max_diff = inf;
  EXPECT_THAT(std::string(o.Validate().message()), HasSubstr("min_diff must be < inf"));
  o = RateLimiterOptions();
  o.min_diff = -inf;
  o.max_diff = -inf;
  EXPECT_THAT(std::string(o.Validate().message()), HasSubstr("max_diff must be > -inf"));
  // Infinite bounds on the open side are fine: they mean "no bound".
  o = RateLimiterOptions();
  o.min_diff = -inf;
  o.max_diff = inf;
  EXPECT_TRUE(o.Validate().ok());
}

TEST(RateLimiterTest, ValidateRejectsBufferThatCanDeadlock) {
  // spi 1, buffer 0.5 around 10: once d = 10, an insert needs 11 <= 10.5 and
  // a sample needs 9 >= 9.5. Reverb rejects it too (buffer < max(1, spi)).
  const Status s = RateLimiterOptions::SampleToInsertRatio(1, 10, 0.5).Validate();
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(s.message(),
            "samples_per_insert = 1, min_diff = 9.5, max_diff = 10.5 can deadlock: with "
            "min_size_to_sample (10) "
            "or more items in the table, once inserts*spi - samples = 10 an insert is blocked "
            "((inserts+1)*spi - samples = 11 > max_diff) and so is a sample (inserts*spi - samples "
            "- 1 = 9 < "
            "min_diff); max_diff must be at least 11 (Reverb's SampleToInsertRatio asks for "
            "error_buffer >= "
            "max(1, samples_per_insert))");
  EXPECT_TRUE(absl::IsInvalidArgument(RateLimiterOptions::Queue(0).Validate()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(RateLimiterOptions::SampleToInsertRatio(2, 10, 0.5).Validate()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(RateLimiterOptions::SampleToInsertRatio(1, 10, 0).Validate()));
  // spi 0.1 is not a short binary fraction: the conservative rule asks for
  // max_diff - min_diff >= 1 + spi, i.e. max_diff >= 0.5 + 1.1.
  const Status dense = RateLimiterOptions::SampleToInsertRatio(0.1, 10, 0.5).Validate();
  EXPECT_TRUE(absl::IsInvalidArgument(dense));
  EXPECT_THAT(std::string(dense.message()), HasSubstr("max_diff must be at least 1.6"));
}

// Drives a limiter into the state Validate() predicts for a deadlock: fill
// to min size, then repeatedly churn (delete + insert: d grows by spi while
// the size stays put) and sample as far as allowed. True when some state
// blocks both sides.
bool DeadlockReachable(const RateLimiterOptions& o) {
  RateLimiter l(o);
  for (int64_t i = 0; i < o.min_size_to_sample; ++i) l.Insert();
  for (int round = 0; round < 64; ++round) {
    if (!l.CanInsert() && !l.CanSample()) return true;
    l.Delete();
    l.Insert();
    for (int k = 0; k < 10000 && l.CanSample(); ++k) l.Sample();
    if (!l.CanInsert() && !l.CanSample()) return true;
  }
  return false;
}

// Random walk over inserts, samples and deletes; true when it hits a state
// that blocks both sides.
bool RandomWalkDeadlocks(const RateLimiterOptions& o, uint32_t seed) {
  RateLimiter l(o);
  std::mt19937 rng(seed);
  for (int step = 0; step < 3000; ++step) {
    if (l.state().inserts - l.state().deletes >= o.min_size_to_sample && !l.CanInsert() &&
        !l.CanSample()) {
      return true;
    }
    const uint32_t r = rng() % 10;
    if (r < 4 && l.CanInsert()) {
      l.Insert();
    } else if (r < 8 && l.CanSample()) {
      l.Sample();
    } else if (r == 9 && l.state().inserts > l.state().deletes) {
      l.Delete();
    }
  }
  return false;
}

TEST(RateLimiterTest, ValidateDeadlockCheckIsExactForBinaryFractionSpi) {
  // For every configuration in the grid, Validate() fails iff the limiter
  // can actually reach a state where both sides block.
  int rejected = 0, accepted = 0;
  for (double spi : {0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0}) {
    for (int64_t min_size : {1, 3}) {
      for (double lo : {-1.0, -0.5, 0.0, 0.25}) {
        for (double gap :
             {0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.75, 5.0}) {
          RateLimiterOptions o;
          o.samples_per_insert = spi;
          o.min_size_to_sample = min_size;
          o.min_diff = static_cast<double>(min_size) * spi + lo;
          o.max_diff = o.min_diff + gap;
          const Status s = o.Validate();
          const bool reachable = DeadlockReachable(o);
          EXPECT_EQ(s.ok(), !reachable)
              << "spi=" << spi << " min_size=" << min_size << " min_diff=" << o.min_diff
              << " max_diff=" << o.max_diff << ": " << s;
          if (s.ok()) {
            ++accepted;
            for (uint32_t seed = 0; seed < 3; ++seed) {
              EXPECT_FALSE(RandomWalkDeadlocks(o, seed))
                  << "spi=" << spi << " min_diff=" << o.min_diff << " max_diff=" << o.max_diff;
            }
          } else {
            ++rejected;
          }
        }
      }
    }
  }
  // The grid exercises both outcomes.
  EXPECT_GT(rejected, 50);
  EXPECT_GT(accepted, 50);
}

TEST(RateLimiterTest, ValidateAcceptsEverySampleToInsertRatioReverbAccepts) {
  // Reverb: error_buffer >= max(1, spi) (2*buffer >= 2*max(1, spi)).
  for (double spi : {0.01, 0.1, 0.25, 0.3, 1.0, 1.7, 2.0, 8.0, 100.0}) {
    for (int64_t min_size : {1, 7, 1000}) {
      const double buffer = std::max(1.0, spi);
      const auto o = RateLimiterOptions::SampleToInsertRatio(spi, min_size, buffer);
      EXPECT_TRUE(o.Validate().ok()) << o.Validate();
    }
  }
}

// ---------------------------------------------------------------- waiting

struct BlockedProbe {
  const RateLimiter* limiter;
  int inserts;
  int samples;
};

bool HasBlocked(BlockedProbe* p) {
  return p->limiter->blocked_inserts() == p->inserts && p->limiter->blocked_samples() == p->samples;
}

// Waits (bounded) until exactly that many callers are blocked; returns with
// `mu` held either way, and whether the count was reached.
bool LockWhenBlocked(absl::Mutex& mu, const RateLimiter& l, int inserts, int samples) {
  BlockedProbe probe{&l, inserts, samples};
  return mu.LockWhenWithTimeout(absl::Condition(&HasBlocked, &probe), kTestWait);
}

TEST(RateLimiterTest, AwaitReturnsAtOnceWhenAllowed) {
  absl::Mutex mu;
  RateLimiter l(RateLimiterOptions::Queue(2));
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(l.AwaitCanInsert(&mu, absl::InfiniteDuration()).ok());
  EXPECT_TRUE(l.AwaitCanInsert(&mu, absl::ZeroDuration()).ok());
  l.Insert();
  EXPECT_TRUE(l.AwaitCanSample(&mu, absl::ZeroDuration()).ok());
  EXPECT_EQ(l.blocked_inserts(), 0);
  EXPECT_EQ(l.blocked_samples(), 0);
}

TEST(RateLimiterTest, BlockedSampleIsReleasedByInsert) {
  absl::Mutex mu;
  RateLimiter l(RateLimiterOptions::MinSize(1));
  Status result = absl::UnknownError("not run");
  absl::Notification done;
  std::jthread sampler([&] {
    absl::MutexLock lock(&mu);
    result = l.AwaitCanSample(&mu, kTestWait);
    if (result.ok()) l.Sample();
    done.Notify();
  });
  ASSERT_TRUE(LockWhenBlocked(mu, l, 0, 1));
  EXPECT_THAT(l.Explain(), HasSubstr("needs 1 more insert; 1 caller waiting"));
  l.Insert();
  mu.Unlock();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kTestWait));
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(l.state().samples, 1);
  EXPECT_EQ(l.blocked_samples(), 0);
}

TEST(RateLimiterTest, BlockedInsertIsReleasedBySample) {
  absl::Mutex mu;
  RateLimiter l(RateLimiterOptions::Queue(1));
  l.Insert();
  Status result = absl::UnknownError("not run");
  absl::Notification done;
  std::jthread writer([&] {
    absl::MutexLock lock(&mu);
    result = l.AwaitCanInsert(&mu, kTestWait);
    if (result.ok()) l.Insert();
    done.Notify();
  });
  ASSERT_TRUE(LockWhenBlocked(mu, l, 1, 0));
  l.Sample();
  l.Delete();
  mu.Unlock();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kTestWait));
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(l.state().inserts, 2);
  EXPECT_EQ(l.blocked_inserts(), 0);
}

bool AllFinished(int* finished) { return *finished == 3; }

TEST(RateLimiterTest, EachInsertReleasesOneQueueReader) {
  // Three readers blocked on an empty queue; every insert lets exactly one
  // through (it records its sample under the lock), the others wait again.
  absl::Mutex mu;
  RateLimiter l(RateLimiterOptions::Queue(5));
  int finished = 0;
  std::vector<Status> results(3, absl::UnknownError("not run"));
  {
    std::vector<std::jthread> readers;
    for (int i = 0; i < 3; ++i) {
      readers.emplace_back([&, i] {
        absl::MutexLock lock(&mu);
        results[i] = l.AwaitCanSample(&mu, kTestWait);
        if (results[i].ok()) {
          l.Sample();
          l.Delete();
        }
        ++finished;
      });
    }
    for (int released = 1; released <= 3; ++released) {
      ASSERT_TRUE(LockWhenBlocked(mu, l, 0, 3 - (released - 1)));
      EXPECT_EQ(finished, released - 1);
      l.Insert();
      mu.Unlock();
      if (released < 3) {
        // The one let through finishes; the others block again.
        ASSERT_TRUE(LockWhenBlocked(mu, l, 0, 3 - released));
        EXPECT_EQ(finished, released);
        EXPECT_EQ(l.state().samples, released);
        mu.Unlock();
      }
    }
    ASSERT_TRUE(mu.LockWhenWithTimeout(absl::Condition(&AllFinished, &finished), kTestWait));
    mu.Unlock();
  }
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(l.state().samples, 3);
  EXPECT_FALSE(l.CanSample());
}

TEST(RateLimiterTest, ResetReleasesBlockedInsert) {
  absl::Mutex mu;
  RateLimiter l(RateLimiterOptions::Queue(2));
  Do(l, 2);
  Status result = absl::UnknownError("not run");
  absl::Notification done;
  std::jthread writer([&] {
    absl::MutexLock lock(&mu);
    result = l.AwaitCanInsert(&mu, kTestWait);
    done.Notify();
  });
  ASSERT_TRUE(LockWhenBlocked(mu, l, 1, 0));
  l.Reset();
  mu.Unlock();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kTestWait));
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(l.state().inserts, 0);
}

TEST(RateLimiterTest, AwaitTimesOutWithDeadlineExceededAndExplanation) {
  absl::Mutex mu;
  RateLimiter l(RateLimiterOptions::MinSize(10));
  absl::MutexLock lock(&mu);
  Do(l, 3);
  const absl::Time start = absl::Now();
  const Status s = l.AwaitCanSample(&mu, absl::Milliseconds(50));
  const absl::Duration waited = absl::Now() - start;
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_GE(waited, absl::Milliseconds(50));
  EXPECT_LT(waited, absl::Seconds(3));
  EXPECT_THAT(std::string(s.message()), HasSubstr("rate limiter: sample timed out after 50ms:\n"));
  EXPECT_THAT(
      std::string(s.message()),
      HasSubstr(
          "sample: blocked: inserts - deletes = 3 < min_size_to_sample = 10; needs 7 more inserts; "
          "1 caller waiting"));
  EXPECT_EQ(l.blocked_samples(), 0);
}

TEST(RateLimiterTest, InsertTimesOutWithDeadlineExceededAndExplanation) {
  absl::Mutex mu;
  RateLimiter l(RateLimiterOptions::Queue(2));
  absl::MutexLock lock(&mu);
  Do(l, 2);
  const Status s = l.AwaitCanInsert(&mu, absl::Milliseconds(20));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("insert: blocked: (inserts+1)*spi - samples = 3 "
                                                  "> max_diff = 2; needs 1 more sample (or 2 "
                                                  "more deletes); 1 caller waiting"));
  EXPECT_EQ(l.blocked_inserts(), 0);
}

TEST(RateLimiterTest, ZeroTimeoutOnlyChecks) {
  absl::Mutex mu;
  RateLimiter l(RateLimiterOptions::MinSize(1));
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(absl::IsDeadlineExceeded(l.AwaitCanSample(&mu, absl::ZeroDuration())));
  EXPECT_TRUE(absl::IsDeadlineExceeded(l.AwaitCanSample(&mu, absl::Seconds(-1))));
  l.Insert();
  EXPECT_TRUE(l.AwaitCanSample(&mu, absl::ZeroDuration()).ok());
}

TEST(RateLimiterTest, CancelReleasesAllWaitersWithCancelled) {
  absl::Mutex mu;
  // One limiter per side so both sides wait: an empty one blocks samples,
  // a full queue blocks inserts.
  RateLimiter l(RateLimiterOptions::SampleToInsertRatio(1, 3, 1));
  RateLimiter full(RateLimiterOptions::Queue(1));
  full.Insert();
  Status sample_result = absl::UnknownError("not run"),
         insert_result = absl::UnknownError("not run");
  absl::Notification sample_done, insert_done;
  std::jthread sampler([&] {
    absl::MutexLock lock(&mu);
    sample_result = l.AwaitCanSample(&mu, absl::InfiniteDuration());
    sample_done.Notify();
  });
  std::jthread writer([&] {
    absl::MutexLock lock(&mu);
    insert_result = full.AwaitCanInsert(&mu, absl::InfiniteDuration());
    insert_done.Notify();
  });
  ASSERT_TRUE(LockWhenBlocked(mu, l, 0, 1));
  mu.Unlock();
  ASSERT_TRUE(LockWhenBlocked(mu, full, 1, 0));
  l.Cancel();
  full.Cancel();
  mu.Unlock();
  ASSERT_TRUE(sample_done.WaitForNotificationWithTimeout(kTestWait));
  ASSERT_TRUE(insert_done.WaitForNotificationWithTimeout(kTestWait));
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(absl::IsCancelled(sample_result)) << sample_result;
  EXPECT_TRUE(absl::IsCancelled(insert_result)) << insert_result;
  EXPECT_EQ(sample_result.message(),
            "rate limiter: sample cancelled: the rate limiter was cancelled");
  EXPECT_EQ(l.blocked_samples(), 0);
  EXPECT_EQ(full.blocked_inserts(), 0);
}

TEST(RateLimiterTest, CancelIsPermanent) {
  absl::Mutex mu;
  RateLimiter l(RateLimiterOptions::MinSize(1));
  absl::MutexLock lock(&mu);
  l.Cancel();
  // Even calls that could proceed fail, before and after Reset().
  EXPECT_TRUE(absl::IsCancelled(l.AwaitCanInsert(&mu, absl::InfiniteDuration())));
  l.Reset();
  EXPECT_TRUE(absl::IsCancelled(l.AwaitCanInsert(&mu, absl::InfiniteDuration())));
  EXPECT_THAT(l.Explain(), HasSubstr("; cancelled\n"));
}

TEST(RateLimiterTest, CancelledFlagAtEntryReturnsCancelled) {
  absl::Mutex mu;
  RateLimiter l(RateLimiterOptions::MinSize(1));
  absl::MutexLock lock(&mu);
  const bool cancelled = true;
  const Status s = l.AwaitCanInsert(&mu, absl::InfiniteDuration(), &cancelled);
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_EQ(s.message(), "rate limiter: insert cancelled by the caller");
  const bool not_cancelled = false;
  EXPECT_TRUE(l.AwaitCanInsert(&mu, absl::InfiniteDuration(), &not_cancelled).ok());
}

TEST(RateLimiterTest, CancelledFlagReleasesOnlyItsWaiter) {
  absl::Mutex mu;
  RateLimiter l(RateLimiterOptions::MinSize(1));
  bool cancel_first = false, cancel_second = false;  // guarded by mu
  Status first = absl::UnknownError("not run"), second = absl::UnknownError("not run");
  absl::Notification first_done, second_done;
  std::jthread a([&] {
    absl::MutexLock lock(&mu);
    first = l.AwaitCanSample(&mu, kTestWait, &cancel_first);
    first_done.Notify();
  });
  std::jthread b([&] {
    absl::MutexLock lock(&mu);
    second = l.AwaitCanSample(&mu, kTestWait, &cancel_second);
    second_done.Notify();
  });
  ASSERT_TRUE(LockWhenBlocked(mu, l, 0, 2));
  cancel_first = true;
  l.WakeAll();
  mu.Unlock();
  ASSERT_TRUE(first_done.WaitForNotificationWithTimeout(kTestWait));
  ASSERT_TRUE(LockWhenBlocked(mu, l, 0, 1));  // the other one waits again
  EXPECT_FALSE(second_done.HasBeenNotified());
  l.Insert();
  mu.Unlock();
  ASSERT_TRUE(second_done.WaitForNotificationWithTimeout(kTestWait));
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(absl::IsCancelled(first)) << first;
  EXPECT_TRUE(second.ok()) << second;
}

TEST(RateLimiterTest, SetStateRestoresCountersAndWakes) {
  absl::Mutex mu;
  RateLimiter l(RateLimiterOptions::MinSize(5));
  Status result = absl::UnknownError("not run");
  absl::Notification done;
  std::jthread sampler([&] {
    absl::MutexLock lock(&mu);
    result = l.AwaitCanSample(&mu, kTestWait);
    done.Notify();
  });
  ASSERT_TRUE(LockWhenBlocked(mu, l, 0, 1));
  l.set_state({10, 4, 100});
  mu.Unlock();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kTestWait));
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(l.state().inserts, 10);
  EXPECT_EQ(l.state().deletes, 4);
  EXPECT_EQ(l.state().samples, 100);
}

// ---------------------------------------------------------------- Explain

TEST(RateLimiterTest, ExplainSampleBlockedBySize) {
  const auto l = WithState(RateLimiterOptions::MinSize(10), 3, 0, 0);
  EXPECT_EQ(
      l->Explain(),
      "rate limiter: inserts=3 deletes=0 samples=0 (size 3); samples_per_insert=1 "
      "min_size_to_sample=10 "
      "min_diff=-DBL_MAX max_diff=DBL_MAX\n"
      "insert: may proceed: inserts+1 - deletes = 4 <= min_size_to_sample = 10; 0 callers waiting\n"
      "sample: blocked: inserts - deletes = 3 < min_size_to_sample = 10; needs 7 more inserts; "
      "0 callers waiting");
}

TEST(RateLimiterTest, ExplainSampleBlockedByMinDiff) {
  // A queue whose only item was read but not yet deleted.
  const auto l = WithState(RateLimiterOptions::Queue(5), 1, 0, 1);
  EXPECT_EQ(
      l->Explain(),
      "rate limiter: inserts=1 deletes=0 samples=1 (size 1); samples_per_insert=1 "
      "min_size_to_sample=1 "
      "min_diff=0 max_diff=5\n"
      "insert: may proceed: (inserts+1)*spi - samples = 1 <= max_diff = 5; 0 callers waiting\n"
      "sample: blocked: inserts*spi - samples - 1 = -1 < min_diff = 0; needs 1 more insert; "
      "0 callers waiting");
}

TEST(RateLimiterTest, ExplainSampleBlockedByBoth) {
  // spi 0.5, min size 4, buffer 1: min_diff 1, max_diff 3. After 6 inserts,
  // 4 deletes and 2 samples: size 2 < 4 (needs 2 inserts) and
  // 6*0.5 - 2 - 1 = 0 < 1 (needs 2 inserts): 2. One more delete: 3.
  const auto l = WithState(RateLimiterOptions::SampleToInsertRatio(0.5, 4, 1), 6, 4, 2);
  EXPECT_THAT(l->Explain(),
              HasSubstr("sample: blocked: inserts - deletes = 2 < min_size_to_sample = 4 and "
                        "inserts*spi - samples "
                        "- 1 = 0 < min_diff = 1; needs 2 more inserts; 0 callers waiting"));
  const auto far = WithState(RateLimiterOptions::SampleToInsertRatio(0.5, 4, 1), 6, 5, 2);
  EXPECT_THAT(far->Explain(), HasSubstr("< min_diff = 1; needs 3 more inserts"));
}

TEST(RateLimiterTest, ExplainInsertBlockedByMaxDiff) {
  // spi 2, min size 10, buffer 4: max_diff 24; 13*2 - 0 = 26 > 24.
  const auto l = WithState(RateLimiterOptions::SampleToInsertRatio(2, 10, 4), 12, 0, 0);
  EXPECT_EQ(l->Explain(),
            "rate limiter: inserts=12 deletes=0 samples=0 (size 12); samples_per_insert=2 "
            "min_size_to_sample=10 "
            "min_diff=16 max_diff=24\n"
            "insert: blocked: (inserts+1)*spi - samples = 26 > max_diff = 24; needs 2 more samples "
            "(or 3 more "
            "deletes); 0 callers waiting\n"
            "sample: may proceed: inserts - deletes = 12 >= min_size_to_sample = 10 and "
            "inserts*spi - samples - 1 "
            "= 23 >= min_diff = 16; 0 callers waiting");
}

TEST(RateLimiterTest, ExplainNamesDeadlock) {
  // Options that fail Validate() still explain themselves.
  const auto l = WithState(RateLimiterOptions::SampleToInsertRatio(1, 10, 0.5), 10, 0, 0);
  const std::string e = l->Explain();
  EXPECT_THAT(
      e,
      HasSubstr(
          "insert: blocked: (inserts+1)*spi - samples = 11 > max_diff = 10.5; needs 1 more sample "
          "(or 1 more delete)"));
  EXPECT_THAT(
      e,
      HasSubstr(
          "sample: blocked: inserts*spi - samples - 1 = 9 < min_diff = 9.5; needs 1 more insert"));
  EXPECT_THAT(e, HasSubstr("\nboth sides are blocked: only a delete (or Reset) can make progress"));
}

// The integer right after `marker` on the line of `text` that starts with
// `line_start`, if there is such a line. (No std::regex: GCC 12 warns inside
// <regex> under -fsanitize=address, and the sanitizer build uses -Werror.)
std::optional<int64_t> NumberAfter(const std::string& text, std::string_view line_start,
                                   std::string_view marker) {
  for (std::string_view rest = text; !rest.empty();) {
    const size_t eol = rest.find('\n');
    const std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    if (!line.starts_with(line_start)) continue;
    const size_t at = line.find(marker);
    if (at == std::string_view::npos) return std::nullopt;
    return std::stoll(std::string(line.substr(at + marker.size())));
  }
  return std::nullopt;
}

// Parses the "needs" numbers out of Explain() and checks them against the
// rules: that many operations unblock the side, one fewer does not.
TEST(RateLimiterTest, ExplainNeedsCountsAreExact) {
  std::mt19937 rng(7);
  int checked_inserts = 0, checked_samples = 0;
  for (const auto& o : {RateLimiterOptions::Queue(3), RateLimiterOptions::MinSize(7),
                        RateLimiterOptions::SampleToInsertRatio(2, 10, 4),
                        RateLimiterOptions::SampleToInsertRatio(0.5, 5, 1),
                        RateLimiterOptions::SampleToInsertRatio(3, 2, 3),
                        RateLimiterOptions::SampleToInsertRatio(0.1, 20, 1.5),
                        RateLimiterOptions::SampleToInsertRatio(1.7, 6, 2)}) {
    for (int trial = 0; trial < 400; ++trial) {
      const int64_t inserts = rng() % 40;
      const int64_t deletes = inserts == 0 ? 0 : rng() % (inserts + 1);
      const int64_t samples = rng() % (3 * inserts + 2);
      const auto l = WithState(o, inserts, deletes, samples);
      const std::string e = l->Explain();
      SCOPED_TRACE(e);
      const auto need_samples = NumberAfter(e, "insert: blocked: ", "; needs ");
      const auto need_deletes = NumberAfter(e, "insert: blocked: ", " (or ");
      ASSERT_EQ(need_samples.has_value(), !l->CanInsert());
      if (!l->CanInsert()) {
        ++checked_inserts;
        ASSERT_TRUE(need_deletes.has_value());
        EXPECT_TRUE(WithState(o, inserts, deletes, samples + *need_samples)->CanInsert());
        EXPECT_FALSE(WithState(o, inserts, deletes, samples + *need_samples - 1)->CanInsert());
        EXPECT_TRUE(WithState(o, inserts, deletes + *need_deletes, samples)->CanInsert());
        EXPECT_FALSE(WithState(o, inserts, deletes + *need_deletes - 1, samples)->CanInsert());
      } else {
        EXPECT_THAT(e, HasSubstr("\ninsert: may proceed: "));
      }
      const auto need_inserts = NumberAfter(e, "sample: blocked: ", "; needs ");
      ASSERT_EQ(need_inserts.has_value(), !l->CanSample());
      if (!l->CanSample()) {
        ++checked_samples;
        EXPECT_TRUE(WithState(o, inserts + *need_inserts, deletes, samples)->CanSample());
        EXPECT_FALSE(WithState(o, inserts + *need_inserts - 1, deletes, samples)->CanSample());
      } else {
        EXPECT_THAT(e, HasSubstr("\nsample: may proceed: "));
      }
    }
  }
  EXPECT_GT(checked_inserts, 100);
  EXPECT_GT(checked_samples, 100);
}

}  // namespace
}  // namespace flywheel::replay
