// JSON Lines and CSV sources: schema inference (with an explicit schema or
// per-field overrides), typed columns, errors that name file:line:column.
// docs/ingest.md, "JSONL and CSV" (inference and conversion rules).
//
// A JSONL field not in the schema (explicit, or inferred from the first
// infer_rows rows) is an InvalidArgument naming FILE:LINE:COL, unless
// `columns` is set, in which case fields outside it are skipped.
//
// Thread-safety: see source.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/format/types.h"
#include "flywheel/interop/source.h"

namespace flywheel::interop {

struct TextReadOptions {
  // The schema to read into (fields by name; a field absent from a row is
  // null, or an error when the field is not nullable). Empty: inferred from
  // the first `infer_rows` rows (see docs/ingest.md for the rules).
  std::optional<format::Schema> schema;
  // Per-field type overrides applied to the inferred schema, e.g.
  // {"id": "int64", "score": "float32"} (type text as format::DataType::Parse).
  std::map<std::string, std::string> overrides;
  // Rows looked at to infer the schema (>= 1). Default 1000.
  int64_t infer_rows = 1000;
  // Fields to keep, in this order; empty = all.
  std::vector<std::string> columns;
  // Rows per batch (>= 1). Default 65536.
  int64_t batch_rows = 65536;
  // CSV only: field delimiter (default ','; '\t' for TSV), quote character
  // (default '"', doubled inside a quoted field to mean itself), whether the
  // first record is a header (default true; false names fields f0, f1, ...),
  // and the unquoted text that means null (default: the empty field).
  char delimiter = ',';
  char quote = '"';
  bool header = true;
  std::string null_text;

  Status Validate() const;
};

Result<std::unique_ptr<RecordBatchReader>> OpenJsonLines(const std::string& path, const TextReadOptions& options);
Result<std::unique_ptr<RecordBatchReader>> OpenCsv(const std::string& path, const TextReadOptions& options);

}  // namespace flywheel::interop
