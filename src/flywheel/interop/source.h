// A stream of record batches read from one source file (Parquet, JSONL, CSV,
// WebDataset tar, a directory of files): what the ingest driver (ingest.h)
// appends to a table. docs/ingest.md.
//
// Thread-safety: one reader is used by one thread at a time; different
// readers are independent.
#pragma once

#include <cstdint>
#include <map>
#include <vector>
#include <optional>
#include <string>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"

namespace flywheel::interop {

class RecordBatchReader {
 public:
  virtual ~RecordBatchReader() = default;
  // The schema every batch has (known before the first batch).
  virtual const format::Schema& schema() const = 0;
  // The next batch (at most the reader's batch size rows), or std::nullopt
  // at the end. Errors name the file and where in it (line:column, row,
  // entry, offset) the problem is.
  virtual Result<std::optional<format::RecordBatch>> Next() = 0;
  // Input bytes consumed so far (for progress); 0 when unknown.
  virtual int64_t bytes_read() const { return 0; }
  // Column → logical type tag for columns whose source type says more than
  // their table type (Parquet dates, timestamps, decimals; see
  // parquet/convert.h LogicalTypeTags). Empty for most sources.
  virtual std::map<std::string, std::string> logical_types() const { return {}; }
  // Entries of the source refused and left out so far (WebDataset entries
  // under skip_bad_entries), each "where: why". Empty for most sources.
  virtual std::vector<std::string> skipped_entries() const { return {}; }
};

}  // namespace flywheel::interop
