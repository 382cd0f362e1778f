#include "flywheel/envs/internal/env_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace flywheel::internal_envs {
namespace {

// Bound on any wait in these tests: a bug fails the test instead of hanging it.
constexpr absl::Duration kTestWait = absl::Seconds(10);

TEST(EnvQueueTest, ChunkBoundsFollowBatchSizeAndThreads) {
  EnvQueue q(64, 64, 2);  // share 1/4; at most 64 / 4, at least 64 / 16
  EXPECT_EQ(q.max_chunk(), 16u);
  EXPECT_EQ(q.min_chunk(), 4u);
  EnvQueue small(8, 3, 4);  // never below 1
  EXPECT_EQ(small.max_chunk(), 1u);
  EXPECT_EQ(small.min_chunk(), 1u);
  EnvQueue big(100000, 50000, 1);  // never above kMaxChunk
  EXPECT_EQ(big.max_chunk(), EnvQueue::kMaxChunk);
  EXPECT_EQ(big.min_chunk(), EnvQueue::kMaxChunk);
}

TEST(EnvQueueTest, IdsAreInvisibleUntilPublished) {
  EnvQueue q(4, 4, 1);
  int32_t ids[EnvQueue::kMaxChunk];
  q.Push(3);
  EXPECT_FALSE(q.HasWork());
  EXPECT_EQ(q.TryClaim(ids), 0u);
  q.Publish();
  EXPECT_TRUE(q.HasWork());
  ASSERT_EQ(q.TryClaim(ids), 1u);
  EXPECT_EQ(ids[0], 3);
  EXPECT_FALSE(q.HasWork());
  EXPECT_EQ(q.TryClaim(ids), 0u);
}

TEST(EnvQueueTest, ClaimsAreFirstInFirstOutInGuidedChunks) {
  EnvQueue q(64, 64, 2);  // chunks: a quarter of what waits, in [4, 16]
  for (int32_t e = 63; e >= 0; --e) q.Push(e);
  q.Publish();
  std::vector<uint64_t> sizes;
  std::vector<int32_t> order;
  int32_t ids[EnvQueue::kMaxChunk];
  for (uint64_t c; (c = q.TryClaim(ids)) > 0;) {
    sizes.push_back(c);
    order.insert(order.end(), ids, ids + c);
  }
  // 64 waiting: 16; 48: 12; 36: 9; 27: 7; 20: 5; 15: 4; 11, 7: the floor, 4;
  // the last 3.
  EXPECT_EQ(sizes, (std::vector<uint64_t>{16, 12, 9, 7, 5, 4, 4, 4, 3}));
  std::vector<int32_t> pushed;
  for (int32_t e = 63; e >= 0; --e) pushed.push_back(e);
  EXPECT_EQ(order, pushed);
}

TEST(EnvQueueTest, EntriesWrapAroundTheRingWithinAChunk) {
  EnvQueue q(5, 40, 1);  // capacity 5; chunks of at least 5: all that waits
  int32_t ids[EnvQueue::kMaxChunk];
  int32_t next = 0;
  for (int round = 0; round < 12; ++round) {
    const int32_t first = next;
    const int count = 1 + (round * 3) % 5;  // 1, 4, 2, 5, 3, ...: chunks straddle the end
    for (int k = 0; k < count; ++k) q.Push(next++);
    q.Publish();
    ASSERT_EQ(q.TryClaim(ids), static_cast<uint64_t>(count)) << "round " << round;
    for (int k = 0; k < count; ++k) EXPECT_EQ(ids[k], first + k) << "round " << round;
    EXPECT_EQ(q.TryClaim(ids), 0u);
  }
}

// One driver pushes a sequence of numbers, never more than `capacity` ahead
// of the ones consumers have finished with (EnvPool's invariant: at most N
// envs in flight); consumers claim concurrently. Every number must be
// claimed exactly once, each chunk a run of consecutive numbers (first in,
// first out), even though entries are reused as soon as the positions
// before them are done.
TEST(EnvQueueTest, ConcurrentClaimersTakeEveryIdOnceInOrder) {
  constexpr int kCapacity = 37, kBatch = 64, kThreads = 3;  // chunks of 2 .. 10
  constexpr int32_t kTotal = 200000;
  EnvQueue q(kCapacity, kBatch, kThreads);
  std::vector<std::atomic<int>> claimed(kTotal);
  std::atomic<int64_t> done{0};
  std::atomic<int> not_consecutive{0}, out_of_range{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      int32_t ids[EnvQueue::kMaxChunk];
      while (!stop.load(std::memory_order_acquire)) {
        const uint64_t c = q.TryClaim(ids);
        if (c == 0) {
          std::this_thread::yield();
          continue;
        }
        for (uint64_t k = 0; k < c; ++k) {
          if (ids[k] < 0 || ids[k] >= kTotal) {
            out_of_range.fetch_add(1);
            continue;
          }
          if (k > 0 && ids[k] != ids[k - 1] + 1) not_consecutive.fetch_add(1);
          claimed[ids[k]].fetch_add(1);
        }
        done.fetch_add(static_cast<int64_t>(c), std::memory_order_release);
      }
    });
  }
  const absl::Time deadline = absl::Now() + kTestWait;
  bool timed_out = false;
  for (int32_t next = 0; next < kTotal && !timed_out;) {
    // Push what the capacity allows, in bursts of varying size.
    const int64_t room = kCapacity - (next - done.load(std::memory_order_acquire));
    const int64_t burst = std::min<int64_t>(room, 1 + next % 11);
    for (int64_t k = 0; k < burst && next < kTotal; ++k) q.Push(next++);
    q.Publish();
    if (burst == 0) {
      if (absl::Now() > deadline) timed_out = true;
      std::this_thread::yield();
    }
  }
  while (!timed_out && done.load(std::memory_order_acquire) < kTotal) {
    if (absl::Now() > deadline) timed_out = true;
    std::this_thread::yield();
  }
  stop.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  ASSERT_FALSE(timed_out) << done.load() << " of " << kTotal << " claimed";
  EXPECT_EQ(out_of_range.load(), 0);
  EXPECT_EQ(not_consecutive.load(), 0);
  EXPECT_EQ(done.load(), kTotal);
  for (int32_t i = 0; i < kTotal; ++i) ASSERT_EQ(claimed[i].load(), 1) << "id " << i;
  EXPECT_FALSE(q.HasWork());
}

}  // namespace
}  // namespace flywheel::internal_envs
