// Reads Parquet files into in-memory columns: the schema as a tree of logical
// fields, and each top-level field of each row group as an Array (Arrow-like:
// validity bitmap, offsets for lists and strings, child arrays for lists and
// structs). docs/format/parquet.md, "Reading".
//
// Everything read from the file is checked: the footer, every page header,
// level and value stream; an error names the file, row group, column path and
// page (with its byte offset) it was found in. Never a crash, never an
// allocation a lying header asked for without the bytes to back it.
//
// Thread-safety: a ParquetReader is immutable after Open; ReadRowGroup may be
// called from several threads at once (ReadAll does, one row group each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/interop/parquet/metadata.h"

namespace flywheel::io {
class RandomAccessFile;
}

namespace flywheel::interop::parquet {

// The type of an Array's values, after applying logical/converted types.
enum class ValueKind : uint8_t {
  kNull,        // LogicalType UNKNOWN: every value null
  kBool,        // 1 byte per value (0/1)
  kInt8, kInt16, kInt32, kInt64,
  kUInt8, kUInt16, kUInt32, kUInt64,
  kFloat16,     // 2 bytes, IEEE half
  kFloat32, kFloat64,
  kString,      // UTF-8 (validated), offsets + bytes
  kBinary,      // offsets + bytes
  kFixedBinary, // `width` bytes per value (FIXED_LEN_BYTE_ARRAY, UUID)
  kDate32,      // int32 days since 1970-01-01
  kTime32,      // int32, `unit` (millis)
  kTime64,      // int64, `unit` (micros / nanos)
  kTimestamp,   // int64 since the epoch in `unit`; INT96 becomes nanos
  kDecimal,     // unscaled two's complement, little-endian, `width` 4/8/16 bytes
  kList,        // offsets (length + 1) into children[0]
  kStruct,      // children, one per field, each `length` long
};

struct ValueType {
  ValueKind kind = ValueKind::kNull;
  int32_t width = 0;  // kFixedBinary bytes, kDecimal bytes
  int32_t precision = 0, scale = 0;  // kDecimal
  TimeUnit unit = TimeUnit::kMicros;  // kTime*, kTimestamp
  bool adjusted_to_utc = false;       // kTime*, kTimestamp
};

// One field of the logical schema (lists and maps are kList; a map is a list
// of struct{key, value}).
struct Field {
  std::string name;
  ValueType type;
  bool nullable = true;
  std::vector<Field> children;  // kList: the element; kStruct: the fields
  // kList annotated MAP: its element is a non-null struct {key, value}
  // (written back as a MAP group of a repeated key_value group).
  bool map = false;
};

// Bytes per value of a fixed-width kind (bool 1, ..., decimal/fixed_binary
// `width`); 0 for strings, binary, lists, structs and null.
size_t ValueWidth(const ValueType& t);
std::string ValueTypeName(const ValueType& t);  // "int32", "list<string>", "decimal(12,2)", ...
std::string FieldTypeName(const Field& f);      // with children: "struct<bytes: binary, path: string>"

struct Array {
  ValueType type;
  int64_t length = 0;
  int64_t null_count = 0;
  std::vector<uint8_t> validity;  // bit i (LSB first) = row i valid; empty = none null
  std::vector<int64_t> offsets;   // kString/kBinary (bytes), kList (child elements); length + 1
  std::vector<uint8_t> values;    // fixed-width values (a null's bytes are zero) or string bytes
  std::vector<Array> children;

  bool IsValid(int64_t i) const { return validity.empty() || ((validity[i >> 3] >> (i & 7)) & 1); }
};

struct ReadOptions {
  // Top-level field names to read, in this order; empty = all of them.
  std::vector<std::string> columns;
  // Threads for ReadAll (row groups in parallel); <= 0: the number of CPUs.
  int threads = 0;
};

class ParquetReader {
 public:
  // Opens and checks the footer of `path` (magic at both ends, metadata
  // length within the file, schema well-formed and every leaf's type one
  // this reader knows).
  static Result<std::unique_ptr<ParquetReader>> Open(const std::string& path);
  // The same over an already open file; `name` is used in errors.
  static Result<std::unique_ptr<ParquetReader>> Open(std::shared_ptr<io::RandomAccessFile> file,
                                                     std::string name);
  virtual ~ParquetReader() = default;

  virtual const FileMetaData& metadata() const = 0;
  // Page CRCs (the optional PageHeader.crc: CRC-32 of the page's bytes as
  // stored, after its header) are verified where a page has one, the
  // default; false skips the check. Pages without a CRC cannot be checked.
  virtual void set_verify_page_crc(bool verify) = 0;
  virtual const std::vector<Field>& fields() const = 0;  // top-level fields
  virtual int64_t num_rows() const = 0;
  virtual int num_row_groups() const = 0;

  // The named top-level fields (all when empty) of one row group, one Array
  // each, in the order asked. NotFound names an unknown column.
  virtual Result<std::vector<Array>> ReadRowGroup(int row_group,
                                                  const std::vector<std::string>& columns) const = 0;
  // Every row group, concatenated (in file order), read in parallel.
  virtual Result<std::vector<Array>> ReadAll(const ReadOptions& options) const = 0;
};

// Appends b's rows after a's (same type), for readers of several files.
Status AppendArray(Array* a, Array b);

}  // namespace flywheel::interop::parquet
