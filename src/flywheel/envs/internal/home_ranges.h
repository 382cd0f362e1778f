// HomeRanges: how a sync EnvPool (one batch of every env in flight) hands
// envs to its stepping threads. Thread t owns the home range of envs
// [tN/T, (t+1)N/T) and claims it in chunks of about a quarter (one
// fetch_add each); when its range is used up it helps with ranges that are
// far behind. Home ranges keep an env on the same core batch after batch
// (its state and rows stay in that core's cache; with a shared queue the
// first chunk went to whichever thread won the race, and the envs' cache
// lines moved with it); a claim is one fetch_add on a counter that only
// stealers share.
//
// The driver opens each batch with Open(batch); threads learn of it from
// generation() and claim until Claim() returns false.
//
// Thread-safety: Open and the constructor are for the driver, one call at a
// time, and only once every env of the previous batch was claimed (EnvPool
// opens a batch after it received the previous one). Claim and generation
// are safe from any number of threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "flywheel/envs/internal/cache_line.h"

namespace flywheel::internal_envs {

class HomeRanges {
 public:
  // Envs per claim at most, so a range is shared out even when it is long.
  static constexpr int64_t kMaxChunk = 256;

  // One envs [begin, end) of one batch, claimed by one thread.
  struct Chunk {
    int64_t begin = 0, end = 0;
    uint64_t batch = 0;  // Open()'s argument
  };

  // `num_threads` == 0: no ranges (an async pool); Claim always fails.
  // REQUIRES: num_envs >= 0, num_threads >= 0.
  HomeRanges(int64_t num_envs, int num_threads) : ranges_(num_threads) {
    for (int t = 0; t < num_threads; ++t) {
      Range& r = ranges_[t];
      r.begin = num_envs * t / num_threads;
      r.end = num_envs * (t + 1) / num_threads;
      r.chunk = std::max<int64_t>(1, std::min<int64_t>((r.end - r.begin + 3) / 4, kMaxChunk));
      r.next.store(r.end, std::memory_order_relaxed);  // nothing to claim before Open
    }
  }
  HomeRanges(const HomeRanges&) = delete;
  HomeRanges& operator=(const HomeRanges&) = delete;

  int num_threads() const { return static_cast<int>(ranges_.size()); }
  // Thread t's home range and chunk size (for tests and diagnostics).
  int64_t begin(int t) const { return ranges_[t].begin; }
  int64_t end(int t) const { return ranges_[t].end; }
  int64_t chunk(int t) const { return ranges_[t].chunk; }

  // Makes every env claimable again, for batch `batch`. What the driver
  // wrote before (the batch's actions) is visible to the claimers of its
  // envs (release; Claim's acq_rel), and generation() moves on (release).
  void Open(uint64_t batch) {
    batch_ = batch;
    for (auto& r : ranges_) r.next.store(r.begin, std::memory_order_release);
    generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  // Open() calls so far. A thread that sees it change claims until Claim()
  // fails; a wait polls only this line, not the ranges, whose lines the
  // claimers write.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  // Claims the next chunk for thread `thread` (0 <= thread < num_threads()):
  // from its own range first, then from another thread's range whose owner
  // has not started (it is late: descheduled, or asleep) or is at least two
  // chunks behind. A stolen env's state moves to this core and back, which
  // costs more than a small imbalance. False when nothing is left that this
  // thread may claim.
  bool Claim(int thread, Chunk* out) {
    const int num = num_threads();
    for (int i = 0, t = thread; i < num; ++i, t = t + 1 == num ? 0 : t + 1) {
      Range& r = ranges_[t];
      const int64_t next = r.next.load(std::memory_order_relaxed);
      if (next >= r.end || (i > 0 && next > r.begin && r.end - next < 2 * r.chunk)) continue;
      // acq_rel: reads from Open's store (release) or a later claim of this
      // batch, so this thread sees the batch's actions and batch_.
      const int64_t begin = r.next.fetch_add(r.chunk, std::memory_order_acq_rel);
      if (begin >= r.end) continue;
      out->begin = begin;
      out->end = std::min(begin + r.chunk, r.end);
      out->batch = batch_;
      return true;
    }
    return false;
  }

 private:
  // `next`: the first env not yet claimed in this batch (>= end: none).
  struct alignas(kCacheLine) Range {
    std::atomic<int64_t> next{0};
    int64_t begin = 0, end = 0, chunk = 1;
  };

  std::vector<Range> ranges_;
  // Written by Open (the driver), read by claimers: one line.
  alignas(kCacheLine) std::atomic<uint64_t> generation_{0};
  uint64_t batch_ = 0;
};

}  // namespace flywheel::internal_envs
