#include "flywheel/loader/internal/slot_pool.h"

#include <algorithm>
#include <cstdlib>

namespace flywheel::internal_loader {

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

uint8_t* AlignedBuffer::Reserve(size_t n) {
  if (n > capacity_) {
    std::free(data_);
    size_t cap = std::max<size_t>(n + n / 2, 64);
    cap = (cap + 63) / 64 * 64;
    data_ = static_cast<uint8_t*>(std::aligned_alloc(64, cap));
    if (data_ == nullptr) std::abort();  // out of memory
    capacity_ = cap;
  }
  return data_;
}

std::shared_ptr<Slot> SlotPool::Acquire() {
  std::unique_ptr<Slot> s;
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      s = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (!s) {
    s = std::make_unique<Slot>();
    s->values = std::vector<AlignedBuffer>(num_columns_);
    s->offsets = std::vector<AlignedBuffer>(num_columns_);
    s->validity = std::vector<AlignedBuffer>(num_columns_);
    s->images = std::vector<AlignedBuffer>(num_columns_);
    s->image_src = std::vector<std::vector<const uint8_t*>>(num_columns_);
  }
  std::weak_ptr<SlotPool> weak = weak_from_this();
  return std::shared_ptr<Slot>(s.release(), [weak](Slot* p) {
    if (auto pool = weak.lock()) {
      absl::MutexLock lock(&pool->mu_);
      pool->free_.emplace_back(p);
    } else {
      delete p;
    }
  });
}

size_t SlotPool::free_slots() const {
  absl::MutexLock lock(&mu_);
  return free_.size();
}

}  // namespace flywheel::internal_loader
