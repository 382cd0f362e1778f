// Versioned tables: immutable shard files plus one manifest per version.
//
// A Table handle is a snapshot of one version. Reads (Scan, Take) see exactly
// that version. Writes (Append, Overwrite, Delete, AddColumn, Compact) commit
// a new version by put-if-absent of the next manifest; when another writer
// got there first, the commit rebases and retries if the two operations are
// compatible (appends; deletes of different rows) and fails with Aborted
// naming both operations otherwise. After a successful write the handle
// points at the version it committed. Layout and protocol:
// docs/format/table.md.
//
// Thread-safety: a Table is safe for concurrent reads; writes through one
// handle must not run concurrently with other calls on that handle (use one
// handle per writer thread; handles are cheap). Any number of processes may
// write one table concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"
#include "flywheel/format/leaf_stats.h"
#include "flywheel/format/shard.h"
#include "flywheel/io/file_system.h"
#include "flywheel/table/manifest.h"

namespace flywheel::table {

struct TableOptions {
  // Storage; default: the local file system with fsync on publish.
  std::shared_ptr<io::FileSystem> fs;
  // How new data files are written (page size, codec). Create() records
  // codec, page size and zstd level in the table's config; handles opened
  // later follow the table's config unless `use_table_config` is false.
  format::ShardWriterOptions shard;
  bool use_table_config = true;
  // Maximum rows per data file written by Append/Overwrite/Compact.
  int64_t max_rows_per_file = 1 << 20;
  // Commit attempts before giving up on a contended table (each attempt
  // backs off a little longer, randomised). Default 10000.
  int max_commit_attempts = 10000;
  // Identity recorded in each commit; default "<hostname>:<pid>".
  std::string writer;
  // More config entries Create() records beside codec/page_size/zstd_level
  // (which they may not name), kept by every later version: facts about the
  // table that readers and exporters use, e.g. "logical_types" (written by
  // ingest: the source's dates, timestamps and decimals, docs/ingest.md).
  std::map<std::string, std::string> extra_config;

