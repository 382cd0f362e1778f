// Writes: the commit protocol (docs/format/table.md, "Commits") and the
// operations built on it.
#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "flywheel/base/metrics.h"
#include "flywheel/base/utf8.h"
#include "flywheel/table/internal.h"

namespace flywheel::table {

using format::Column;
using format::RecordBatch;

namespace {

struct CommitMetrics {
  Counter* conflicts_retried;
  Counter* conflicts_failed;
  Histogram* latency;
  Counter* rows_written;
  Counter* bytes_written;
};

CommitMetrics& Metric() {
  static CommitMetrics m{
      Metrics().GetCounter("flywheel_table_commit_retries_total",
                           "Commits rebased after losing a race to a compatible commit"),
      Metrics().GetCounter("flywheel_table_commit_conflicts_total",
                           "Commits that failed with a conflict"),
      Metrics().GetHistogram("flywheel_table_commit_seconds", "Commit latency including retries"),
      Metrics().GetCounter("flywheel_table_rows_written_total", "Rows written to data files"),
      Metrics().GetCounter("flywheel_table_bytes_written_total", "Bytes of data files written"),
  };
  return m;
}

Counter* CommitCounter(const std::string& op) {
  return Metrics().GetCounter("flywheel_table_commits_total", "Table versions committed", {{"op", op}});
}

bool DataChanged(const Manifest& m) {
  return m.operation.type != "create";
}

}  // namespace

Status Table::Impl::Commit(Table* t, const CommitOptions& commit, PendingCommit op) {
  const auto start = std::chrono::steady_clock::now();
  for (const auto& [k, v] : commit.properties) {
    if (k.empty() || !IsValidUtf8(k) || !IsValidUtf8(v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "commit property keys must be non-empty and keys and values valid UTF-8 (", op.type, " on ",
          t->uri_, ")"));
    }
  }
  io::FileSystem* fs = t->impl_->fs.get();
  Manifest base = t->manifest_;
  std::mt19937_64 rng(std::random_device{}());
  for (int attempt = 0; attempt < t->options_.max_commit_attempts; ++attempt) {
    Manifest next = base;
    next.version = base.version + 1;
    next.timestamp_ms = std::max(NowMs(), base.timestamp_ms);
    next.operation = Operation{op.type, t->options_.writer, commit.properties, op.details};
    FW_RETURN_IF_ERROR_CTX(op.apply(base, &next), op.type, " on table ", t->uri_);
    // Expire frees version numbers, so base+1 being free does not prove that
    // nobody committed after `base`: a newer retained version does. Versions
    // expired in between cannot be checked for conflicts, so refuse (regression:
    // a stale writer once republished an expired number and hid newer commits).
    FW_ASSIGN_OR_RETURN(auto retained, ListVersions(fs, t->uri_));
    if (!retained.empty() && retained.back() > base.version &&
        !std::binary_search(retained.begin(), retained.end(), base.version + 1)) {
      Metric().conflicts_failed->Increment();
      return absl::AbortedError(absl::StrCat(
          "commit conflict on table ", t->uri_, ": ", op.type, " is based on version ", base.version,
          " but versions ", base.version + 1, "..", retained.back() - 1,
          " were expired since, so it cannot be checked against them; reopen the table and retry"));
    }
    // When the listing already shows base+1, skip the (fsynced) publish attempt.
    Status s = std::binary_search(retained.begin(), retained.end(), next.version)
                   ? Status(absl::AlreadyExistsError("next version exists"))
                   : fs->PutIfAbsent(ManifestPath(t->uri_, next.version), next.Encode());
    if (s.ok()) {
      t->manifest_ = std::move(next);
      t->impl_->RebuildIndex(t->manifest_);
      (void)fs->Put(HintPath(t->uri_), std::to_string(t->manifest_.version));
      CommitCounter(op.type)->Increment();
      Metric().latency->Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return absl::OkStatus();
    }
    if (!absl::IsAlreadyExists(s)) return Annotate(s, absl::StrCat("committing ", op.type, " to ", t->uri_));
    // Lost the race: walk the versions committed since `base`.
    for (int64_t v = base.version + 1;; ++v) {
      auto theirs = ReadManifest(fs, t->uri_, v);
      if (absl::IsNotFound(theirs.status())) break;
      FW_RETURN_IF_ERROR_CTX(theirs.status(), "committing ", op.type, " to ", t->uri_);
      FW_ASSIGN_OR_RETURN(std::string reason, op.conflict(*theirs));
      if (!reason.empty()) {
        Metric().conflicts_failed->Increment();
        return absl::AbortedError(absl::StrCat(
            "commit conflict on table ", t->uri_, ": ", op.type, " (by ", t->options_.writer,
            ", based on version ", t->manifest_.version, ") conflicts with ", theirs->operation.type,
            " committed as version ", theirs->version, " (by ", theirs->operation.writer, "): ", reason));
      }
      base = std::move(*theirs);
    }
    Metric().conflicts_retried->Increment();
    // Randomised, growing back-off so contending writers spread out.
    const int64_t cap_us = std::min<int64_t>(50000, 200LL << std::min(attempt, 8));
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % cap_us));
  }
  return absl::AbortedError(absl::StrCat("committing ", op.type, " to ", t->uri_, ": gave up after ",
                                         t->options_.max_commit_attempts, " attempts (table too contended)"));
}

