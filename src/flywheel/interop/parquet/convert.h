// Parquet fields and arrays as flywheel table columns, and a Parquet file as
// an ingest source (interop/source.h). The mapping (docs/ingest.md,
// "Parquet types"):
//   bool, int8..64, uint8..64, float16/32/64, string, binary → the same type
//   fixed_binary(n), UUID                → binary
//   date32 → int32 (days since 1970-01-01); time → int32/int64 in its unit;
//   timestamp → int64 in its unit (INT96: nanoseconds)
//   decimal(p, s)                        → float64 (the nearest double)
//   list<T> (LIST, and repeated fields)  → list<T> of T's table type; a list of
//                                          required numbers is the packed list<T>
//   map<K, V> (MAP)                      → map<K, V>
//   struct<a, b> (groups)                → struct<a, b>
//   null (UNKNOWN)                       → nullable string, all null
// Nullability follows the Parquet repetition at every level (optional →
// '?'). Temporal and decimal tags apply to top-level columns; inside nested
// types those values keep their storage (ints; decimals as float64).
//
// Thread-safety: pure functions; the source as source.h says.
#pragma once

#include <map>
#include <memory>
#include <string_view>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"
#include "flywheel/interop/parquet/reader.h"
#include "flywheel/interop/source.h"

namespace flywheel::interop::parquet {

// The flywheel field a top-level Parquet field becomes (one per field; a
// vector for callers that concatenate).
Result<std::vector<format::Field>> ToTableFields(const Field& field);
// The columns of `array` (of `field`), matching ToTableFields.
Result<std::vector<format::Column>> ToTableColumns(const Field& field, Array array);

// The Parquet logical type of each table column ToTableFields makes whose
// table type keeps only its storage: "date32", "time(ms|us|ns)",
// "timestamp(ms|us|ns)" / "timestamp(ms|us|ns, UTC)", "decimal(P,S)". Ingest
// records them in the table's config ("logical_types", a JSON object of
// column → tag); export turns such columns back into those types.
std::map<std::string, std::string> LogicalTypeTags(const Field& field);
Result<ValueType> ParseLogicalTypeTag(std::string_view tag);

struct SourceOptions {
  std::vector<std::string> columns;  // top-level Parquet fields; empty = all
  // Verify page CRCs where pages carry one (ParquetReader::set_verify_page_crc).
  bool verify_page_crc = true;
};

// Reads one row group per batch.
Result<std::unique_ptr<interop::RecordBatchReader>> OpenParquetSource(const std::string& path,
                                                                      const SourceOptions& options);

}  // namespace flywheel::interop::parquet
