// BufferArena: the memory behind EnvPool's result buffers, laid out once at
// construction in one zeroed, cache-line-aligned allocation. It holds
// `ring_buffers` buffers of `ring_rows` rows (the Recv()/Step() ring), one
// buffer of `last_rows` rows after them (Reset()'s), and `extra_bytes` for
// the caller after those (EnvPool keeps its per-env action slots there).
// Every array of every buffer starts on its own cache line, so threads
// writing rows of different arrays or buffers share no line.
//
// One allocation, so one shared_ptr (memory()) keeps every buffer alive,
// also beyond the arena and its pool (EnvPool::memory()).
//
// Thread-safety: the layout is immutable after construction; the bytes are
// the users' to synchronise (EnvPool hands rows over with its counters).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "flywheel/envs/env_pool.h"

namespace flywheel::internal_envs {

class BufferArena {
 public:
  struct Shape {
    int ring_buffers = 0;  // buffers 0 .. ring_buffers - 1; >= 0
    int ring_rows = 0;     // rows of each of them; >= 0
    int last_rows = 0;     // rows of buffer ring_buffers; >= 0
    size_t obs_bytes = 0;  // bytes of one observation row
    // Adds final_obs and has_final_obs to every buffer (kSameStep); else
    // they stay null.
    bool final_obs = false;
    size_t extra_bytes = 0;  // the caller's region (extra()); may be 0
  };

  explicit BufferArena(const Shape& shape);
  BufferArena(const BufferArena&) = delete;
  BufferArena& operator=(const BufferArena&) = delete;

  // ring_buffers + 1.
  int num_buffers() const { return static_cast<int>(views_.size()); }
  // REQUIRES: 0 <= i < num_buffers().
  const envs::BufferView& view(int i) const { return views_[i]; }
  // extra_bytes, cache-line aligned, zeroed at construction.
  std::byte* extra() const { return extra_; }
  // Bytes allocated (every region rounded up to whole cache lines).
  size_t bytes() const { return bytes_; }
  // Owner of all of the above.
  const std::shared_ptr<const void>& memory() const { return memory_; }

 private:
  size_t bytes_ = 0;
  std::shared_ptr<const void> memory_;
  std::vector<envs::BufferView> views_;
  std::byte* extra_ = nullptr;
};

// Row `row` of an array of rows of `row_bytes` bytes starting at `base`
// (an observation or final-observation row of a BufferView).
inline void* RowAt(void* base, int row, size_t row_bytes) {
  return static_cast<std::byte*>(base) + static_cast<size_t>(row) * row_bytes;
}

}  // namespace flywheel::internal_envs
