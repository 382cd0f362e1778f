// A table version out as one Parquet file that every engine reads
// (`flywheel export`, Table.to_parquet). docs/ingest.md, "Export".
//
// Columns keep their table types (parquet/writer.h FieldsFromTable), except
// that columns ingest recorded logical types for (the table config's
// "logical_types": dates, times, timestamps, decimals from Parquet sources)
// are written with those types again, so Parquet → table → Parquet keeps
// the values and their types.
//
// Thread-safety: reads the table like any reader.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/interop/parquet/writer.h"
#include "flywheel/table/table.h"

namespace flywheel::interop {

struct ExportOptions {
  std::vector<std::string> columns;  // empty = all, in table order
  parquet::ParquetWriterOptions writer;
  // Rows per row group (>= 1); DuckDB's default size by default.
  int64_t row_group_rows = 122880;
  // Called after each row group with the rows written so far.
  std::function<void(int64_t rows)> progress;
};

// Writes `table`'s version to `path` (which must not exist); returns the rows
// written. A failed export removes the partial file.
Result<int64_t> ExportParquet(const table::Table& table, const std::string& path, const ExportOptions& options);

}  // namespace flywheel::interop
