// safetensors files (Hugging Face's tensor format) and checkpoint folders of
// them: a single `model.safetensors` or shards listed by
// `model.safetensors.index.json`. The reader maps each file and hands out
// views of its tensors; the writer streams tensors to disk, splitting into
// shards past a size threshold the way transformers does. docs/llm.md
// ("Checkpoints") gives the layout.
//
// Layout of one file: an 8-byte little-endian header length N, N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {string: string}}, then the data; offsets are relative to the data. The
// reader checks that the header fits the file (and 100 MB), every tensor's
// byte count matches dtype x shape, offsets lie inside the data and tensors
// neither overlap nor leave holes.
//
// Thread-safety: a SafetensorsFile/Checkpoint is immutable after Open; any
// number of threads may read it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::io {
class RandomAccessFile;
}

namespace flywheel::llm {

enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

std::string_view DTypeName(DType d);  // "F32", "BF16", ...
size_t DTypeBytes(DType d);
Result<DType> ParseDType(std::string_view name);

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;

  int64_t elements() const;
};

class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses a copy of `bytes` (tests, fuzzing).
  static Result<std::unique_ptr<SafetensorsFile>> Parse(std::string bytes);
  ~SafetensorsFile();

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  Status ParseAll(const uint8_t* p, size_t size);

  std::shared_ptr<io::RandomAccessFile> file_;
  std::string owned_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// The tensors of a checkpoint folder: model.safetensors, or the shards its
// index names (every tensor in the shard the index says; none twice).
class Checkpoint {
 public:
  static Result<std::unique_ptr<Checkpoint>> Open(const std::string& dir);
  const TensorView* Find(std::string_view name) const;
  // Every tensor, sorted by name.
  std::vector<const TensorView*> tensors() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> by_name_;
};

// A tensor to write: its bytes are read from `data` when written.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

struct WriteOptions {
  uint64_t max_shard_bytes = uint64_t{5} << 30;  // as transformers' default
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
};

// Writes `tensors` into `dir` as model.safetensors or, past
// max_shard_bytes, model-0000K-of-0000N.safetensors plus
// model.safetensors.index.json. Each file is written beside its name and
// renamed into place.
Status WriteCheckpoint(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                       const WriteOptions& options = {});

}  // namespace flywheel::llm
