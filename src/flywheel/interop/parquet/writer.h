// Writes Parquet files that other engines read (DuckDB, Arrow, Spark):
// PLAIN and dictionary encoding, ZSTD / SNAPPY / GZIP / BROTLI / LZ4_RAW /
// none, configurable row group and page sizes, nullable columns, lists (the
// standard 3-level form) and structs, column statistics (min/max/null
// count), data page v1. The input is the reader's model (reader.h: Field +
// Array), so reader(writer(x)) == x. docs/format/parquet.md, "Writing".
//
// Types: every ValueKind has one Parquet form (physical type, LogicalType
// and, where one exists, the legacy ConvertedType): int8..64 / uint8..64 as
// INT32/INT64 INTEGER(bits, signed); float16 as FIXED_LEN_BYTE_ARRAY(2)
// FLOAT16; string as BYTE_ARRAY STRING; binary as BYTE_ARRAY;
// fixed_binary(n) as FIXED_LEN_BYTE_ARRAY(n); date32 DATE; time32 INT32
// TIME(MILLIS); time64 INT64 TIME(MICROS|NANOS); timestamps INT64
// TIMESTAMP(unit) (never INT96); decimals by width: 4 → INT32, 8 → INT64,
// 16 → FIXED_LEN_BYTE_ARRAY(16) big-endian; null → INT32 UNKNOWN. The
// legacy TIME_* / TIMESTAMP_* converted types are written only for UTC
// values (they mean isAdjustedToUTC = true). Lists keep their element
// field's name; a map read by the reader (a list of key/value structs) is
// written back as such a list, not as a MAP. One normalisation: the reader
// gives decimals of precision <= 18 stored in bytes 8 bytes wide, so a
// 16-byte decimal(p <= 18) reads back as an 8-byte one.
//
// Pages start only at the first entry of a row (repetition level 0), as
// readers that skip by rows require.
//
// Thread-safety: one writer per thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"
#include "flywheel/interop/parquet/metadata.h"
#include "flywheel/interop/parquet/reader.h"

namespace flywheel::interop::parquet {

struct ParquetWriterOptions {
  // kLz4 (Hadoop framing) and kLzo are refused.
  CompressionCodec codec = CompressionCodec::kZstd;
  // Codec level; < 0: the codec's default. GZIP 0..9, BROTLI 0..11, ZSTD
  // 0..22; ignored by the others.
  int level = -1;
  // Target uncompressed bytes per data page, 1..2^30: a page closes after
  // the row (all of its entries in this column) that crosses it, or after
  // 2^20 entries. Default 1 MiB.
  int64_t page_bytes = int64_t{1} << 20;
  // Dictionary-encode a column chunk (all types but BOOLEAN) while its
  // PLAIN-encoded dictionary stays within this many bytes. When a row would
  // overflow it, the pages so far keep the dictionary and the rest of the
  // chunk is PLAIN (the chunk then lists both encodings). 0 = never;
  // at most 2^30.
  int64_t dictionary_bytes = int64_t{1} << 20;
  // Column statistics in each column chunk: null_count (entries below the
  // leaf's maximum definition level: nulls, and empty or null parents), and
  // min_value/max_value (PLAIN-encoded) in the type's order: signed for
  // signed integers, dates, times, timestamps and decimals; unsigned for
  // uint*; floats numerically (-0 as the minimum's zero, +0 as the
  // maximum's; no bounds when the chunk holds a NaN: DuckDB orders NaN above
  // every number and would prune on bounds that skip it); bytes unsigned
  // lexicographic. The deprecated min/max
  // are also set for signed INT32/INT64/FLOAT/DOUBLE columns. Byte arrays
  // whose minimum or maximum is over 64 bytes get no bounds.
  bool statistics = true;
  std::string created_by = "flywheel 0.1.0";
  std::map<std::string, std::string> key_value_metadata;

  Status Validate() const;
};

class ParquetWriter {
 public:
  // Creates `path` (which must not exist: AlreadyExists) for rows of
  // `fields`. InvalidArgument for bad options and for fields Parquet cannot
  // hold (no or duplicate names, a list without exactly one child, an empty
  // struct, a decimal that does not fit its width, a non-nullable null
  // field, time32 not in milliseconds, ...), naming the field.
  static Result<std::unique_ptr<ParquetWriter>> Open(const std::string& path, std::vector<Field> fields,
                                                     const ParquetWriterOptions& options = {});
  // Destroying a writer without Close leaves the file without its footer:
  // not a valid Parquet file (callers delete it).
  virtual ~ParquetWriter() = default;
  // One row group: one Array per field, all of the same length, types as the
  // fields say (the reader's conventions: validity bitmaps, offsets, children).
  // Slots under a null parent are not read. Arrays that do not match their
  // fields (type, lengths, buffer sizes, offsets, a null in a non-nullable
  // field, invalid UTF-8 in a string) are InvalidArgument naming the column,
  // and write nothing: the writer stays usable. A failed write of the file
  // leaves the writer failed. Zero rows: no row group is written.
  virtual Status WriteRowGroup(const std::vector<Array>& columns) = 0;
  // Writes the footer and closes the file. REQUIRES: called once, last
  // (FailedPrecondition otherwise).
  virtual Status Close() = 0;
  virtual int64_t rows_written() const = 0;
};

// flywheel table columns as Parquet: the fields a table schema becomes
// (scalars as themselves, float16 as FLOAT16, string/binary, list<T> as a
// LIST of non-null T, fixed tensors like uint8[32,32,3] as a LIST of T
// holding each row's elements flattened in row-major order; the shape is not
// recorded), nullable as the table field is, and the arrays of one record
// batch (copied).
Result<std::vector<Field>> FieldsFromTable(const format::Schema& schema);
Result<std::vector<Array>> ArraysFromTable(const format::RecordBatch& batch);

}  // namespace flywheel::interop::parquet
