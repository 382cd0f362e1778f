#include "flywheel/envs/internal/buffer_arena.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

#include "flywheel/envs/internal/cache_line.h"

namespace flywheel::internal_envs {
namespace {

// The allocation memory() owns.
class Memory {
 public:
  explicit Memory(size_t bytes) : bytes_(std::max<size_t>(bytes, kCacheLine)) {
    data_ = static_cast<std::byte*>(::operator new(bytes_, std::align_val_t(kCacheLine)));
    std::memset(data_, 0, bytes_);
  }
  ~Memory() { ::operator delete(data_, std::align_val_t(kCacheLine)); }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  std::byte* at(size_t offset) const { return data_ + offset; }

 private:
  size_t bytes_;
  std::byte* data_;
};

// Offsets of one buffer's arrays in the allocation.
struct Layout {
  int rows = 0;
  size_t obs = 0, reward = 0, terminated = 0, truncated = 0, env_id = 0, final_obs = 0,
         has_final = 0;
};

}  // namespace

BufferArena::BufferArena(const Shape& shape) {
  // Layout: the ring buffers, then the last buffer, then the extra region.
  std::vector<Layout> layouts;
  layouts.reserve(shape.ring_buffers + 1);
  size_t offset = 0;
  for (int i = 0; i <= shape.ring_buffers; ++i) {
    Layout l;
    l.rows = i < shape.ring_buffers ? shape.ring_rows : shape.last_rows;
    const auto rows = static_cast<size_t>(l.rows);
    l.obs = offset, offset += AlignUp(rows * shape.obs_bytes);
    l.reward = offset, offset += AlignUp(rows * sizeof(double));
    l.terminated = offset, offset += AlignUp(rows);
    l.truncated = offset, offset += AlignUp(rows);
    l.env_id = offset, offset += AlignUp(rows * sizeof(int32_t));
    if (shape.final_obs) {
      l.final_obs = offset, offset += AlignUp(rows * shape.obs_bytes);
      l.has_final = offset, offset += AlignUp(rows);
    }
    layouts.push_back(l);
  }
  const size_t extra_offset = offset;
  offset += AlignUp(shape.extra_bytes);
  auto memory = std::make_shared<Memory>(offset);
  bytes_ = offset;
  views_.resize(layouts.size());
  for (size_t i = 0; i < layouts.size(); ++i) {
    const Layout& l = layouts[i];
    envs::BufferView& v = views_[i];
    v.rows = l.rows;
    v.obs = memory->at(l.obs);
    v.reward = reinterpret_cast<double*>(memory->at(l.reward));
    v.terminated = reinterpret_cast<bool*>(memory->at(l.terminated));
    v.truncated = reinterpret_cast<bool*>(memory->at(l.truncated));
    v.env_id = reinterpret_cast<int32_t*>(memory->at(l.env_id));
    if (shape.final_obs) {
      v.final_obs = memory->at(l.final_obs);
      v.has_final_obs = reinterpret_cast<bool*>(memory->at(l.has_final));
    }
  }
  extra_ = memory->at(extra_offset);
  memory_ = std::move(memory);
}

}  // namespace flywheel::internal_envs
