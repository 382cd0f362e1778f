// The catalog's column rules applied to data, in one place: what a reader
// may ask for (refused columns, predicates on tagged columns, file exports)
// and what it gets (masked columns), for every read path — Table scan/take
// through the bindings and the CLI, the Loader (as its BatchTransform), Arrow
// export and Parquet export. docs/catalog.md, "Column tags and masking".
//
// A ReadGuard is built once per table handle or loader from the acting
// principal's ReadPolicy of each table's dataset; over several tables (a
// Loader mixture) each column takes the strictest mode of its tables, with
// that table's salt. Masked values:
//   hash, string   "h:" + the first 16 hex digits of SHA256(salt, 0x00, value)
//   hash, binary   the first 8 bytes of that digest
//   hash, integer  (1-D, any width) the digest of the value's decimal text,
//                  its first 8 bytes as a little-endian uint64 cast to the
//                  column's type (narrow types keep the low bytes)
//   otherwise      (null mode; hash of float, bool, tensors, lists) nulls, with
//                  zeroed fixed-width storage and empty list/bytes values
// Nulls stay null. Refused columns are never masked: asking for one fails.
//
// Thread-safety: immutable after construction; the checks audit through the
// catalog, which is thread-safe. The catalog must outlive the guard.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/catalog/catalog.h"
#include "flywheel/format/column.h"
#include "flywheel/loader/batch_transform.h"

namespace flywheel::catalog {

class ReadGuard final : public loader::BatchTransform {
 public:
  struct Column {
    std::string name;
    ReadPolicy::Mode mode = ReadPolicy::Mode::kHash;
    std::string salt;
    std::string dataset;            // the dataset whose policy applies
    std::vector<std::string> tags;  // the principal's uncleared tags
  };

  // The guard of `catalog`'s principal over the tables at `table_uris`
  // (each resolved to its dataset; READ is required to see a policy). Null
  // catalog: an empty guard (everything readable as stored).
  static Result<std::shared_ptr<const ReadGuard>> For(Catalog* catalog, const std::vector<std::string>& table_uris);
  // A guard from explicit columns (tests); denials are audited when
  // `catalog` is not null.
  ReadGuard(Catalog* catalog, std::string principal, std::vector<Column> columns);

  bool empty() const { return columns_.empty(); }
  const std::vector<Column>& columns() const { return columns_; }
  const Column* Find(std::string_view name) const;
  const std::string& principal() const { return principal_; }

  // Reading `requested` (empty: every column): PermissionDenied naming the
  // first refused column asked for, audited as a denied `action`.
  Status CheckRead(const std::vector<std::string>& requested, std::string_view action = "read") const;
  // Writing `columns` out of the catalog's reach (a Parquet file, a CLI
  // export): any uncleared tagged column is refused, whatever the mode;
  // `location` names the table in the message.
  Status CheckExport(const std::vector<std::string>& columns, std::string_view location,
                     std::string_view action = "export") const;
  // A predicate over `column` (scan/export where=, delete): refused for an
  // uncleared tagged column, since which rows match would leak its values.
  Status CheckPredicate(std::string_view column, std::string_view location, std::string_view action) const;

  // `batch` with its guarded columns masked and their fields nullable (as
  // MaskedSchema says). Unguarded columns share their buffers.
  Result<format::RecordBatch> Mask(format::RecordBatch batch) const;
  // The schema of masked batches: guarded fields nullable.
  format::Schema MaskedSchema(format::Schema schema) const;
  // One column, masked as `rule` says (format::Column's layout).
  static format::Column MaskColumn(const format::Column& column, const Column& rule);

  // loader::BatchTransform: CheckRead at open, Mask on every batch.
  Status Check(const std::vector<std::string>& columns) const override;
  Result<std::shared_ptr<const loader::Batch>> Apply(std::shared_ptr<const loader::Batch> batch) const override;

 private:
  Status Denied(std::string_view action, const std::string& dataset, const std::string& detail_json,
                std::string message) const;

  Catalog* catalog_;
  std::string principal_;
  std::vector<Column> columns_;
};

}  // namespace flywheel::catalog