Result<RecordBatch> Table::Impl::Conform(const format::Schema& schema, const RecordBatch& batch) {
  if (static_cast<int64_t>(batch.columns.size()) != static_cast<int64_t>(batch.schema.fields.size())) {
    return absl::InvalidArgumentError("batch has a different number of columns and fields");
  }
  const auto table_index = schema.NameIndex();
  const auto batch_index = batch.schema.NameIndex();
  for (const auto& f : batch.schema.fields) {
    if (!table_index.count(f.name)) {
      return absl::InvalidArgumentError(absl::StrCat("column '", f.name, "' is not in the table schema (",
                                                     schema.ToString(), ")"));
    }
  }
  RecordBatch out;
  out.schema = schema;
  out.num_rows = batch.num_rows;
  for (const auto& field : schema.fields) {
    const auto found = batch_index.find(field.name);
    const int i = found == batch_index.end() ? -1 : found->second;
    if (i < 0) {
      if (!field.nullable && field.default_json.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("column '", field.name, "' is missing and is not nullable"));
      }
      FW_ASSIGN_OR_RETURN(Column c, DefaultColumn(field, batch.num_rows));
      out.columns.push_back(std::move(c));
      continue;
    }
    out.columns.push_back(batch.columns[i]);
  }
  FW_RETURN_IF_ERROR(out.Validate());
  return out;
}

Result<std::vector<Fragment>> Table::Impl::WriteFragments(Table* t, const RecordBatch& batch) {
  std::vector<Fragment> out;
  std::vector<int32_t> ids;
  for (const auto& f : batch.schema.fields) ids.push_back(f.id);
  for (int64_t start = 0; start < batch.num_rows; start += t->options_.max_rows_per_file) {
    const int64_t n = std::min(t->options_.max_rows_per_file, batch.num_rows - start);
    RecordBatch part;
    part.schema = batch.schema;
    part.num_rows = n;
    for (const auto& c : batch.columns) part.columns.push_back(c.Slice(start, n));
    const std::string rel = absl::StrCat("data/", NewFileId(), ".shard");
    FW_ASSIGN_OR_RETURN(auto writer, format::ShardWriter::Open(t->impl_->fs.get(), io::JoinPath(t->uri_, rel),
                                                               batch.schema, t->options_.shard));
    FW_RETURN_IF_ERROR(writer->Write(part));
    FW_ASSIGN_OR_RETURN(format::ShardInfo info, writer->Finish());
    Metric().rows_written->Increment(n);
    Metric().bytes_written->Increment(static_cast<int64_t>(info.size_bytes));
    Fragment f;
    f.num_rows = n;
    f.files.push_back(DataFile{rel, ids, info.size_bytes});
    out.push_back(std::move(f));
  }
  return out;
}

