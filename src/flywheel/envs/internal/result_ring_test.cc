#include "flywheel/envs/internal/result_ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace flywheel::internal_envs {
namespace {

// Bound on any wait in these tests: a bug fails the test instead of hanging it.
constexpr absl::Duration kTestWait = absl::Seconds(10);

using Row = std::tuple<uint64_t, int, int>;  // (k, buffer, row)

// Frees every buffer for batches far ahead, so a producer that waits for a
// buffer (only if the ring is wrong) returns and the test can join it.
void FreeEverything(ResultRing& ring) {
  const uint64_t far = uint64_t{1} << 40;
  for (int i = 0; i < ring.num_buffers(); ++i) ring.Recycle(far + i);
}

std::vector<Row> Write(ResultRing& ring, uint64_t c) {
  std::vector<Row> rows;
  ring.WriteRows(c, [&](uint64_t k, int buf, int row) { rows.emplace_back(k, buf, row); });
  return rows;
}

TEST(ResultRingTest, NumBuffersIsBatchesOfAllEnvsPlusTwo) {
  EXPECT_EQ(ResultRing::NumBuffers(10, 4), 5);
  EXPECT_EQ(ResultRing::NumBuffers(8, 8), 3);  // sync
  EXPECT_EQ(ResultRing::NumBuffers(7, 1), 9);
}

TEST(ResultRingTest, PositionsFillRowsInOrderAcrossBuffers) {
  ResultRing ring(/*batch_size=*/4, /*num_buffers=*/3);
  EXPECT_EQ(Write(ring, 3), (std::vector<Row>{{0, 0, 0}, {1, 0, 1}, {2, 0, 2}}));
  EXPECT_FALSE(ring.Full(0));
  // Positions 3..6: the last row of batch 0, then batch 1 in buffer 1.
  EXPECT_EQ(Write(ring, 4), (std::vector<Row>{{0, 0, 3}, {1, 1, 0}, {2, 1, 1}, {3, 1, 2}}));
  EXPECT_TRUE(ring.Full(0));
  EXPECT_FALSE(ring.Full(1));
  EXPECT_EQ(Write(ring, 1), (std::vector<Row>{{0, 1, 3}}));
  EXPECT_TRUE(ring.Full(1));
  EXPECT_EQ(ring.BufferOf(3), 0);
  EXPECT_EQ(ring.BufferOf(5), 2);
}

TEST(ResultRingTest, SyncProducersPublishTheirTallyOnce) {
  ResultRing ring(/*batch_size=*/6, /*num_buffers=*/3);
  Unpublished a, b;
  EXPECT_EQ(ring.BeginRows(&a, 1), 1);
  a.Add(1, 4);
  EXPECT_EQ(ring.BeginRows(&b, 1), 1);
  b.Add(1, 2);
  EXPECT_FALSE(ring.Full(1));  // nothing published yet
  EXPECT_EQ(ring.Flush(&a), 4);
  EXPECT_EQ(a.rows, 0);
  EXPECT_FALSE(ring.Full(1));
  EXPECT_EQ(ring.Flush(&a), 0);  // empty: publishes nothing
  EXPECT_EQ(ring.Flush(&b), 2);
  EXPECT_TRUE(ring.Full(1));
  EXPECT_FALSE(ring.Full(0));
}

// A buffer is written again only after the consumer took the batch two
// after the one it holds; until then the old rows stay as they were.
TEST(ResultRingTest, AProducerWaitsUntilTheBufferIsRecycled) {
  ResultRing ring(/*batch_size=*/2, /*num_buffers=*/3);
  std::vector<std::vector<uint64_t>> data(3, std::vector<uint64_t>(2, 0));
  uint64_t next = 0;
  auto write = [&](uint64_t c) {
    ring.WriteRows(c, [&](uint64_t, int buf, int row) { data[buf][row] = next++; });
  };
  for (int i = 0; i < 3; ++i) write(2);  // batches 0, 1, 2
  for (int buf = 0; buf < 3; ++buf) EXPECT_TRUE(ring.Full(buf));
  absl::Notification wrote;
  std::thread producer([&] {
    write(1);  // position 6: batch 3, buffer 0
    wrote.Notify();
  });
  ring.Recycle(0);  // takes batch 0: frees nothing yet
  ring.Recycle(1);  // takes batch 1: frees nothing yet
  EXPECT_FALSE(wrote.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  EXPECT_EQ(data[0], (std::vector<uint64_t>{0, 1}));  // batch 0, intact
  ring.Recycle(2);  // takes batch 2: batch 0's buffer is free for batch 3
  const bool done = wrote.WaitForNotificationWithTimeout(kTestWait);
  if (!done) FreeEverything(ring);
  producer.join();
  ASSERT_TRUE(done);
  EXPECT_EQ(data[0][0], 6u);
  EXPECT_FALSE(ring.Full(0));  // its count was cleared: 1 row of batch 3
  EXPECT_TRUE(ring.Full(1));   // batch 1 (the one before the held one) untouched
  EXPECT_EQ(data[1], (std::vector<uint64_t>{2, 3}));
}

TEST(ResultRingTest, ResetStartsOverAtPositionZero) {
  ResultRing ring(/*batch_size=*/2, /*num_buffers=*/3);
  for (int i = 0; i < 3; ++i) Write(ring, 2);
  ring.Recycle(0), ring.Recycle(1), ring.Recycle(2);
  ring.Reset();
  for (int buf = 0; buf < 3; ++buf) EXPECT_FALSE(ring.Full(buf));
  // Buffers 0..2 take batches 0..2 again without waiting.
  EXPECT_EQ(Write(ring, 2), (std::vector<Row>{{0, 0, 0}, {1, 0, 1}}));
  EXPECT_EQ(Write(ring, 4), (std::vector<Row>{{0, 1, 0}, {1, 1, 1}, {2, 2, 0}, {3, 2, 1}}));
  EXPECT_TRUE(ring.Full(0) && ring.Full(1) && ring.Full(2));
}

// Producers on several threads write chunks as EnvPool's async threads do,
// never more than `kEnvs` positions past the batches taken (EnvPool's
// invariant: at most N envs in flight); one consumer takes batch after batch
// as Recv does. Each row holds a token (producer, sequence number). In the
// consumer's order (batch by batch, row by row, i.e. position order) every
// token must appear exactly once, each producer's tokens in its order, each
// chunk on consecutive positions; and the batch before the one held must
// stay intact.
TEST(ResultRingTest, ConcurrentProducersFillBatchesInPositionOrder) {
  constexpr int kBatch = 8, kEnvs = 20, kProducers = 3, kBatches = 3000;
  const int k = ResultRing::NumBuffers(kEnvs, kBatch);
  ResultRing ring(kBatch, k);
  std::vector<std::vector<uint64_t>> data(k, std::vector<uint64_t>(kBatch, ~uint64_t{0}));
  std::atomic<int64_t> budget{kEnvs};  // positions producers may still take
  std::atomic<bool> stop{false};
  // Per producer: the size of each chunk, in order (read after join).
  std::vector<std::vector<uint64_t>> chunks(kProducers);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      uint64_t seq = 0;
      for (uint64_t i = 0; !stop.load(std::memory_order_acquire); ++i) {
        const int64_t c = 1 + static_cast<int64_t>((i * 7 + p) % (kBatch / 2));
        int64_t b = budget.load(std::memory_order_relaxed);
        if (b < c || !budget.compare_exchange_weak(b, b - c, std::memory_order_acquire)) {
          std::this_thread::yield();
          continue;
        }
        ring.WriteRows(static_cast<uint64_t>(c), [&](uint64_t, int buf, int row) {
          data[buf][row] = (static_cast<uint64_t>(p) << 40) | seq++;
        });
        chunks[p].push_back(static_cast<uint64_t>(c));
      }
    });
  }
  std::vector<uint64_t> order;  // tokens in position order
  std::vector<uint64_t> prev;
  int intact_failures = 0;
  bool timed_out = false;
  for (uint64_t r = 0; r < kBatches && !timed_out; ++r) {
    const int buf = ring.BufferOf(r);
    const absl::Time deadline = absl::Now() + kTestWait;
    while (!ring.Full(buf)) {
      if (absl::Now() > deadline) {
        timed_out = true;
        break;
      }
      std::this_thread::yield();
    }
    if (timed_out) break;
    ring.Recycle(r);
    const std::vector<uint64_t> cur = data[buf];
    order.insert(order.end(), cur.begin(), cur.end());
    budget.fetch_add(kBatch, std::memory_order_release);  // "send" the batch's envs again
    if (r > 0 && data[ring.BufferOf(r - 1)] != prev) ++intact_failures;
    prev = cur;
  }
  stop.store(true, std::memory_order_release);
  if (timed_out) FreeEverything(ring);
  for (auto& t : producers) t.join();
  ASSERT_FALSE(timed_out) << order.size() / kBatch << " batches taken";
  EXPECT_EQ(intact_failures, 0);
  ASSERT_EQ(order.size(), static_cast<size_t>(kBatch) * kBatches);

  // Where each token sits; every token at most once.
  std::map<uint64_t, size_t> where;
  for (size_t i = 0; i < order.size(); ++i) {
    ASSERT_TRUE(where.emplace(order[i], i).second) << "token " << order[i] << " twice";
  }
  size_t seen = 0;
  for (int p = 0; p < kProducers; ++p) {
    uint64_t seq = 0;
    size_t last = 0;
    for (uint64_t c : chunks[p]) {
      const uint64_t first = (static_cast<uint64_t>(p) << 40) | seq;
      auto it = where.find(first);
      // A producer's last chunks may be past the batches taken.
      if (it == where.end()) break;
      EXPECT_TRUE(seq == 0 || it->second > last) << "producer " << p << " out of order";
      for (uint64_t j = 0; j < c; ++j) {
        auto t = where.find(first + j);
        if (t == where.end()) break;  // the chunk ran past the last batch taken
        EXPECT_EQ(t->second, it->second + j) << "producer " << p << " chunk at seq " << seq;
        last = t->second;
        ++seen;
      }
      seq += c;
    }
  }
  EXPECT_EQ(seen, order.size());  // every row is some producer's token
}

}  // namespace
}  // namespace flywheel::internal_envs
