#include "flywheel/replay/chunk.h"

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace flywheel::replay {
namespace {
std::atomic<int64_t> g_live_chunks{0};
}

int64_t Chunk::LiveCount() { return g_live_chunks.load(); }
Chunk::~Chunk() { g_live_chunks.fetch_sub(1); }

Result<ChunkRef> Chunk::Make(ChunkKey key, const format::DataType& step_type, int64_t num_steps,
                             const void* data, format::Codec codec) {
  if (!step_type.is_fixed_width()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", key, ": step type ", step_type.ToString(),
                                                   " is not fixed-width"));
  }
  if (num_steps <= 0) return absl::InvalidArgumentError(absl::StrCat("chunk ", key, ": no steps"));
  const size_t bytes = step_type.fixed_width() * static_cast<size_t>(num_steps);
  std::string stored;
  if (codec == format::Codec::kNone) {
    stored.assign(static_cast<const char*>(data), bytes);
  } else {
    FW_RETURN_IF_ERROR_CTX(format::Compress(codec, 1, data, bytes, &stored), "chunk ", key);
  }
  return FromCompressed(key, step_type, num_steps, codec, std::move(stored));
}

Result<ChunkRef> Chunk::FromCompressed(ChunkKey key, const format::DataType& step_type, int64_t num_steps,
                                       format::Codec codec, std::string compressed) {
  FW_RETURN_IF_ERROR_CTX(step_type.Validate(), "chunk ", key);
  if (!step_type.is_fixed_width() || num_steps <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", key, ": bad step type or count"));
  }
  if (codec == format::Codec::kNone && compressed.size() != step_type.fixed_width() * static_cast<size_t>(num_steps)) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", key, ": ", compressed.size(),
                                                   " bytes do not hold ", num_steps, " steps of ",
                                                   step_type.ToString()));
  }
  // A chunk from the wire or a checkpoint claims num_steps; its stored bytes
  // must be able to decode to that many, or a few bytes could make every
  // sample allocate gigabytes (the hostile-input issue, item 4).
  const uint64_t width = step_type.fixed_width();
  if (width == 0 || static_cast<uint64_t>(num_steps) > format::MaxDecompressedSize(codec, compressed.size()) / width) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", key, ": ", compressed.size(), " stored bytes of ",
                                                   AsAbsl(format::CodecName(codec)), " cannot hold ", num_steps, " steps of ",
                                                   step_type.ToString()));
  }
  std::shared_ptr<Chunk> c(new Chunk());
  g_live_chunks.fetch_add(1);
  c->key_ = key;
  c->step_type_ = step_type;
  c->num_steps_ = num_steps;
  c->codec_ = codec;
  c->compressed_ = std::move(compressed);
  return ChunkRef(std::move(c));
}

Status Chunk::CopySteps(int64_t offset, int64_t count, void* dst) const {
  if (offset < 0 || count < 0 || offset + count > num_steps_) {
    return absl::OutOfRangeError(absl::StrCat("chunk ", key_, ": steps [", offset, ", ", offset + count,
                                              ") outside [0, ", num_steps_, ")"));
  }
  const size_t sb = step_bytes();
  if (codec_ == format::Codec::kNone) {
    std::memcpy(dst, compressed_.data() + offset * sb, static_cast<size_t>(count) * sb);
    return absl::OkStatus();
  }
  if (offset == 0 && count == num_steps_) {
    return Annotate(format::Decompress(codec_, compressed_.data(), compressed_.size(), dst, uncompressed_bytes()),
                    absl::StrCat("chunk ", key_));
  }
  std::string tmp(uncompressed_bytes(), '\0');
  FW_RETURN_IF_ERROR_CTX(format::Decompress(codec_, compressed_.data(), compressed_.size(), tmp.data(), tmp.size()),
                         "chunk ", key_);
  std::memcpy(dst, tmp.data() + offset * sb, static_cast<size_t>(count) * sb);
  return absl::OkStatus();
}

Status TrajectoryColumn::Validate() const {
  if (chunks.empty()) return absl::InvalidArgumentError(absl::StrCat("column '", name, "' has no chunks"));
  int64_t total = 0;
  for (const auto& c : chunks) {
    if (!c) return absl::InvalidArgumentError(absl::StrCat("column '", name, "' has a null chunk"));
    if (!(c->step_type() == chunks.front()->step_type())) {
      return absl::InvalidArgumentError(absl::StrCat("column '", name, "': chunk ", c->key(), " holds ",
                                                     c->step_type().ToString(), ", chunk ", chunks.front()->key(),
                                                     " holds ", chunks.front()->step_type().ToString()));
    }
    total += c->num_steps();
  }
  if (offset < 0 || length <= 0 || offset + length > total) {
    return absl::InvalidArgumentError(absl::StrCat("column '", name, "': steps [", offset, ", ", offset + length,
                                                   ") are not within its chunks' ", total, " steps"));
  }
  return absl::OkStatus();
}

Status TrajectoryColumn::Decode(void* dst) const {
  uint8_t* out = static_cast<uint8_t*>(dst);
  int64_t skip = offset, remaining = length;
  for (const auto& c : chunks) {
    if (remaining == 0) break;
    if (skip >= c->num_steps()) {
      skip -= c->num_steps();
      continue;
    }
    const int64_t n = std::min(c->num_steps() - skip, remaining);
    FW_RETURN_IF_ERROR(c->CopySteps(skip, n, out));
    out += static_cast<size_t>(n) * c->step_bytes();
    remaining -= n;
    skip = 0;
  }
  if (remaining != 0) return absl::InternalError(absl::StrCat("column '", name, "': chunks ran out"));
  return absl::OkStatus();
}

}  // namespace flywheel::replay