namespace {
void AddFragments(const std::vector<Fragment>& fresh, Manifest* next) {
  for (Fragment f : fresh) {
    f.id = next->next_fragment_id++;
    next->fragments.push_back(std::move(f));
  }
}

// An append of `fresh` (rows in all): compatible with every concurrent commit
// but an overwrite.
PendingCommit AppendOp(std::vector<Fragment> fresh, int64_t rows) {
  PendingCommit op;
  op.type = "append";
  op.details = {{"rows", std::to_string(rows)}, {"files", std::to_string(fresh.size())}};
  op.conflict = [](const Manifest& theirs) -> Result<std::string> {
    if (theirs.operation.type == "overwrite") return std::string("the table was overwritten");
    return std::string();
  };
  op.apply = [fresh = std::move(fresh)](const Manifest&, Manifest* next) {
    AddFragments(fresh, next);
    return absl::OkStatus();
  };
  return op;
}
}  // namespace

Status Table::Append(const RecordBatch& batch, const CommitOptions& commit) {
  FW_ASSIGN_OR_RETURN_CTX(RecordBatch conformed, Impl::Conform(schema(), batch), "append to ", uri_);
  FW_ASSIGN_OR_RETURN(auto fresh, Impl::WriteFragments(this, conformed));
  return Impl::Commit(this, commit, AppendOp(std::move(fresh), batch.num_rows));
}

struct AppendTransaction::State {
  absl::Mutex mu;
  std::vector<Fragment> fresh ABSL_GUARDED_BY(mu);
  int64_t rows ABSL_GUARDED_BY(mu) = 0;
  bool committed ABSL_GUARDED_BY(mu) = false;
};

AppendTransaction::AppendTransaction(Table* table) : table_(table), state_(std::make_unique<State>()) {}
AppendTransaction::~AppendTransaction() = default;

std::unique_ptr<AppendTransaction> Table::BeginAppend() {
  return std::unique_ptr<AppendTransaction>(new AppendTransaction(this));
}

Status AppendTransaction::Write(const RecordBatch& batch) {
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->committed) return absl::FailedPreconditionError("append transaction: already committed");
  }
  FW_ASSIGN_OR_RETURN_CTX(RecordBatch conformed, Table::Impl::Conform(table_->schema(), batch), "append to ",
                          table_->uri());
  FW_ASSIGN_OR_RETURN(auto fresh, Table::Impl::WriteFragments(table_, conformed));
  absl::MutexLock lock(&state_->mu);
  state_->rows += batch.num_rows;
  for (auto& f : fresh) state_->fresh.push_back(std::move(f));
  return absl::OkStatus();
}

int64_t AppendTransaction::rows() const {
  absl::MutexLock lock(&state_->mu);
  return state_->rows;
}

int64_t AppendTransaction::files() const {
  absl::MutexLock lock(&state_->mu);
  return static_cast<int64_t>(state_->fresh.size());
}

Status AppendTransaction::Absorb(AppendTransaction& other) {
  if (&other == this) return absl::InvalidArgumentError("append transaction: cannot absorb itself");
  if (other.table_->uri() != table_->uri()) {
    return absl::InvalidArgumentError(absl::StrCat("append transaction on ", table_->uri(),
                                                   ": cannot absorb one on ", other.table_->uri()));
  }
  std::vector<Fragment> parts;
  int64_t rows;
  {
    absl::MutexLock lock(&other.state_->mu);
    if (other.state_->committed) return absl::FailedPreconditionError("append transaction: already committed");
    other.state_->committed = true;
    parts = std::move(other.state_->fresh);
    rows = other.state_->rows;
  }
  absl::MutexLock lock(&state_->mu);
  if (state_->committed) return absl::FailedPreconditionError("append transaction: already committed");
  state_->rows += rows;
  for (auto& f : parts) state_->fresh.push_back(std::move(f));
  return absl::OkStatus();
}

Status AppendTransaction::Commit(const CommitOptions& commit) {
  std::vector<Fragment> fresh;
  int64_t rows;
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->committed) return absl::FailedPreconditionError("append transaction: already committed");
    state_->committed = true;
    fresh = state_->fresh;
    rows = state_->rows;
  }
  return Table::Impl::Commit(table_, commit, AppendOp(std::move(fresh), rows));
}

