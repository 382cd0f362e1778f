// Conversions between JSON rows and record batches, for the CLI (`table
// append` reads JSON lines, `table head --json` prints them).
//
// Thread-safety: stateless functions.
#pragma once

#include <istream>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"

namespace flywheel::cli {

// Reads JSON objects, one per line, into a batch of `schema` (fields by
// name; absent or null fields are null). Errors name `source`:line.
Result<format::RecordBatch> ReadJsonLines(std::istream& in, const std::string& source,
                                          const format::Schema& schema);

// Row `row` of `batch` as one JSON object text.
std::string RowToJson(const format::RecordBatch& batch, int64_t row);
// One cell as short display text.
std::string CellToText(const format::Column& c, int64_t row, size_t max_width);

}  // namespace flywheel::cli
