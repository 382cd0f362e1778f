// Chunks: several consecutive steps of one trajectory column, compressed
// once and shared (ref-counted) by every item and table that uses them.
//
// A chunk is freed when the last item referencing it goes away: items hold
// ChunkRefs (shared_ptr), nothing else does. Items that overlap (n-step
// returns, sequence windows) share chunks instead of copying steps.
//
// Thread-safety: a Chunk is immutable after Make(); safe to share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/format/codec.h"
#include "flywheel/format/types.h"

namespace flywheel::replay {

using ChunkKey = uint64_t;

class Chunk {
 public:
  // Compresses `num_steps` steps of `step_type` (a fixed-width type: scalar
  // or tensor per step) from `data` (num_steps * step_type.fixed_width()
  // bytes, row-major).
  static Result<std::shared_ptr<const Chunk>> Make(ChunkKey key, const format::DataType& step_type,
                                                   int64_t num_steps, const void* data,
                                                   format::Codec codec = format::Codec::kLz4);
  // Rebuilds a chunk from its stored form (checkpoints, the wire).
  static Result<std::shared_ptr<const Chunk>> FromCompressed(ChunkKey key, const format::DataType& step_type,
                                                             int64_t num_steps, format::Codec codec,
                                                             std::string compressed);

  ChunkKey key() const { return key_; }
  const format::DataType& step_type() const { return step_type_; }
  int64_t num_steps() const { return num_steps_; }
  format::Codec codec() const { return codec_; }
  const std::string& compressed() const { return compressed_; }
  size_t step_bytes() const { return step_type_.fixed_width(); }
  size_t uncompressed_bytes() const { return step_bytes() * static_cast<size_t>(num_steps_); }

  // Decompresses steps [offset, offset+count) into dst
  // (count * step_bytes() bytes).
  Status CopySteps(int64_t offset, int64_t count, void* dst) const;

  // Live chunks in this process (for leak tests and metrics).
  static int64_t LiveCount();
  ~Chunk();

 private:
  Chunk() = default;
  ChunkKey key_ = 0;
  format::DataType step_type_;
  int64_t num_steps_ = 0;
  format::Codec codec_ = format::Codec::kNone;
  std::string compressed_;
};

using ChunkRef = std::shared_ptr<const Chunk>;

// One column of an item's trajectory: `length` steps starting `offset` steps
// into the concatenation of `chunks` (all of one step type).
struct TrajectoryColumn {
  std::string name;
  std::vector<ChunkRef> chunks;
  int64_t offset = 0;
  int64_t length = 0;

  // Checks chunk types agree and the slice lies within the chunks.
  Status Validate() const;
  // Decompresses the slice into dst (length * step_bytes bytes).
  Status Decode(void* dst) const;
  const format::DataType& step_type() const { return chunks.front()->step_type(); }
};

}  // namespace flywheel::replay
