#include "flywheel/envs/internal/home_ranges.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace flywheel::internal_envs {
namespace {

using Chunk = HomeRanges::Chunk;

// Bound on any wait in these tests: a bug fails the test instead of hanging it.
constexpr absl::Duration kTestWait = absl::Seconds(10);

std::vector<std::pair<int64_t, int64_t>> ClaimAll(HomeRanges& r, int thread) {
  std::vector<std::pair<int64_t, int64_t>> got;
  Chunk c;
  while (r.Claim(thread, &c)) got.emplace_back(c.begin, c.end);
  return got;
}

TEST(HomeRangesTest, RangesSplitTheEnvsEvenlyInOrder) {
  HomeRanges r(10, 3);
  ASSERT_EQ(r.num_threads(), 3);
  EXPECT_EQ(r.begin(0), 0);
  EXPECT_EQ(r.end(0), 3);
  EXPECT_EQ(r.begin(1), 3);
  EXPECT_EQ(r.end(1), 6);
  EXPECT_EQ(r.begin(2), 6);
  EXPECT_EQ(r.end(2), 10);
  // About a quarter of the range, at least 1, at most kMaxChunk.
  EXPECT_EQ(r.chunk(0), 1);
  EXPECT_EQ(r.chunk(2), 1);
  HomeRanges big(1000, 1);
  EXPECT_EQ(big.chunk(0), 250);
  HomeRanges huge(100000, 2);
  EXPECT_EQ(huge.chunk(0), HomeRanges::kMaxChunk);
}

TEST(HomeRangesTest, NothingIsClaimableBeforeOpenOrWithoutThreads) {
  HomeRanges r(8, 2);
  Chunk c;
  EXPECT_FALSE(r.Claim(0, &c));
  EXPECT_FALSE(r.Claim(1, &c));
  EXPECT_EQ(r.generation(), 0u);
  HomeRanges none(8, 0);
  none.Open(0);
  EXPECT_FALSE(none.Claim(0, &c));
}

TEST(HomeRangesTest, AThreadClaimsItsOwnRangeInOrderFirst) {
  HomeRanges r(16, 2);  // [0, 8) and [8, 16), chunks of 2
  r.Open(7);
  EXPECT_EQ(r.generation(), 1u);
  Chunk c;
  ASSERT_TRUE(r.Claim(1, &c));
  EXPECT_EQ(c.begin, 8);
  EXPECT_EQ(c.end, 10);
  EXPECT_EQ(c.batch, 7u);
  ASSERT_TRUE(r.Claim(0, &c));
  EXPECT_EQ(c.begin, 0);
  EXPECT_EQ(c.end, 2);
}

TEST(HomeRangesTest, StealsOnlyFromRangesNotStartedOrTwoChunksBehind) {
  HomeRanges r(16, 2);  // [0, 8) and [8, 16), chunks of 2
  r.Open(0);
  // Thread 1 takes its own range, then thread 0's while thread 0 has not
  // started, and goes on while 0 is at least two chunks behind; it leaves
  // the last chunk (less than two chunks left) to thread 0.
  using V = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(ClaimAll(r, 1), (V{{8, 10}, {10, 12}, {12, 14}, {14, 16}, {0, 2}, {2, 4}, {4, 6}}));
  EXPECT_EQ(ClaimAll(r, 0), (V{{6, 8}}));
  // A range whose owner has started and is less than two chunks behind is
  // left alone.
  r.Open(1);
  Chunk c;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(r.Claim(0, &c));  // 0 is at [4, 6)
  EXPECT_EQ(ClaimAll(r, 1), (V{{8, 10}, {10, 12}, {12, 14}, {14, 16}}));
  EXPECT_EQ(ClaimAll(r, 0), (V{{6, 8}}));
}

TEST(HomeRangesTest, OpenMakesEveryEnvClaimableAgainWithTheNewBatch) {
  HomeRanges r(5, 1);  // chunks of 2
  for (uint64_t batch = 0; batch < 3; ++batch) {
    r.Open(batch);
    EXPECT_EQ(r.generation(), batch + 1);
    std::vector<int64_t> envs;
    Chunk c;
    while (r.Claim(0, &c)) {
      EXPECT_EQ(c.batch, batch);
      for (int64_t e = c.begin; e < c.end; ++e) envs.push_back(e);
    }
    EXPECT_EQ(envs, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  }
}

// Threads claim as EnvPool's do (wait for a new generation, claim until
// nothing is left); the driver opens the next batch once every env of the
// current one was claimed. Every env must be claimed exactly once per
// batch, with the batch's number.
TEST(HomeRangesTest, ConcurrentClaimersTakeEveryEnvOncePerBatch) {
  constexpr int kEnvs = 203, kThreads = 4, kBatches = 1000;
  HomeRanges r(kEnvs, kThreads);
  std::vector<std::atomic<int>> claims(static_cast<size_t>(kEnvs) * kBatches);
  std::atomic<int64_t> claimed{0};  // envs claimed in all batches
  std::atomic<bool> stop{false};
  std::atomic<int> wrong_batch{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t seen = 0;
      while (!stop.load(std::memory_order_acquire)) {
        const uint64_t gen = r.generation();
        if (gen == seen) {
          std::this_thread::yield();
          continue;
        }
        seen = gen;
        Chunk c;
        while (r.Claim(t, &c)) {
          if (c.batch >= kBatches) {
            wrong_batch.fetch_add(1);
            continue;
          }
          for (int64_t e = c.begin; e < c.end; ++e) claims[c.batch * kEnvs + e].fetch_add(1);
          claimed.fetch_add(c.end - c.begin, std::memory_order_release);
        }
      }
    });
  }
  bool timed_out = false;
  for (uint64_t batch = 0; batch < kBatches && !timed_out; ++batch) {
    r.Open(batch);
    const absl::Time deadline = absl::Now() + kTestWait;
    while (claimed.load(std::memory_order_acquire) < static_cast<int64_t>(batch + 1) * kEnvs) {
      if (absl::Now() > deadline) {
        timed_out = true;
        break;
      }
      std::this_thread::yield();
    }
  }
  stop.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  ASSERT_FALSE(timed_out);
  EXPECT_EQ(claimed.load(), static_cast<int64_t>(kEnvs) * kBatches);
  EXPECT_EQ(wrong_batch.load(), 0);
  for (int b = 0; b < kBatches; ++b) {
    for (int e = 0; e < kEnvs; ++e) {
      ASSERT_EQ(claims[b * kEnvs + e].load(), 1) << "batch " << b << " env " << e;
    }
  }
}

}  // namespace
}  // namespace flywheel::internal_envs