Status Table::Overwrite(const RecordBatch& batch, const CommitOptions& commit) {
  // The new schema keeps field ids of same-named, same-typed fields.
  format::Schema schema = batch.schema;
  int32_t next_id = manifest_.next_field_id;
  const auto old_index = manifest_.schema.NameIndex();
  for (auto& f : schema.fields) {
    const auto found = old_index.find(f.name);
    const int old = found == old_index.end() ? -1 : found->second;
    if (old >= 0 && manifest_.schema.fields[old].type == f.type) {
      f.id = manifest_.schema.fields[old].id;
    } else {
      f.id = next_id++;
    }
  }
  FW_RETURN_IF_ERROR_CTX(schema.Validate(), "overwrite of ", uri_);
  FW_ASSIGN_OR_RETURN_CTX(RecordBatch conformed, Impl::Conform(schema, batch), "overwrite of ", uri_);
  FW_ASSIGN_OR_RETURN(auto fresh, Impl::WriteFragments(this, conformed));
  PendingCommit op;
  op.type = "overwrite";
  op.details = {{"rows", std::to_string(batch.num_rows)}};
  op.conflict = [](const Manifest& theirs) -> Result<std::string> {
    if (DataChanged(theirs)) return std::string("both replace or change the table's rows");
    return std::string();
  };
  op.apply = [fresh, schema, next_id](const Manifest&, Manifest* next) {
    next->schema = schema;
    next->next_field_id = std::max(next->next_field_id, next_id);
    next->fragments.clear();
    AddFragments(fresh, next);
    return absl::OkStatus();
  };
  return Impl::Commit(this, commit, std::move(op));
}

Status Table::Delete(const std::vector<int64_t>& indices, const CommitOptions& commit) {
  const auto& frags = manifest_.fragments;
  const auto& starts = impl_->live_start;
  const int64_t total = starts.back();
  // fragment id -> new deleted physical rows (sorted, unique).
  std::map<int64_t, std::vector<int64_t>> mine;
  std::map<int64_t, std::string> read_dv_path;
  for (int64_t g : indices) {
    if (g < 0 || g >= total) {
      return absl::OutOfRangeError(absl::StrCat("delete: row ", g, " is outside [0, ", total,
                                                ") of table ", uri_, " version ", version()));
    }
    const int f = static_cast<int>(std::upper_bound(starts.begin(), starts.end(), g) - starts.begin()) - 1;
    FW_ASSIGN_OR_RETURN(auto dv, impl_->Deletions(uri_, frags[f]));
    const int64_t local = g - starts[f];
    mine[frags[f].id].push_back(dv ? dv->LiveToPhysical(local) : local);
    read_dv_path[frags[f].id] = frags[f].deletion.path;
  }
  if (mine.empty()) return absl::OkStatus();
  int64_t count = 0;
  for (auto& [id, rows] : mine) {
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    count += static_cast<int64_t>(rows.size());
  }
  Impl* impl = impl_.get();
  const std::string uri = uri_;
  PendingCommit op;
  op.type = "delete";
  op.details = {{"rows", std::to_string(count)}, {"fragments", std::to_string(mine.size())}};
  op.conflict = [mine, impl, uri](const Manifest& theirs) -> Result<std::string> {
    if (theirs.operation.type == "overwrite") return std::string("the table was overwritten");
    for (const auto& [id, rows] : mine) {
      const Fragment* f = FindFragment(theirs, id);
      if (f == nullptr) {
        return absl::StrCat("fragment ", id, " that the delete touches was rewritten or removed");
      }
      FW_ASSIGN_OR_RETURN(auto dv, impl->Deletions(uri, *f));
      if (dv) {
        bool overlap = false;
        dv->Union(DeletionVector(rows), &overlap);
        if (overlap) return absl::StrCat("both delete some of the same rows of fragment ", id);
      }
    }
    return std::string();
  };
  op.apply = [mine, impl, uri](const Manifest&, Manifest* next) -> Status {
    for (auto& f : next->fragments) {
      auto it = mine.find(f.id);
      if (it == mine.end()) continue;
      FW_ASSIGN_OR_RETURN(auto existing, impl->Deletions(uri, f));
      DeletionVector merged = existing ? existing->Union(DeletionVector(it->second), nullptr)
                                       : DeletionVector(it->second);
      const std::string rel = absl::StrCat("deletions/", NewFileId(), ".dv");
      FW_RETURN_IF_ERROR(impl->fs->PutIfAbsent(io::JoinPath(uri, rel), merged.Encode()));
      f.deletion = DeletionFile{rel, merged.count()};
    }
    return absl::OkStatus();
  };
  return Impl::Commit(this, commit, std::move(op));
}