  Status Validate() const;
};

struct OpenOptions {
  std::optional<int64_t> version;  // default: the latest
  std::optional<std::string> tag;  // open the version a tag names
};

struct CommitOptions {
  // Free-form key/values stored with the commit (lineage, job ids, ...).
  std::map<std::string, std::string> properties;
};

struct VersionInfo {
  int64_t version = 0;
  int64_t timestamp_ms = 0;
  Operation operation;
  int64_t num_rows = 0;
  int64_t num_fragments = 0;
};

struct CompactOptions {
  // Fragments with fewer live rows than this are merged. Default 1M.
  int64_t target_rows = 1 << 20;
  // Fragments with at least this fraction of rows deleted are rewritten.
  double max_deleted_fraction = 0.1;
};

struct ExpireOptions {
  // Expire versions committed before this time (ms since epoch); -1 = no limit.
  int64_t older_than_ms = -1;
  // Always keep at least this many of the newest versions (>= 1).
  int64_t keep_last = 1;
};

struct ExpireResult {
  std::vector<int64_t> expired;
};

struct VacuumOptions {
  // Only delete unreferenced files older than this, so files of writers that
  // are still running are kept. Default one hour; 0 = everything.
  int64_t grace_period_ms = 3600 * 1000;
  bool dry_run = false;
};

struct VacuumResult {
  std::vector<std::string> deleted;  // relative paths
  uint64_t bytes_freed = 0;
};

struct EraseOptions {
  // Report what would be erased (rows per version, fragments) and change nothing.
  bool dry_run = false;
  // Rounds of re-reading versions that writers committed during the erasure
  // before giving up with Aborted (each round rewrites what the last missed).
  int max_rounds = 8;
};

struct EraseResult {
  int64_t rows_erased = 0;                     // physical rows removed from data files
  std::map<int64_t, int64_t> rows_by_version;  // live rows that left each retained version
  std::vector<int64_t> versions_rewritten;     // manifests replaced
  int64_t fragments_scanned = 0;               // key columns read (the rest were ruled out by the key index)
  int64_t fragments_skipped = 0;               // ruled out by the key index without reading
  int64_t fragments_rewritten = 0;
  std::vector<std::string> files_written;      // relative paths
  std::vector<std::string> files_deleted;      // the old files that held the rows (relative paths)
};

// A comparison `column op value` for DeleteWhere and filtered scans. `value`
// is JSON text: a number for numeric columns, a string for string columns.
// `column` may be a path into a nested column: `meta.lang` (a struct
// field), `messages[0].role` (element 0 of a list; [-1] is the last), which
// is null (and never matches) where any step is null or out of range.
struct Predicate {
  std::string column;
  std::string op;  // ==, !=, <, <=, >, >=
  std::string value;
  static Result<Predicate> Parse(std::string_view text);  // e.g. "x >= 10", "name == \"a\""
  // The top-level column the predicate reads: `column` itself when `schema`
  // has a column of that name, else its part before the first '.' or '['.
  std::string TopColumn(const format::Schema& schema) const;
};

class ScanIterator {
 public:
  virtual ~ScanIterator() = default;
  // The next batch, or std::nullopt at the end.
  virtual Result<std::optional<format::RecordBatch>> Next() = 0;
};

struct ScanOptions {
  std::vector<std::string> columns;  // empty = all
  // 0 (default): batches follow page boundaries so uncompressed columns come
  // back zero-copy; otherwise batches of exactly this many rows (the last may
  // be shorter).
  int64_t batch_rows = 0;
  // Only rows matching this comparison (nulls never match); the column it
  // reads need not be among `columns`. Filtered batches are gathered copies
  // and may be shorter than batch_rows; batches left empty are skipped.
  std::optional<Predicate> where;
};

// Where a live row is stored: `fragment` indexes manifest().fragments and
// `row` is the physical row in that fragment's data files.
struct RowAddress {
  int32_t fragment = 0;
  int64_t row = 0;
};

// The shard column holding one field of one fragment, for readers that fetch
// pages themselves (the loader). `reader` is null when the fragment predates
// the field; its rows then all read as `fill` (one row: the default or null).
struct ColumnSource {
  std::shared_ptr<format::ShardReader> reader;
  int column = -1;
  format::Column fill;
};

class AppendTransaction;

class Table {
 public:
  static Result<std::shared_ptr<Table>> Create(const std::string& uri, const format::Schema& schema,
                                               const TableOptions& options = {},
                                               const CommitOptions& commit = {});
  static Result<std::shared_ptr<Table>> Open(const std::string& uri, const OpenOptions& open = {},
                                             const TableOptions& options = {});
  ~Table();

  const std::string& uri() const { return uri_; }
  int64_t version() const { return manifest_.version; }
  const format::Schema& schema() const { return manifest_.schema; }
  int64_t num_rows() const { return manifest_.num_rows(); }
  const Manifest& manifest() const { return manifest_; }

  // Retained versions, oldest first.
  Result<std::vector<VersionInfo>> Versions() const;
  // The newest committed version number (may be newer than version()).
  Result<int64_t> LatestVersion() const;
  // A handle on another version of the same table.
  Result<std::shared_ptr<Table>> Checkout(int64_t version) const;
  Result<std::shared_ptr<Table>> CheckoutLatest() const;

  // ---- reads (see the class comment)
  Result<std::unique_ptr<ScanIterator>> Scan(const ScanOptions& options = {}) const;
  // Rows at global indices (any order, repeats allowed) of this version.
  Result<format::RecordBatch> Take(const std::vector<int64_t>& indices,
                                   const std::vector<std::string>& columns = {}) const;
  // Statistics per leaf of nested column `column` (format/leaf_stats.h),
  // merged over this version's data files from their footers (no data is
  // read). Rows written before the column existed are not counted; deleted
  // rows are (file statistics are bounds, as in Parquet and Delta).
  // NotFound for an unknown column; InvalidArgument for a flat one.
  Result<format::LeafStatsMap> LeafStatistics(const std::string& column) const;

