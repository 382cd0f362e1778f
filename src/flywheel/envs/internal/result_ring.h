// ResultRing: the bookkeeping of EnvPool's ring of result buffers (EnvPool's
// StateBufferQueue, minus the memory, which is BufferArena's): which buffer
// and row each result goes to, how many rows each buffer has, and when a
// buffer may be written again. env_pool.cc's file comment has the argument
// that K = ceil(N / B) + 2 buffers suffice.
//
// Positions. Every result row has a position p in an endless sequence; its
// batch is p / B and it lives in buffer (p / B) % K, row p % B (B =
// batch_size, K = num_buffers). Async producers take positions with one
// fetch_add per chunk (WriteRows); sync producers write the rows of the
// batch in flight themselves and count them with Publish.
//
// Recycling. The consumer takes batches in order; when it takes batch r it
// calls Recycle(r), which clears batch r - 2's buffer and frees it for batch
// r - 2 + K (a release store), so batch r - 1 stays intact while the caller
// holds r. A producer waits (AwaitBuffer, acquire) until the buffer is free
// for its batch before writing: that turns the counting argument into
// happens-before, and checks it (the wait ends at once unless the argument
// is wrong).
//
// Thread-safety: producers (AwaitBuffer, Publish, WriteRows) from any number
// of threads; Full from any thread; Recycle and Reset from one consumer
// thread at a time, Reset only while no producer is active.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "flywheel/envs/internal/cache_line.h"
#include "flywheel/envs/internal/doorbell.h"

namespace flywheel::internal_envs {

// Rows one producer has written into buffer `buf` and not yet published
// (sync producers publish once per batch, not per chunk). Only its owner
// touches it.
struct alignas(kCacheLine) Unpublished {
  int64_t rows = 0;
  int buf = 0;

  // Tallies `n` more rows written into buffer `buffer`.
  void Add(int buffer, int64_t n) {
    buf = buffer;
    rows += n;
  }
};

class ResultRing {
 public:
  // K for a pool of `num_envs` envs and batches of `batch_size` rows.
  static int NumBuffers(int num_envs, int batch_size) {
    return (num_envs + batch_size - 1) / batch_size + 2;
  }

  // REQUIRES: batch_size >= 1, num_buffers >= 1.
  ResultRing(int batch_size, int num_buffers)
      : b_(static_cast<uint64_t>(batch_size)),
        k_(static_cast<uint64_t>(num_buffers)),
        filled_(num_buffers),
        free_for_(num_buffers) {
    for (int i = 0; i < num_buffers; ++i) free_for_[i].v.store(i, std::memory_order_relaxed);
  }
  ResultRing(const ResultRing&) = delete;
  ResultRing& operator=(const ResultRing&) = delete;

  int batch_size() const { return static_cast<int>(b_); }
  int num_buffers() const { return static_cast<int>(k_); }
  int BufferOf(uint64_t batch) const { return static_cast<int>(batch % k_); }

  // Producers.

  // Returns once buffer `buf` may take rows of `batch` (see Recycling). The
  // acquire makes the consumer's reads of the buffer's previous batch happen
  // before our writes.
  void AwaitBuffer(int buf, uint64_t batch) const {
    for (unsigned i = 1;
         free_for_[buf].v.load(std::memory_order_acquire) < static_cast<int64_t>(batch); ++i) {
      CpuRelax();
      if (i % 64 == 0) std::this_thread::yield();
    }
  }

  // Counts `rows` more rows of buffer `buf` as written (release: the rows
  // are visible to a consumer that sees Full).
  void Publish(int buf, int64_t rows) {
    filled_[buf].v.fetch_add(rows, std::memory_order_release);
  }

  // Sync producers: tallies `rows` rows of `batch` in `*mine`; awaits the
  // batch's buffer first when `*mine` is empty (all of a producer's
  // unpublished rows are of one batch: the next batch cannot start before
  // they are published). Returns the buffer to write them to.
  int BeginRows(Unpublished* mine, uint64_t batch) const {
    const int buf = BufferOf(batch);
    if (mine->rows == 0) AwaitBuffer(buf, batch);
    return buf;
  }
  // Publishes `*mine` and empties it; returns how many rows that was.
  int64_t Flush(Unpublished* mine) {
    const int64_t rows = mine->rows;
    if (rows > 0) {
      Publish(mine->buf, rows);
      mine->rows = 0;
    }
    return rows;
  }

  // Async producers: takes the next c positions and calls write(k, buf, row)
  // for k = 0 .. c - 1 (position k of the c goes to buffer `buf`, row `row`),
  // in order, then publishes the rows. REQUIRES: c <= batch_size, so they
  // fall in at most two buffers.
  template <typename WriteRow>
  void WriteRows(uint64_t c, WriteRow&& write) {
    const uint64_t pos = write_pos_.fetch_add(c, std::memory_order_relaxed);
    uint64_t batch = pos / b_;
    uint64_t row = pos % b_;
    int buf = static_cast<int>(batch % k_);
    AwaitBuffer(buf, batch);
    int bufs[2] = {buf, -1};
    int64_t counts[2] = {0, 0};
    int j = 0;
    for (uint64_t k = 0; k < c; ++k, ++row) {
      if (row == b_) {  // into the next batch
        row = 0;
        buf = static_cast<int>(++batch % k_);
        AwaitBuffer(buf, batch);
        bufs[j = 1] = buf;
      }
      write(k, buf, static_cast<int>(row));
      ++counts[j];
    }
    for (int i = 0; i < 2; ++i) {
      if (bufs[i] >= 0) Publish(bufs[i], counts[i]);
    }
  }

  // Consumer.

  // Whether buffer `buf` holds batch_size rows (acquire: they are visible).
  bool Full(int buf) const {
    return filled_[buf].v.load(std::memory_order_acquire) >= static_cast<int64_t>(b_);
  }

  // The consumer takes batch `batch` (after Full): recycles batch - 2's
  // buffer for batch - 2 + K. REQUIRES: batches are taken in order.
  void Recycle(uint64_t batch) {
    if (batch < 2) return;
    const int old = BufferOf(batch - 2);
    filled_[old].v.store(0, std::memory_order_relaxed);
    free_for_[old].v.store(static_cast<int64_t>(batch - 2 + k_), std::memory_order_release);
  }

  // Back to position 0 with every buffer empty and free for its first
  // batch. REQUIRES: no producer is active; the caller publishes the stores
  // to later producers (EnvPool: with its next Send's release).
  void Reset() {
    write_pos_.store(0, std::memory_order_relaxed);
    for (uint64_t i = 0; i < k_; ++i) {
      filled_[i].v.store(0, std::memory_order_relaxed);
      free_for_[i].v.store(static_cast<int64_t>(i), std::memory_order_release);
    }
  }

 private:
  const uint64_t b_, k_;
  std::vector<PaddedCount> filled_;  // rows written per buffer
  // The batch each buffer may take rows of: batch i starts in buffer i.
  std::vector<PaddedCount> free_for_;
  // Async: the next position; written by producers, on its own line.
  alignas(kCacheLine) std::atomic<uint64_t> write_pos_{0};
};

}  // namespace flywheel::internal_envs
