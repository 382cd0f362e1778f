// The Thrift compact protocol (Apache Thrift, doc/specs/thrift-compact-protocol.md),
// the encoding of every Parquet metadata structure (metadata.h). Only what
// Parquet needs: no messages, no service calls. docs/format/parquet.md.
//
// Wire summary, as implemented here:
//   - varint: ULEB128, at most 10 bytes for 64 bits; i16/i32/i64 are zigzag
//     varints, i8 is one raw byte, double is 8 bytes little-endian.
//   - binary/string: varint length, then the bytes.
//   - field header: one byte `dddd tttt`; d (1..15) is the id minus the
//     previous field's id in this struct, or 0 when a zigzag i16 id follows.
//     Byte 0 ends the struct. A bool field's value is its type (1 true,
//     2 false) and has no body.
//   - list/set header: `ssss tttt` with the size in s when below 15, else
//     `1111 tttt` and a varint size. Bool elements are one byte each.
//   - map header: a varint size; when non-zero, one byte `kkkk vvvv`.
//
// CompactReader never reads outside the bytes it was given, bounds struct
// and container nesting (kMaxDepth) and rejects container sizes the
// remaining bytes cannot hold, so a lying header costs neither memory nor
// stack. Every error is InvalidArgument and names what was being read and
// the byte offset; after an error the reader's position and struct stack are
// unspecified, so callers stop using it.
//
// Thread-safety: a reader or writer is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::interop::parquet {

// Compact-protocol type codes: the low nibble of a field header and the
// element types of list, set and map headers.
enum class CompactType : uint8_t {
  kStop = 0,
  kBoolTrue = 1,  // a bool field holding true; also the bool element type
  kBoolFalse = 2,
  kByte = 3,
  kI16 = 4,
  kI32 = 5,
  kI64 = 6,
  kDouble = 7,
  kBinary = 8,
  kList = 9,
  kSet = 10,
  kMap = 11,
  kStruct = 12,
  kUuid = 13,  // 16 raw bytes (newer Thrift); Parquet does not use it
};

// "i32", "struct", ... for messages; "type 14" for codes outside the enum.
std::string CompactTypeName(CompactType type);

struct FieldHeader {
  // kStop when the struct ended (id is then 0). For bool fields the type is
  // kBoolTrue or kBoolFalse and carries the value.
  CompactType type = CompactType::kStop;
  int16_t id = 0;
};

struct ListHeader {
  CompactType elem_type = CompactType::kStop;  // bool elements: kBoolTrue
  uint32_t size = 0;                           // <= INT32_MAX
};

struct MapHeader {
  CompactType key_type = CompactType::kStop;  // both kStop when size is 0
  CompactType value_type = CompactType::kStop;
  uint32_t size = 0;
};

class CompactReader {
 public:
  // Structs and containers nested deeper than this are rejected: real
  // Parquet metadata nests 5 levels, and recursion in Skip must stay bounded.
  static constexpr int kMaxDepth = 64;

  // REQUIRES: [data, data + size) outlives the reader.
  CompactReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t offset() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  // Open structs (BeginStruct without EndStruct).
  int depth() const { return static_cast<int>(last_ids_.size()); }

  // Scalars. `what` names the value in errors ("RowGroup.num_rows").
  // Non-minimal varints (0x80 0x00) are accepted as other readers do; more
  // than 10 bytes, or bits beyond 64, are not.
  Result<uint64_t> ReadVarint(std::string_view what);
  Result<int8_t> ReadByte(std::string_view what);
  Result<int16_t> ReadI16(std::string_view what);
  Result<int32_t> ReadI32(std::string_view what);
  Result<int64_t> ReadI64(std::string_view what);
  Result<double> ReadDouble(std::string_view what);
  Result<std::string> ReadBinary(std::string_view what);
  // A bool list/set/map element: 1 is true; 2 (what Thrift writes) and 0
  // (what its spec once said) are false; anything else is an error.
  Result<bool> ReadBoolElement(std::string_view what);

  // Structs: BeginStruct, ReadFieldHeader until it returns kStop (values are
  // read or skipped between), then EndStruct. ReadStruct does all three.
  Status BeginStruct(std::string_view what);
  Result<FieldHeader> ReadFieldHeader(std::string_view what);
  // REQUIRES: a matching BeginStruct.
  void EndStruct();

  // Reads a whole struct, calling `on_field(const FieldHeader&)` -> Status
  // for each field; the callback must read or Skip the field's value.
  template <typename OnField>
  Status ReadStruct(std::string_view what, OnField&& on_field);

  // Headers; the size is checked against the remaining bytes (every element
  // takes at least one byte, a double 8, a uuid 16).
  Result<ListHeader> ReadListHeader(std::string_view what);  // lists and sets
  Result<MapHeader> ReadMapHeader(std::string_view what);

  // Skips a field value of wire type `type` (as ReadFieldHeader returned it:
  // a bool field has no body). SkipElement skips a container element (a
  // bool element is one byte). Both are depth-limited.
  Status Skip(CompactType type);
  Status SkipElement(CompactType type);

 private:
  Status Error(std::string_view what, size_t at, std::string_view problem) const;
  Status SkipValue(CompactType type, bool element, int depth);
  Status SkipBytes(size_t n, std::string_view what);

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::vector<int16_t> last_ids_;  // per open struct, for field-id deltas
};

// Appends compact-protocol bytes to a string. Misuse (EndStruct without
// BeginStruct) is a programmer error, checked with assert.
class CompactWriter {
 public:
  void WriteVarint(uint64_t v);
  void WriteByte(int8_t v) { out_.push_back(static_cast<char>(v)); }
  void WriteI16(int16_t v);
  void WriteI32(int32_t v);
  void WriteI64(int64_t v);
  void WriteDouble(double v);
  void WriteBinary(std::string_view v);
  void WriteBoolElement(bool v) { out_.push_back(v ? 1 : 2); }

  void BeginStruct() { last_ids_.push_back(0); }
  // Writes the stop byte.
  void EndStruct();
  // For a bool field pass kBoolTrue/kBoolFalse (or use WriteBoolField).
  void WriteFieldHeader(CompactType type, int16_t id);
  void WriteBoolField(int16_t id, bool v) {
    WriteFieldHeader(v ? CompactType::kBoolTrue : CompactType::kBoolFalse, id);
  }
  // Bool elements: pass kBoolTrue.
  void WriteListHeader(CompactType elem_type, uint32_t size);
  void WriteSetHeader(CompactType elem_type, uint32_t size) { WriteListHeader(elem_type, size); }
  void WriteMapHeader(CompactType key_type, CompactType value_type, uint32_t size);

  // Raw bytes (tests build malformed input with this).
  void WriteRaw(std::string_view bytes) { out_.append(bytes.data(), bytes.size()); }

  const std::string& data() const { return out_; }
  std::string Finish() && { return std::move(out_); }

 private:
  std::string out_;
  std::vector<int16_t> last_ids_;
};

template <typename OnField>
Status CompactReader::ReadStruct(std::string_view what, OnField&& on_field) {
  FW_RETURN_IF_ERROR(BeginStruct(what));
  while (true) {
    FW_ASSIGN_OR_RETURN(FieldHeader field, ReadFieldHeader(what));
    if (field.type == CompactType::kStop) break;
    FW_RETURN_IF_ERROR(on_field(field));
  }
  EndStruct();
  return absl::OkStatus();
}

}  // namespace flywheel::interop::parquet
