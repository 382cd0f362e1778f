// Recording table operations as catalog runs: each command or API call that
// reads or writes tables wraps its work in a RunScope, which starts a run,
// records the table versions (mirrored into the catalog) and files it
// consumed and produced, and finishes the run COMPLETE, FAIL or (when it is
// dropped unfinished) ABORT. With no catalog configured every call is a no-op,
// so callers need no branches. docs/catalog.md, "What records lineage".
//
// Thread-safety: a RunScope belongs to one thread.
#pragma once

#include <memory>
#include <string>

#include "flywheel/catalog/catalog.h"
#include "flywheel/table/table.h"

namespace flywheel::catalog {

// The dataset name of `t` (registered on first sight) with `t`'s version
// recorded in the catalog; the node names that version.
Result<Node> MirrorVersion(Catalog& catalog, const table::Table& t);

// "[{"name":"x","type":"int64","nullable":false}, ...]" for a table schema.
std::string SchemaJson(const format::Schema& schema);

// Where a table argument points: a dataset name registered in `catalog` is
// its URI; otherwise the argument is a path. With `for_create` and a
// catalog, a valid dataset name that is neither registered nor an existing
// directory is placed in the warehouse (DefaultLocation). Without a catalog
// the argument is returned unchanged.
Result<std::string> ResolveTableArgument(Catalog* catalog, const std::string& arg, bool for_create);

// ResolveTableArgument plus an access check: the catalog's principal must
// hold `privilege` on the dataset (for a table that does not exist yet and
// `for_create`: on its namespace), audited as `action`. Returns the table
// location. A table first seen here is registered to the principal
// (docs/catalog.md, "Grants"). Without a catalog: `arg`, unchecked.
Result<std::string> AuthorizeTable(Catalog* catalog, const std::string& arg, Privilege privilege,
                                   const std::string& action, bool for_create = false);

// The dataset name of the table at `uri`, if it is one the catalog can name
// without registering anything: registered, or a valid name under the
// warehouse. Empty otherwise.
Result<std::string> DatasetNameFor(Catalog& catalog, const std::string& uri);

// ---- erasure and retention ------------------------------------------
struct EraseRequest {
  std::string dataset;     // "ns/t"
  std::string where;       // "user_id == 123" (or "user_id=123")
  bool downstream = false; // also every dataset derived from it (lineage) that has the key column
  bool dry_run = false;
};

struct DatasetErasure {
  std::string dataset;
  std::string uri;
  table::EraseResult result;
  std::string skipped;  // why a downstream dataset was left alone; empty when erased
};

// Erases the rows from the dataset (ADMIN needed on it and on every
// downstream dataset erased) in every retained version, then downstream
// datasets in lineage order; writes an "erase" audit event with the report.
Result<std::vector<DatasetErasure>> EraseEverywhere(Catalog& catalog, const EraseRequest& request);
std::string ErasureReportJson(const std::vector<DatasetErasure>& report);

struct RetentionOutcome {
  std::string dataset;
  std::vector<int64_t> expired;
  std::vector<std::string> deleted_files;
  uint64_t bytes_freed = 0;
};
// Applies the retention policies (of `dataset`, or of every dataset with
// one): table Expire then Vacuum (grace `grace_ms`). ADMIN on each dataset;
// audited as "retention".
Result<std::vector<RetentionOutcome>> ApplyRetention(Catalog& catalog, const std::string& dataset = "",
                                                     bool dry_run = false, int64_t grace_ms = 3600 * 1000);

// ---- operations as lineage (the one implementation; the CLI and Python call it)
// A node of an operation: a table version (`uri` and `version`, mirrored into
// the catalog) or, when `uri` is empty, a node text ("file:/p", "ns/t@v",
// "arrow:pyarrow.Table").
struct OperationNode {
  std::string uri;
  int64_t version = -1;
  std::string text;
  std::string detail_json = "{}";
};

// Records an operation flywheel ran (ingest, export, compact, a table write):
// its inputs and outputs become edges of run `run_id` when one is given (an
// active run), else of a run of its own (`job`, `job_type`, `params_json`)
// finished COMPLETE, or FAIL when recording an edge fails. Returns the run id.
Result<std::string> RecordOperation(Catalog& catalog, const std::string& run_id, const std::string& job_type,
                                    const std::string& job, const std::vector<OperationNode>& inputs,
                                    const std::vector<OperationNode>& outputs, const std::string& params_json = "{}");

// A commit to the table at `uri` (version `before` -> `after`; `before` 0 for
// a create): a "commit" audit event, and the operation `op` recorded as above
// (input: the version before, when there was one; output: the new version).
// With `run_id` (an active run, which names its own inputs) the new version
// is recorded as that run's output only.
Status RecordTableWrite(Catalog& catalog, const std::string& run_id, const std::string& op, const std::string& uri,
                        int64_t before, int64_t after, const std::string& params_json = "{}");

class RunScope {
 public:
  // `catalog` may be null (nothing is recorded).
  static Result<std::unique_ptr<RunScope>> Start(Catalog* catalog, const std::string& job,
                                                 const std::string& job_type,
                                                 const std::string& params_json = "{}");
  ~RunScope();  // an unfinished run is finished ABORT

  Status Input(const table::Table& t, const std::string& detail_json = "{}");
  Status Output(const table::Table& t, const std::string& detail_json = "{}");
  Status InputFile(const std::string& path, const std::string& detail_json = "{}");
  Status OutputFile(const std::string& path, const std::string& detail_json = "{}");
  // COMPLETE when `outcome` is OK, else FAIL with its message.
  Status Finish(const Status& outcome);

  const std::string& run_id() const { return run_id_; }
  bool recording() const { return catalog_ != nullptr; }

 private:
  RunScope() = default;
  Status Add(bool input, const Node& node, const std::string& detail_json);
  Catalog* catalog_ = nullptr;
  std::string run_id_;
  bool finished_ = false;
};

}  // namespace flywheel::catalog