namespace {

// `type` with `field` appended to the struct that `path` (field names)
// leads to inside it.
Status AddStructField(format::DataType* type, const std::vector<std::string>& path, size_t at,
                      const format::Field& field, const std::string& where) {
  if (type->id != format::TypeId::kStruct) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is ", type->ToString(), ", not a struct"));
  }
  if (at == path.size()) {
    for (const format::Field& c : type->children) {
      if (c.name == field.name) {
        return absl::AlreadyExistsError(absl::StrCat(where, " already has a field '", field.name, "'"));
      }
    }
    type->children.push_back(field);
    return absl::OkStatus();
  }
  for (format::Field& c : type->children) {
    if (c.name == path[at]) return AddStructField(&c.type, path, at + 1, field, absl::StrCat(where, ".", c.name));
  }
  return absl::NotFoundError(absl::StrCat(where, " has no field '", path[at], "'"));
}

// An add_column commit (its apply set by the caller): conflicts with any
// other schema change committed meanwhile.
PendingCommit AddColumnOp(const format::Field& field) {
  PendingCommit op;
  op.type = "add_column";
  op.details = {{"column", field.name}, {"type", field.type.ToString()}};
  op.conflict = [](const Manifest& theirs) -> Result<std::string> {
    if (theirs.operation.type == "overwrite" || theirs.operation.type == "add_column") {
      return std::string("both change the schema");
    }
    return std::string();
  };
  return op;
}

}  // namespace

Status Table::AddColumn(const format::Field& field_in, const CommitOptions& commit) {
  format::Field field = field_in;
  // "meta.src" adds field src to struct column meta (when no column is named
  // "meta.src"): rows written before read it as null.
  if (const size_t dot = field.name.find('.');
      dot != std::string::npos && schema().FieldIndex(field.name) < 0 && schema().FieldIndex(field.name.substr(0, dot)) >= 0) {
    std::vector<std::string> path = absl::StrSplit(field.name, '.');
    const int ci = schema().FieldIndex(path[0]);
    if (!field.nullable) {
      return absl::InvalidArgumentError(absl::StrCat("add_column '", field.name,
                                                     "': a field added to a struct must be nullable"));
    }
    format::Field added = field;
    added.name = path.back();
    added.id = -1;
    added.default_json.clear();
    format::DataType widened = schema().fields[ci].type;
    FW_RETURN_IF_ERROR_CTX(
        AddStructField(&widened, std::vector<std::string>(path.begin() + 1, path.end() - 1), 0, added,
                       absl::StrCat("column '", path[0], "'")),
        "add_column '", field.name, "'");
    FW_RETURN_IF_ERROR_CTX(widened.Validate(), "add_column '", field.name, "'");
    PendingCommit op = AddColumnOp(field);
    op.apply = [ci, widened, name = field.name, uri = uri_](const Manifest&, Manifest* next) {
      next->schema.fields[static_cast<size_t>(ci)].type = widened;
      return Annotate(next->schema.Validate(), absl::StrCat("add_column '", name, "' to ", uri));
    };
    return Impl::Commit(this, commit, std::move(op));
  }
  if (schema().FieldIndex(field.name) >= 0) {
    return absl::AlreadyExistsError(absl::StrCat("table ", uri_, " already has a column '", field.name, "'"));
  }
  FW_RETURN_IF_ERROR_CTX(field.type.Validate(), "add_column '", field.name, "'");
  if (!field.nullable && field.default_json.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("add_column '", field.name,
                                                   "': existing rows need a value; make the column "
                                                   "nullable or give it a default"));
  }
  FW_RETURN_IF_ERROR_CTX(DefaultColumn(field, 1).status(), "add_column '", field.name, "'");
  PendingCommit op = AddColumnOp(field);
  op.apply = [field, uri = uri_](const Manifest&, Manifest* next) mutable {
    field.id = next->next_field_id++;
    next->schema.fields.push_back(field);
    // The new schema must be one readers accept (format/limits.h: at most
    // kMaxColumns columns), or this version could never be read.
    return Annotate(next->schema.Validate(), absl::StrCat("add_column '", field.name, "' to ", uri));
  };
  return Impl::Commit(this, commit, std::move(op));
}

}  // namespace flywheel::table
