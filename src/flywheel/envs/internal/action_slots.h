// ActionSlots: EnvPool's per-env action storage. Send stores each env's
// action in that env's slot; the thread that steps the env loads it. Box
// rows are kept as given (float32); Discrete values in the narrowest integer
// type their range fits (SlotBytes: 1, 2, 4 or 8 bytes), so a batch of
// CartPole actions moves 1 byte per env to the stepping threads, not 8.
//
// The slots live in memory the caller owns (EnvPool's BufferArena).
//
// Thread-safety: none of its own. Slot e is written by the driver while env
// e is idle and read by the thread stepping it; EnvPool's release/acquire
// hand-off of the env orders the two.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "flywheel/envs/space.h"

namespace flywheel::internal_envs {

class ActionSlots {
 public:
  // Bytes of one slot for actions of `space`.
  static size_t SlotBytes(const envs::Space& space) {
    if (!space.is_discrete()) return space.row_bytes();
    const int64_t lo = space.start, hi = space.start + space.n - 1;
    if (lo >= INT8_MIN && hi <= INT8_MAX) return 1;
    if (lo >= INT16_MIN && hi <= INT16_MAX) return 2;
    if (lo >= INT32_MIN && hi <= INT32_MAX) return 4;
    return 8;
  }

  ActionSlots() = default;
  // REQUIRES: `memory` holds num_envs * SlotBytes(space) bytes and outlives
  // this object.
  ActionSlots(const envs::Space& space, std::byte* memory)
      : memory_(memory),
        discrete_(space.is_discrete()),
        row_bytes_(space.row_bytes()),
        slot_bytes_(SlotBytes(space)) {}

  size_t slot_bytes() const { return slot_bytes_; }

  // Stores env e's action: `row` is one action row (row_bytes() of the
  // space; an int64 for Discrete). REQUIRES: a Discrete value is inside the
  // space (EnvPool::Send checks), so narrowing keeps it.
  void Store(int32_t e, const std::byte* row) {
    std::byte* dst = memory_ + static_cast<size_t>(e) * slot_bytes_;
    if (!discrete_) {
      std::memcpy(dst, row, row_bytes_);
      return;
    }
    int64_t v = 0;
    std::memcpy(&v, row, sizeof(v));
    switch (slot_bytes_) {
      case 1: {
        const auto x = static_cast<int8_t>(v);
        std::memcpy(dst, &x, 1);
        break;
      }
      case 2: {
        const auto x = static_cast<int16_t>(v);
        std::memcpy(dst, &x, 2);
        break;
      }
      case 4: {
        const auto x = static_cast<int32_t>(v);
        std::memcpy(dst, &x, 4);
        break;
      }
      default:
        std::memcpy(dst, &v, 8);
    }
  }

  // Env e's action as Env::Step takes it: a pointer into the slot (Box), or
  // `*discrete` widened back to int64 (Discrete).
  const void* Load(int32_t e, int64_t* discrete) const {
    const std::byte* src = memory_ + static_cast<size_t>(e) * slot_bytes_;
    if (!discrete_) return src;
    switch (slot_bytes_) {
      case 1: {
        int8_t x = 0;
        std::memcpy(&x, src, 1);
        *discrete = x;
        break;
      }
      case 2: {
        int16_t x = 0;
        std::memcpy(&x, src, 2);
        *discrete = x;
        break;
      }
      case 4: {
        int32_t x = 0;
        std::memcpy(&x, src, 4);
        *discrete = x;
        break;
      }
      default:
        std::memcpy(discrete, src, 8);
    }
    return discrete;
  }

 private:
  std::byte* memory_ = nullptr;
  bool discrete_ = false;
  size_t row_bytes_ = 0;
  size_t slot_bytes_ = 0;
};

}  // namespace flywheel::internal_envs
