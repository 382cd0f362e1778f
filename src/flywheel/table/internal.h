// Private pieces shared by the table implementation files.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/format/shard.h"
#include "flywheel/table/deletion_vector.h"
#include "flywheel/table/table.h"

namespace flywheel::table {

// Opened shard readers and decoded deletion vectors, shared by every handle
// (version) of one table opened from the same root handle.
struct FileCache {
  absl::Mutex mu;
  std::map<std::string, std::shared_ptr<format::ShardReader>> readers ABSL_GUARDED_BY(mu);
  std::map<std::string, std::shared_ptr<const DeletionVector>> dvs ABSL_GUARDED_BY(mu);
};

// One write operation on its way to becoming a version.
struct PendingCommit {
  std::string type;
  std::map<std::string, std::string> details;
  // Called with each manifest committed by someone else after our base, in
  // order. Returns a non-empty reason if the two operations conflict.
  std::function<Result<std::string>(const Manifest& theirs)> conflict;
  // Fills `next` (a copy of `base` with version, time and operation already
  // set) with the result of the operation applied on `base`.
  std::function<Status(const Manifest& base, Manifest* next)> apply;
};

struct Table::Impl {
  std::shared_ptr<io::FileSystem> fs;
  std::shared_ptr<FileCache> cache;
  // live_start[i] = global index of fragment i's first live row; one extra
  // entry holds the total.
  std::vector<int64_t> live_start;

  static Result<std::shared_ptr<Table>> NewHandle(const std::string& uri, const TableOptions& options,
                                                  Manifest manifest, std::shared_ptr<FileCache> cache);
  void RebuildIndex(const Manifest& m);

  static std::string ManifestPath(const std::string& uri, int64_t version);
  static std::string HintPath(const std::string& uri);
  static std::string TagPath(const std::string& uri, const std::string& name);

  static Result<Manifest> ReadManifest(io::FileSystem* fs, const std::string& uri, int64_t version);
  static Result<int64_t> FindLatest(io::FileSystem* fs, const std::string& uri);
  static Result<std::vector<int64_t>> ListVersions(io::FileSystem* fs, const std::string& uri);

  // Commits `op` on top of `t`'s version, rebasing over concurrent commits.
  static Status Commit(Table* t, const CommitOptions& commit, PendingCommit op);
  // Writes `batch` (already in table schema order, with field ids) as data
  // files of at most max_rows_per_file rows; fragments get ids on commit.
  static Result<std::vector<Fragment>> WriteFragments(Table* t, const format::RecordBatch& batch);
  // Maps a user batch (fields by name) onto `schema`, filling missing
  // nullable/defaulted fields.
  static Result<format::RecordBatch> Conform(const format::Schema& schema, const format::RecordBatch& batch);

  Result<std::shared_ptr<format::ShardReader>> Reader(const std::string& uri, const DataFile& file);
  Result<std::shared_ptr<const DeletionVector>> Deletions(const std::string& uri, const Fragment& f);
  // Physical rows [start, start+len) of field `field` of fragment `f`;
  // fields the fragment's files lack read as null or the field default.
  Result<format::Column> ReadRange(const std::string& uri, const Fragment& f,
                                   const format::Field& field, int64_t start, int64_t len);
  // The reader and shard column holding `field` in fragment `f`; a null
  // reader when the fragment predates the field.
  Result<std::pair<std::shared_ptr<format::ShardReader>, int>> Locate(const std::string& uri, const Fragment& f,
                                                                       const format::Field& field);
  Result<format::Column> TakeRows(const std::string& uri, const Fragment& f,
                                  const format::Field& field, const int64_t* rows, size_t n);
};

// A parsed `column OP value` predicate, matched against columns of the
// predicate's field (shared by DeleteWhere and Erase).
class PredicateMatcher {
 public:
  // `what` prefixes errors ("delete from /t", "erase from /t").
  static Result<PredicateMatcher> Make(const format::Schema& schema, const Predicate& pred, std::string_view what);
  const format::Field& field() const { return field_; }
  // Appends base + i for every row i of `c` that matches (nulls never do).
  Status Match(const format::Column& c, int64_t base, std::vector<int64_t>* out) const;

 private:
  // One step of a nested path: a struct field (child index) or a list
  // element (index; negative counts from the end).
  struct Step {
    bool element = false;
    int child = 0;
    int64_t index = 0;
  };
  // The leaf values of `c` along path_: one row per row of `c`, null where a
  // step is null or out of range.
  format::Column Extract(const format::Column& c) const;

  format::Field field_;  // the leaf compared (its type; named by the whole path)
  std::vector<Step> path_;
  std::string op_;
  double number_ = 0;
  // Integer literals compare exactly with integer columns (ids above 2^53
  // are not doubles).
  bool integer_ = false;
  bool negative_ = false;
  uint64_t magnitude_ = 0;
  std::string text_;
};

// The file and shard column of `field_id` in fragment `f`; false if absent.
bool FindField(const Fragment& f, int32_t field_id, const DataFile** file);

// Erase's key index (docs/format/table.md, "Erasure"): whether a file's
// index may hold `key_hash`; nullopt when `index_file` is not a valid index.
std::optional<bool> KeyIndexMayContain(std::string_view index_file, uint64_t key_hash);

// The fragment of `m` with id `id`, or nullptr.
inline const Fragment* FindFragment(const Manifest& m, int64_t id) {
  for (const auto& f : m.fragments) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

// A fresh random name component (hex), unique across processes.
std::string NewFileId();
int64_t NowMs();
std::string DefaultWriter();
// A column of `len` rows all holding the field's default (or nulls).
Result<format::Column> DefaultColumn(const format::Field& field, int64_t len);

}  // namespace flywheel::table
