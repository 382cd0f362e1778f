// Writes Parquet files that other engines read (DuckDB, Arrow, Spark):
// PLAIN and dictionary encoding, ZSTD / SNAPPY / GZIP / LZ4_RAW / none,
// configurable row group and page sizes, nullable columns, lists (the
// standard 3-level form) and structs, column statistics (min/max/null
// count), data page v1. The input is the reader's model (reader.h: Field +
// Array), so reader(writer(x)) == x. docs/format/parquet.md, "Writing".
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

namespace flywheel::parquet {

struct WriterOptions {
  CompressionCodec codec = CompressionCodec::kZstd;  // kLz4 (Hadoop framing) and kLzo are refused
  int level = -1;                                    // codec level; < 0: its default
  // Target uncompressed bytes per data page (a page closes after the value
  // that crosses it). Default 1 MiB.
  int64_t page_bytes = int64_t{1} << 20;
  // Dictionary-encode a column chunk while its dictionary stays under this
  // many bytes (then fall back to PLAIN for the rest of the chunk); 0 = never.
  int64_t dictionary_bytes = int64_t{1} << 20;
  // Column statistics (min/max/null_count) in each column chunk.
  bool statistics = true;
  std::string created_by = "flywheel 0.1.0";
  std::map<std::string, std::string> key_value_metadata;

  Status Validate() const;
};

class ParquetWriter {
 public:
  // Creates `path` (which must not exist) for rows of `fields`.
  static Result<std::unique_ptr<ParquetWriter>> Open(const std::string& path, std::vector<Field> fields,
                                                     const WriterOptions& options = {});
  virtual ~ParquetWriter() = default;
  // One row group: one Array per field, all of the same length, types as the
  // fields say (the reader's conventions: validity bitmaps, offsets, children).
  virtual Status WriteRowGroup(const std::vector<Array>& columns) = 0;
  // Writes the footer and closes the file. REQUIRES: called once, last.
  virtual Status Close() = 0;
  virtual int64_t rows_written() const = 0;
};

// flywheel table columns as Parquet: the fields a table schema becomes
// (scalars as themselves, float16 as FLOAT16, string/binary, list<T> as a
// LIST of T, fixed tensors like float32[4] as a LIST of T), and the arrays
// of one record batch.
Result<std::vector<Field>> FieldsFromTable(const format::Schema& schema);
Result<std::vector<Array>> ArraysFromTable(const format::RecordBatch& batch);

}  // namespace flywheel::parquet
