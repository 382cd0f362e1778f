// Cache-line helpers for EnvPool's hand-off state: the line size the pool
// pads to, and a counter alone on its line, so threads that write
// neighbouring counters (per-buffer row counts, per-thread step counts) do
// not pass one line back and forth.
//
// Thread-safety: PaddedCount is an atomic; the rest are constants.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace flywheel::internal_envs {

inline constexpr size_t kCacheLine = 64;

// `n` rounded up to a whole number of cache lines.
constexpr size_t AlignUp(size_t n) { return (n + kCacheLine - 1) / kCacheLine * kCacheLine; }

struct alignas(kCacheLine) PaddedCount {
  std::atomic<int64_t> v{0};
};

static_assert(sizeof(PaddedCount) == kCacheLine && alignof(PaddedCount) == kCacheLine);
static_assert(AlignUp(0) == 0 && AlignUp(1) == kCacheLine && AlignUp(kCacheLine) == kCacheLine &&
              AlignUp(kCacheLine + 1) == 2 * kCacheLine);

}  // namespace flywheel::internal_envs
