// Parquet file and page metadata: the Thrift structures of parquet.thrift
// (apache/parquet-format) that flywheel reads and writes, as plain C++ values,
// and their Thrift compact-protocol encoding (thrift.h). docs/format/parquet.md.
//
// Only the fields flywheel uses are kept; every other field is skipped on
// read (so files from newer writers parse) and never written. Parsing checks
// every length and count against the bytes it was given and fails with an
// error naming the structure and field, never reads out of bounds.
//
// Thread-safety: value types and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::interop::parquet {

// Every struct below compares field-wise (operator==): Parse(Serialize(x))
// == x is what the tests and the fuzz target check.

// Values are parquet.thrift's (they are the on-disk numbers).
enum class PhysicalType : int32_t {
  kBoolean = 0,
  kInt32 = 1,
  kInt64 = 2,
  kInt96 = 3,
  kFloat = 4,
  kDouble = 5,
  kByteArray = 6,
  kFixedLenByteArray = 7,
};

enum class Repetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };

// The legacy ConvertedType (still written by most tools beside LogicalType).
enum class ConvertedType : int32_t {
  kUtf8 = 0,
  kMap = 1,
  kMapKeyValue = 2,
  kList = 3,
  kEnum = 4,
  kDecimal = 5,
  kDate = 6,
  kTimeMillis = 7,
  kTimeMicros = 8,
  kTimestampMillis = 9,
  kTimestampMicros = 10,
  kUint8 = 11,
  kUint16 = 12,
  kUint32 = 13,
  kUint64 = 14,
  kInt8 = 15,
  kInt16 = 16,
  kInt32 = 17,
  kInt64 = 18,
  kJson = 19,
  kBson = 20,
  kInterval = 21,
};

enum class TimeUnit : int32_t { kMillis = 0, kMicros = 1, kNanos = 2 };

// The LogicalType union (field ids in parquet.thrift: STRING 1, MAP 2, LIST 3,
// ENUM 4, DECIMAL 5, DATE 6, TIME 7, TIMESTAMP 8, INTEGER 10, UNKNOWN 11,
// JSON 12, BSON 13, UUID 14, FLOAT16 15). kNone: the element has none.
struct LogicalType {
  enum class Kind : int32_t {
    kNone = 0,
    kString,
    kMap,
    kList,
    kEnum,
    kDecimal,
    kDate,
    kTime,
    kTimestamp,
    kInteger,
    kUnknown,  // always null
    kJson,
    kBson,
    kUuid,
    kFloat16,
    kOther,  // a union member this reader does not know (kept as its field id)
  };
  Kind kind = Kind::kNone;
  int32_t decimal_scale = 0;          // kDecimal
  int32_t decimal_precision = 0;      // kDecimal
  bool adjusted_to_utc = false;       // kTime, kTimestamp
  TimeUnit unit = TimeUnit::kMillis;  // kTime, kTimestamp
  int32_t bit_width = 0;              // kInteger: 8, 16, 32 or 64
  bool is_signed = true;              // kInteger
  int16_t other_field_id = 0;         // kOther

  friend bool operator==(const LogicalType&, const LogicalType&) = default;
};

struct SchemaElement {
  std::optional<PhysicalType> type;      // absent for groups
  int32_t type_length = 0;               // FIXED_LEN_BYTE_ARRAY bytes
  std::optional<Repetition> repetition;  // absent only for the root
  std::string name;
  int32_t num_children = 0;  // groups: the children follow depth-first
  std::optional<ConvertedType> converted_type;
  std::optional<int32_t> scale;
  std::optional<int32_t> precision;
  std::optional<int32_t> field_id;
  LogicalType logical_type;

  friend bool operator==(const SchemaElement&, const SchemaElement&) = default;
};

// Values are parquet.thrift's CompressionCodec.
enum class CompressionCodec : int32_t {
  kUncompressed = 0,
  kSnappy = 1,
  kGzip = 2,
  kLzo = 3,
  kBrotli = 4,
  kLz4 = 5,  // the deprecated Hadoop-framed LZ4
  kZstd = 6,
  kLz4Raw = 7,
};

// Values are parquet.thrift's Encoding (1 is unused).
enum class Encoding : int32_t {
  kPlain = 0,
  kPlainDictionary = 2,
  kRle = 3,
  kBitPacked = 4,
  kDeltaBinaryPacked = 5,
  kDeltaLengthByteArray = 6,
  kDeltaByteArray = 7,
  kRleDictionary = 8,
  kByteStreamSplit = 9,
};

// Min/max are the PLAIN encoding of the value (BYTE_ARRAY: the bytes alone).
// min_value/max_value (fields 6/5) are preferred; min/max (2/1) are the
// deprecated signed-order forms older writers set.
struct Statistics {
  std::optional<std::string> max;
  std::optional<std::string> min;
  std::optional<int64_t> null_count;
  std::optional<int64_t> distinct_count;
  std::optional<std::string> max_value;
  std::optional<std::string> min_value;

