// The loader's batch storage: 64-byte aligned buffers that keep their
// capacity, grouped per batch in a Slot, and a pool of free slots that the
// deleters of handed-out batches return to (loader.cc's LoaderImpl fills
// slots in its worker threads; docs/loader.md, "Read pipeline").
//
// Thread-safety: SlotPool::Acquire and the release of an acquired slot may
// run on any threads concurrently; a Slot belongs to one thread at a time.
// A slot released after its pool is gone is freed, so batches may outlive
// the loader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/format/column.h"
#include "flywheel/loader/loader.h"

namespace flywheel::internal_loader {

// A growable 64-byte aligned buffer that keeps its capacity across batches.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();
  // At least `n` bytes; contents are not kept when it grows.
  uint8_t* Reserve(size_t n);
  uint8_t* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

// The storage behind one loader::Batch; reused through SlotPool.
struct Slot {
  loader::Batch batch;
  std::vector<AlignedBuffer> values;
  std::vector<AlignedBuffer> offsets;
  std::vector<AlignedBuffer> validity;
  std::vector<AlignedBuffer> images;  // transformed image columns
  // Image columns are not copied: each row's encoded bytes are read where
  // they lie (image_src[c][row]) from pages held here until the transform.
  std::vector<std::vector<const uint8_t*>> image_src;
  std::vector<format::Column> held;
  int64_t skipped = 0;  // rows OnError::kSkip left out of `batch`
};

// Free slots, shared with the deleters of batches handed out so those may
// outlive the loader.
class SlotPool : public std::enable_shared_from_this<SlotPool> {
 public:
  explicit SlotPool(size_t num_columns) : num_columns_(num_columns) {}
  // A free slot (a new one, with one buffer of each kind per column, when
  // none is free); dropping the pointer returns it to the pool.
  std::shared_ptr<Slot> Acquire();
  // Slots waiting to be reused.
  size_t free_slots() const;

 private:
  const size_t num_columns_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Slot>> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel::internal_loader