  // Maps global live-row indices (as Take takes them) to where they are
  // stored, skipping deleted rows. O(log fragments + log deleted) per index.
  Status Locate(const int64_t* indices, size_t n, RowAddress* out) const;
  // The reader and column of `column` in fragment `fragment` (an index into
  // manifest().fragments); checks the file against the manifest.
  Result<ColumnSource> OpenColumn(int fragment, std::string_view column) const;

  // ---- writes (each commits one version)
  Status Append(const format::RecordBatch& batch, const CommitOptions& commit = {});
  // An append written in parts (from several threads if wanted) and
  // committed as one version; see AppendTransaction. The handle must outlive
  // the transaction.
  std::unique_ptr<AppendTransaction> BeginAppend();
  Status Overwrite(const format::RecordBatch& batch, const CommitOptions& commit = {});
  // Deletes rows by their global index in this handle's version.
  Status Delete(const std::vector<int64_t>& indices, const CommitOptions& commit = {});
  // Deletes the rows matching `pred`; returns how many.
  Result<int64_t> DeleteWhere(const Predicate& pred, const CommitOptions& commit = {});
  // Adds a field; existing rows read it as null (nullable) or its default.
  Status AddColumn(const format::Field& field, const CommitOptions& commit = {});
  // Rewrites small and deletion-heavy fragments; returns fragments rewritten.
  Result<int64_t> Compact(const CompactOptions& options = {}, const CommitOptions& commit = {});

  // ---- version management (not commits)
  Status Tag(const std::string& name, std::optional<int64_t> version = std::nullopt);
  Status Untag(const std::string& name);
  Result<std::map<std::string, int64_t>> Tags() const;
  Result<ExpireResult> Expire(const ExpireOptions& options);
  Result<VacuumResult> Vacuum(const VacuumOptions& options = {});
  // Erasure (right to be forgotten): removes the rows matching `pred` from
  // the data files of every retained version, replacing the manifests that
  // referenced them, so time travel to any version still works and no
  // version returns those rows; then deletes the old files, and any
  // unreferenced data file that holds matching rows. Rows of other users
  // keep their values; row numbers after an erased row shift down. Not a
  // commit: no new version. Equality predicates use a per-file key index
  // (_erase_index/) so repeated erasures read only the files that may hold
  // the key. docs/format/table.md, "Erasure".
  Result<EraseResult> Erase(const Predicate& pred, const EraseOptions& options = {});

  // Internal: used by the implementation (commit.cc); not part of the API.
  struct Impl;

 private:
  Table() = default;
  std::string uri_;
  TableOptions options_;
  Manifest manifest_;
  std::unique_ptr<Impl> impl_;
  friend struct Impl;
};

// Rows appended in parts and committed together (ingest of many files as
// one version). Nothing is visible until Commit; a transaction destroyed
// without Commit leaves the table unchanged, and the data files it wrote are
// unreferenced (Vacuum deletes them after its grace period).
//
// Thread-safety: Write may be called from several threads at once; Commit
// once, after every Write has returned.
class AppendTransaction {
 public:
  ~AppendTransaction();
  // Writes `batch` (conformed to the table's schema as Append does) as data
  // files now.
  Status Write(const format::RecordBatch& batch);
  int64_t rows() const;
  int64_t files() const;
  // Moves the parts `other` wrote (a transaction on the same table) into
  // this one: write a source in its own transaction, absorb it when the
  // source was read completely, drop it otherwise.
  Status Absorb(AppendTransaction& other);
  // Commits every part written as one "append" version (rebasing over
  // concurrent appends like Append); the table handle then points at it.
  // FailedPrecondition when called twice.
  Status Commit(const CommitOptions& commit = {});

 private:
  friend class Table;
  struct State;
  explicit AppendTransaction(Table* table);
  Table* table_;
  std::unique_ptr<State> state_;
};

}  // namespace flywheel::table
