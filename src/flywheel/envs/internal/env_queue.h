// EnvQueue: the queue of env ids an async EnvPool has been sent and no
// thread has picked up yet (EnvPool's ActionBufferQueue, for ids). The
// driver pushes ids and publishes them with one release store; stepping
// threads claim them in chunks with one CAS each, first in, first out.
//
// Positions [head, tail) are waiting; position p lives in entry p % capacity.
// The ring never overflows: EnvPool (capacity = num_envs) never has more
// than num_envs envs in flight (Send refuses an env that is), and an env is
// in flight from its push until its result was received, which is after it
// was claimed.
//
// Chunk sizes are guided: a share (1 / (2T)) of what is queued, between a
// floor and a ceiling: at most B / (2T), so batches fill in about the order
// envs finish, and at least B / (8T), so cheap envs do not pay a claim each
// (B = batch_size, T = num_threads).
//
// Thread-safety: Push and Publish are for one driver thread at a time.
// TryClaim and HasWork are safe from any number of threads.
// REQUIRES (of the driver): at most `capacity` ids pushed and not yet
// claimed, at all times (see above).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "flywheel/envs/internal/cache_line.h"

namespace flywheel::internal_envs {

class EnvQueue {
 public:
  // The largest chunk; TryClaim's `ids` holds this many.
  static constexpr uint64_t kMaxChunk = 256;

  // REQUIRES: capacity >= 1, batch_size >= 1, num_threads >= 1.
  EnvQueue(int capacity, int batch_size, int num_threads)
      : capacity_(static_cast<uint64_t>(capacity)),
        share_(2 * static_cast<uint64_t>(num_threads)),
        max_chunk_(std::min<uint64_t>(
            kMaxChunk, std::max<uint64_t>(1, static_cast<uint64_t>(batch_size) / share_))),
        min_chunk_(std::min<uint64_t>(
            max_chunk_, std::max<uint64_t>(1, static_cast<uint64_t>(batch_size) /
                                                  (8 * static_cast<uint64_t>(num_threads))))),
        entries_(capacity) {}
  EnvQueue(const EnvQueue&) = delete;
  EnvQueue& operator=(const EnvQueue&) = delete;

  uint64_t min_chunk() const { return min_chunk_; }
  uint64_t max_chunk() const { return max_chunk_; }

  // Appends id_at(0), ..., id_at(count - 1), calling id_at once per k in
  // order (so the caller may do its per-id work there, in the same loop);
  // claimers see the ids after the next Publish(). One call per batch of
  // ids keeps the position in a register.
  template <typename IdAt>
  void Push(size_t count, IdAt&& id_at) {
    uint64_t entry = next_entry_;
    for (size_t k = 0; k < count; ++k) {
      entries_[entry].store(id_at(k), std::memory_order_relaxed);
      if (++entry == capacity_) entry = 0;
    }
    next_entry_ = entry;
    tail_local_ += count;
  }
  void Push(int32_t id) {
    Push(1, [id](size_t) { return id; });
  }
  // Makes every id pushed so far claimable (release: with what the driver
  // wrote before, e.g. the envs' actions).
  void Publish() { tail_.store(tail_local_, std::memory_order_release); }

  // Whether a published id waits to be claimed.
  bool HasWork() const {
    return tail_.load(std::memory_order_acquire) > head_.load(std::memory_order_acquire);
  }

  // Claims the oldest published ids, a chunk of them: writes them to
  // ids[0, c) and returns c (0 when none waits). The acquire makes what the
  // driver wrote before publishing them visible.
  //
  // The ids are read before the CAS that claims them: once a position is
  // claimed, the driver may reuse its entry (the env of a later position can
  // be received and sent again while this thread is descheduled), but while
  // a position is unclaimed at most capacity - 1 positions follow it, so its
  // entry still holds it. A successful CAS proves the positions were
  // unclaimed throughout the reads.
  uint64_t TryClaim(int32_t ids[kMaxChunk]) {
    uint64_t h = head_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t t = tail_.load(std::memory_order_acquire);
      if (h >= t) return 0;
      uint64_t c = (t - h + share_ - 1) / share_;
      c = std::min(std::clamp<uint64_t>(c, min_chunk_, max_chunk_), t - h);
      uint64_t entry = h % capacity_;
      for (uint64_t k = 0; k < c; ++k) {
        ids[k] = entries_[entry].load(std::memory_order_relaxed);
        if (++entry == capacity_) entry = 0;
      }
      if (head_.compare_exchange_weak(h, h + c, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        return c;
      }
    }
  }

 private:
  const uint64_t capacity_;
  const uint64_t share_;
  const uint64_t max_chunk_;
  const uint64_t min_chunk_;
  // Atomic because a claimer reads entries before it knows they are its own.
  std::vector<std::atomic<int32_t>> entries_;

  // Each line holds data written by one side only, so a write on the hot
  // path does not evict what the other side reads.
  // Written by the driver (Publish), read by claimers.
  alignas(kCacheLine) std::atomic<uint64_t> tail_{0};
  // Written by claimers.
  alignas(kCacheLine) std::atomic<uint64_t> head_{0};
  // Driver only: ids pushed so far, and the entry the next one goes to
  // (tail_local_ % capacity_), apart from tail_'s line, which claimers poll.
  alignas(kCacheLine) uint64_t tail_local_ = 0;
  uint64_t next_entry_ = 0;
};

}  // namespace flywheel::internal_envs