  friend bool operator==(const Statistics&, const Statistics&) = default;
};

struct ColumnMetaData {
  PhysicalType type = PhysicalType::kBoolean;
  // As written, unknown values included (they are cast, not rejected): the
  // list only says which encodings the pages use, and a page whose encoding
  // this reader does not know fails in ParsePageHeader anyway.
  std::vector<Encoding> encodings;
  std::vector<std::string> path_in_schema;
  CompressionCodec codec = CompressionCodec::kUncompressed;
  int64_t num_values = 0;
  int64_t total_uncompressed_size = 0;
  int64_t total_compressed_size = 0;
  int64_t data_page_offset = 0;
  std::optional<int64_t> index_page_offset;
  std::optional<int64_t> dictionary_page_offset;
  std::optional<Statistics> statistics;

  friend bool operator==(const ColumnMetaData&, const ColumnMetaData&) = default;
};

struct ColumnChunk {
  std::string file_path;  // empty: this file
  int64_t file_offset = 0;
  std::optional<ColumnMetaData> meta_data;

  friend bool operator==(const ColumnChunk&, const ColumnChunk&) = default;
};

struct RowGroup {
  std::vector<ColumnChunk> columns;
  int64_t total_byte_size = 0;
  int64_t num_rows = 0;
  std::optional<int64_t> file_offset;
  std::optional<int64_t> total_compressed_size;
  std::optional<int16_t> ordinal;

  friend bool operator==(const RowGroup&, const RowGroup&) = default;
};

struct KeyValue {
  std::string key;
  std::optional<std::string> value;

  friend bool operator==(const KeyValue&, const KeyValue&) = default;
};

struct FileMetaData {
  int32_t version = 1;
  std::vector<SchemaElement> schema;  // depth-first; schema[0] is the root
  int64_t num_rows = 0;
  std::vector<RowGroup> row_groups;
  std::vector<KeyValue> key_value_metadata;
  std::optional<std::string> created_by;

  friend bool operator==(const FileMetaData&, const FileMetaData&) = default;
};

enum class PageType : int32_t {
  kDataPage = 0,
  kIndexPage = 1,
  kDictionaryPage = 2,
  kDataPageV2 = 3,
};

struct DataPageHeader {
  int32_t num_values = 0;  // values including nulls (and list entries)
  Encoding encoding = Encoding::kPlain;
  Encoding definition_level_encoding = Encoding::kRle;
  Encoding repetition_level_encoding = Encoding::kRle;
  std::optional<Statistics> statistics;

  friend bool operator==(const DataPageHeader&, const DataPageHeader&) = default;
};

struct DictionaryPageHeader {
  int32_t num_values = 0;
  Encoding encoding = Encoding::kPlain;
  std::optional<bool> is_sorted;

  friend bool operator==(const DictionaryPageHeader&, const DictionaryPageHeader&) = default;
};

struct DataPageHeaderV2 {
  int32_t num_values = 0;
  int32_t num_nulls = 0;
  int32_t num_rows = 0;
  Encoding encoding = Encoding::kPlain;
  int32_t definition_levels_byte_length = 0;
  int32_t repetition_levels_byte_length = 0;
  bool is_compressed = true;  // absent means true
  std::optional<Statistics> statistics;

  friend bool operator==(const DataPageHeaderV2&, const DataPageHeaderV2&) = default;
};

struct PageHeader {
  PageType type = PageType::kDataPage;
  int32_t uncompressed_page_size = 0;
  int32_t compressed_page_size = 0;
  std::optional<int32_t> crc;
  std::optional<DataPageHeader> data_page_header;
  std::optional<DictionaryPageHeader> dictionary_page_header;
  std::optional<DataPageHeaderV2> data_page_header_v2;

  friend bool operator==(const PageHeader&, const PageHeader&) = default;
};

// Parses the footer's FileMetaData (the `size` bytes before the footer
// length; bytes left after the structure are an error). Checks required
// fields are present, counts, sizes and offsets are non-negative, enum
// values are known (except ColumnMetaData.encodings) and schema num_children
// fit the element list (not the schema's meaning: the reader does that).
// Memory: the parsed structures can be ~100x the encoded size, so callers
// bound `size` (a footer is rarely above a few MiB).
Result<FileMetaData> ParseFileMetaData(const uint8_t* data, size_t size);

// Parses one PageHeader at the start of [data, data + size); *consumed is set
// to the header's encoded length. Checks sizes are non-negative and the
// header for `type` is present.
Result<PageHeader> ParsePageHeader(const uint8_t* data, size_t size, size_t* consumed);

// Compact-protocol encodings, for the writer; Parse*(Serialize*(x)) == x.
std::string SerializeFileMetaData(const FileMetaData& m);
std::string SerializePageHeader(const PageHeader& h);

}  // namespace flywheel::interop::parquet
