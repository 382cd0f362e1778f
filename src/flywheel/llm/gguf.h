// GGUF files (llama.cpp's model format): the header, metadata and tensor
// table, read over a mapping of the file, and the dequantization of the
// tensor types flywheel imports (F32, F16, BF16, Q8_0, Q4_0, Q4_1).
// docs/llm.md ("GGUF") gives the layout and the block formats.
//
// Every count and size in the file is checked against the bytes present
// before anything is sized by it: strings and arrays against the bytes left,
// tensor extents against the file, dimensions against overflow. A file that
// lies gets an error naming the field and its byte offset.
//
// Thread-safety: a GgufFile is immutable after Open/Parse; any number of
// threads may read it.
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

// GGUF metadata value types (the file's own codes).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// ggml tensor types flywheel reads (the file's codes; others are refused by
// name where known).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kBF16 = 30,
};

// "Q4_1", "Q6_K", ... or "type 77" for an unknown code.
std::string GgmlTypeName(uint32_t type);

// One metadata value. Scalars are widened (integers to int64/uint64,
// floats to double); strings and arrays point into the file's bytes.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t u = 0;          // unsigned integers and bool
  int64_t i = 0;           // signed integers
  double f = 0;            // floats
  std::string_view s;      // strings
  // Arrays (of scalars or strings; arrays of arrays are refused).
  GgufType elem = GgufType::kUint8;
  uint64_t count = 0;
  const uint8_t* elems = nullptr;        // scalar elements, little-endian
  std::vector<std::string_view> strings;  // string elements

  bool is_integer() const;
  // The integer as int64 (InvalidArgument when not an integer or out of range).
  Result<int64_t> AsInt(std::string_view key) const;
  Result<double> AsFloat(std::string_view key) const;  // any number
  // Element `k` of an integer or float array.
  int64_t IntAt(uint64_t k) const;
  double FloatAt(uint64_t k) const;
};

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order: dims[0] is the innermost (row length)
  uint32_t type = 0;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t elements = 0;
  uint64_t bytes = 0;   // stored bytes (0 when the type is not one flywheel reads)
};

class GgufFile {
 public:
  // Maps `path` and parses it.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses a copy of `bytes` (tests, fuzzing).
  static Result<std::unique_ptr<GgufFile>> Parse(std::string bytes);
  ~GgufFile();

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;
  // Typed lookups: NotFound naming the key when absent, InvalidArgument when
  // of another type.
  Result<int64_t> Int(std::string_view key) const;
  Result<double> Float(std::string_view key) const;
  Result<std::string> String(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(std::string_view name) const;
  // The tensor's stored bytes (within the file; checked at parse time).
  const uint8_t* Data(const GgufTensor& t) const { return data_ + t.offset; }
  // The tensor as float32, in ggml order (row-major with dims[0] innermost).
  Result<std::vector<float>> Dequantize(const GgufTensor& t) const;

 private:
  GgufFile() = default;
  Status ParseAll(const uint8_t* p, size_t size);

  std::shared_ptr<io::RandomAccessFile> file_;
  std::string owned_;
  const uint8_t* data_ = nullptr;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Elements per block and bytes per block of a readable type; false for a
// type flywheel does not read.
bool GgmlBlock(uint32_t type, uint64_t* block_elements, uint64_t* block_bytes);

// Dequantizes `n` elements (a multiple of the type's block) from `src` (at
// least the bytes `n` elements take) into `out`.
Status DequantizeInto(uint32_t type, const uint8_t* src, size_t src_bytes, uint64_t n, float* out);

}  // namespace flywheel::llm
