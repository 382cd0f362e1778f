// The catalog: what spans tables. Datasets (a name for a table URI) and their
// versions, jobs and runs with the datasets and artifacts each consumed and
// produced (lineage), OpenLineage events for every run. Tables stay
// self-describing and readable without it (DESIGN.md, "Catalog beside the
// tables"). Schema, naming rules and queries: docs/catalog.md.
//
// Storage is a SqlDb: SQLite in the catalog root (one file, WAL) or
// PostgreSQL. Both get the same versioned schema migrations and run the
// same code. Any number of processes may use one catalog at once.
//
// Thread-safety: a Catalog is safe to share between threads (calls are
// serialised on one connection); open one per process.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/base/status.h"

namespace flywheel::catalog {

class SqlDb;
class EventSink;

struct CatalogOptions {
  // Who is acting; empty = the identity from the environment
  // (FLYWHEEL_USER, else FLYWHEEL_TOKEN_FILE, else the OS user).
  std::string principal;
  // Where tables named by dataset ("ns/t") live: <warehouse>/ns/t. Empty =
  // the catalog root for a directory catalog, else FLYWHEEL_WAREHOUSE; a
  // PostgreSQL catalog without one can only name tables registered by URI.
  std::string warehouse;
  // OpenLineage RunEvents are appended to this JSON Lines file. Empty = the
  // FLYWHEEL_OPENLINEAGE_FILE environment variable, else
  // <catalog root>/openlineage.jsonl for a directory catalog, else none.
  // "-" (here or in the variable): no file.
  std::string openlineage_file;
  // And POSTed to this endpoint (Marquez-compatible: the base URL, events go
  // to <url>/api/v1/lineage). Empty = FLYWHEEL_OPENLINEAGE_URL, else none.
  std::string openlineage_url;
  // A file outside the database that each audit append updates with the
  // chain's newest "<seq> <hash>", so VerifyAudit can tell that events were
  // cut from the end. Empty = FLYWHEEL_AUDIT_ANCHOR, else <catalog
  // root>/audit.head for a directory catalog, else none; "-": none.
  std::string audit_anchor;
};

// A node of the lineage graph.
struct Node {
  enum class Kind { kDataset, kArtifact, kFile };
  Kind kind = Kind::kDataset;
  std::string name;      // dataset "ns/t", artifact path, file path
  int64_t version = -1;  // dataset version; -1 = any / not versioned
  std::string hash;      // artifacts: content hash ("xxh3:<hex>")

  // "ns/t@3", "ns/t", "artifact:/ckpt/model.pt", "file:/data/x.parquet".
  std::string ToString() const;
  // Parses ToString's forms. A bare path that is not "ns/t[@v]" is refused.
  static Result<Node> Parse(const std::string& text);
};

struct DatasetInfo {
  std::string name;       // "ns/t"
  std::string ns;         // "ns"
  std::string uri;        // the table's location
  int64_t created_ms = 0;
};

struct DatasetVersion {
  std::string dataset;
  int64_t version = 0;
  int64_t committed_ms = 0;
  std::string operation;  // append, overwrite, delete, ...
  int64_t num_rows = 0;
  std::string schema_json;  // [{"name":..,"type":..}, ...]
};

enum class RunState { kRunning, kComplete, kFail, kAbort };
const char* RunStateName(RunState s);

struct RunInfo {
  std::string id;          // a UUID (also the OpenLineage runId)
  std::string job;
  std::string job_type;    // ingest, export, compact, transform, train, rl, ...
  std::string principal;
  RunState state = RunState::kRunning;
  int64_t started_ms = 0;
  int64_t ended_ms = 0;    // 0 while running
  std::string params_json; // "{}" when none
  std::string error;
};

// One edge between a run and a node: the run consumed (input) or produced
// (output) it. `detail_json` carries what the edge is about, e.g. a
// loader's state (seed, epoch, positions consumed) for a training input or
// the samples behind a checkpoint.
struct Edge {
  std::string run_id;
  bool input = true;
  Node node;
  std::string detail_json = "{}";
};

// One step of a lineage walk: `run` consumed `inputs` and produced `outputs`.
struct LineageStep {
  RunInfo run;
  std::vector<Edge> inputs;
  std::vector<Edge> outputs;
  int depth = 0;  // 1 = adjacent to the start node
};

struct LineageGraph {
  Node start;
  std::vector<LineageStep> steps;  // breadth-first, each run once; within a depth by start time
};

// The samples that trained an artifact: per input table the loader state at
// the moment the artifact was logged (its epochs and positions say exactly
// which rows: docs/catalog.md, "Samples").
struct SampleSet {
  Node artifact;
  std::string run_id;
  std::vector<Edge> sources;  // input dataset edges with the loader state
};

// Privileges, each implying the ones before it.
enum class Privilege { kRead = 1, kWrite = 2, kAdmin = 3 };
const char* PrivilegeName(Privilege p);
Result<Privilege> ParsePrivilege(const std::string& text);  // READ, WRITE, ADMIN (any case)

struct GrantInfo {
  std::string principal;
  std::string object;  // "*" (the catalog), "ns", or "ns/t"
  Privilege privilege = Privilege::kRead;
  std::string granted_by;  // a principal, or "owner" for creators
  int64_t granted_ms = 0;
};

struct PrincipalInfo {
  std::string name;
  bool admin = false;
  std::vector<std::string> clearances;  // column tags this principal may read unmasked
};

// How one principal may read one dataset: columns carrying a tag the
// principal is not cleared for are masked or refused, per the dataset's
// policy (docs/catalog.md, "Column tags and masking").
struct ReadPolicy {
  enum class Mode { kHash, kNull, kRefuse };
  struct Column {
    std::string name;
    std::vector<std::string> tags;  // the uncleared tags
  };
  Mode mode = Mode::kHash;
  std::vector<Column> columns;  // empty: everything readable as is
  std::string salt;             // kHash: per-dataset salt
};
const char* MaskModeName(ReadPolicy::Mode m);
Result<ReadPolicy::Mode> ParseMaskMode(const std::string& text);  // hash, null, refuse

struct AuditEvent {
  int64_t seq = 0;  // 1, 2, ... without gaps
  int64_t time_ms = 0;
  std::string principal;
  std::string action;  // open, read, commit, grant, revoke, erase, ...
  std::string object;  // a dataset, namespace, "*" or a run id
  std::string detail_json = "{}";
  std::string prev_hash;  // hash of event seq-1 ("" for the first)
  std::string hash;       // hex SHA-256 over prev_hash and the fields above
};

struct AuditVerifyResult {
  int64_t events = 0;
  bool ok = true;
  int64_t first_bad_seq = 0;  // 0 when ok
  std::string problem;        // what is wrong there, in words
  std::string head_hash;      // hash of the last event (anchor it elsewhere)
  bool anchored = false;      // an anchor file was there and checked
};

// JSON forms (docs/catalog.md, "JSON"): {"start", "direction", "runs":
// [{run_id, job, job_type, state, principal, started_ms, ended_ms, depth,
// params, inputs, outputs}]} and {"artifact", "run_id", "sources": [{dataset,
// version, detail}]}.
std::string LineageJson(const LineageGraph& g, bool upstream);
std::string SampleSetJson(const SampleSet& s);

class Catalog {
 public:
  // `spec`: a directory (the catalog root: catalog.db inside, created if
  // absent), "sqlite:PATH" (a database file), or a PostgreSQL URI
  // ("postgresql://..." / "postgres://...") or "pg:<libpq conninfo>".
  // Applies pending schema migrations.
  static Result<std::unique_ptr<Catalog>> Open(const std::string& spec, CatalogOptions options = {});
  // The catalog FLYWHEEL_CATALOG names, or nullptr when it is unset.
  static Result<std::unique_ptr<Catalog>> FromEnvironment(CatalogOptions options = {});
  ~Catalog();

  const std::string& principal() const { return principal_; }
  const std::string& warehouse() const { return options_.warehouse; }
  std::string_view backend() const;
  Result<int> SchemaVersion();

  // ---- datasets -------------------------------------------------------
  // Names are "namespace/table"; each part 1-128 bytes of UTF-8 without
  // '/', '\\', control characters, and not "." or "..". Quotes, semicolons
  // and any other characters are fine (every value is bound).
  static Status ValidateDatasetName(const std::string& name);
  // Where the table of dataset `name` lives by default: <warehouse>/ns/t.
  Result<std::string> DefaultLocation(const std::string& name) const;
  // Registers `name` for the table at `uri` (its namespace too). Needs WRITE
  // on the namespace (on the catalog when the namespace is new); the
  // registrant gets ADMIN on the dataset (and on a namespace it opened).
  // Registering the same name and URI again is a no-op; another URI is
  // AlreadyExists.
  Result<DatasetInfo> RegisterDataset(const std::string& name, const std::string& uri);
  Result<DatasetInfo> GetDataset(const std::string& name);
  Result<std::vector<DatasetInfo>> ListDatasets(const std::string& ns = "");
  // The dataset registered for the table at `uri` (compared as absolute
  // paths); when there is none it registers one without a privilege check
  // (the caller reached the table's files already): tables under the
  // warehouse get their relative path as name, others "external/<last
  // path part>" (with a numeric suffix when taken). The principal gets ADMIN
  // on that dataset only, never on its namespace.
  Result<DatasetInfo> ResolveTable(const std::string& uri);
  // A table version as the catalog mirrors it (idempotent).
  Status RecordVersion(const DatasetVersion& v);
  Result<std::vector<DatasetVersion>> Versions(const std::string& dataset);

  // ---- runs and lineage ----------------------------------------------
  // Starts a run of `job` (created on first use) and emits its START event.
  Result<RunInfo> StartRun(const std::string& job, const std::string& job_type,
                           const std::string& params_json = "{}");
  Status AddEdge(const Edge& edge);
  // Marks the run finished and emits COMPLETE, FAIL or ABORT with every
  // input and output recorded for it.
  Status FinishRun(const std::string& run_id, RunState state, const std::string& error = "");
  Result<RunInfo> GetRun(const std::string& run_id);
  Result<std::vector<Edge>> RunEdges(const std::string& run_id);
  // "xxh3:<32 hex>": XXH3-128 of the file's bytes (how artifacts are named).
  static Result<std::string> HashFile(const std::string& path);
  // Hashes the file at `path` and records it as an output of the run;
  // `samples_json` (a JSON array of {dataset, version, state}) records the
  // training samples behind it. Returns the artifact node (with its hash).
  Result<Node> LogArtifact(const std::string& run_id, const std::string& path,
                           const std::string& samples_json = "[]");

  // Walks from `start` towards its sources (Upstream) or its consumers
  // (Downstream), at most `max_depth` runs deep. A dataset node without a
  // version matches every version.
  Result<LineageGraph> Upstream(const Node& start, int max_depth = 64);
  Result<LineageGraph> Downstream(const Node& start, int max_depth = 64);
  // The samples recorded behind an artifact, by path (the newest logging of
  // that path) or with its hash.
  Result<SampleSet> Samples(const Node& artifact);

  // ---- governance (governance.cc) -------------------------------------
  // Access checks: a principal has privilege P on dataset "ns/t" when it is
  // a catalog admin or holds P or higher on "ns/t", "ns" or "*".
  Result<bool> HasPrivilege(const std::string& principal, const std::string& object, Privilege p);
  // Checks principal() for `p` on `object` and writes an audit event
  // `action` either way (denials with "denied": true). PermissionDenied names
  // the principal, the object and the missing privilege.
  Status Authorize(const std::string& object, Privilege p, const std::string& action,
                   const std::string& detail_json = "{}");
  // Grant/revoke need ADMIN on the object (or above); both are audited.
  Status Grant(const std::string& principal, const std::string& object, Privilege p);
  Status Revoke(const std::string& principal, const std::string& object, Privilege p);
  Result<std::vector<GrantInfo>> Grants(const std::string& object = "");
  // Catalog admins only.
  Status SetAdmin(const std::string& principal, bool admin);
  Status SetClearances(const std::string& principal, const std::vector<std::string>& tags);
  Result<PrincipalInfo> GetPrincipal(const std::string& name);
  // Column tags and the dataset's mask policy; ADMIN on the dataset.
  Status TagColumn(const std::string& dataset, const std::string& column, const std::string& tag);
  Status UntagColumn(const std::string& dataset, const std::string& column, const std::string& tag);
  Result<std::map<std::string, std::vector<std::string>>> ColumnTags(const std::string& dataset);
  Status SetMaskPolicy(const std::string& dataset, ReadPolicy::Mode mode);
  // What principal() may see of `dataset`.
  Result<ReadPolicy> ReadPolicyFor(const std::string& dataset);
  // Retention: keep the newest `keep_versions` versions and every version
  // younger than `keep_days` (0 = no such rule; tagged versions are always
  // kept). Both 0 removes the policy. ADMIN on the dataset. Applied by
  // ApplyRetention (recorder.h).
  Status SetRetention(const std::string& dataset, int64_t keep_versions, int64_t keep_days);
  // {keep_versions, keep_days} of every dataset with a policy.
  Result<std::map<std::string, std::pair<int64_t, int64_t>>> RetentionPolicies();

  // ---- audit (audit.cc) ------------------------------------------------
  // Appends an event for principal() to the hash chain.
  Status Audit(const std::string& action, const std::string& object, const std::string& detail_json = "{}");
  // Events after `after_seq`. Needs ADMIN on the catalog ('*'): events name
  // keys (an erased user's email, a predicate's value), so no one else reads
  // them; a refusal is itself audited.
  Result<std::vector<AuditEvent>> AuditEvents(int64_t after_seq = 0, int64_t limit = 1000);
  // Recomputes the chain: any edited, removed, inserted or reordered event
  // is reported with its sequence number.
  Result<AuditVerifyResult> VerifyAudit();

  // For tests and tools: the underlying connection (serialise with the
  // catalog's own calls yourself).
  SqlDb* db() ABSL_NO_THREAD_SAFETY_ANALYSIS { return db_.get(); }

 private:
  // AuditEvents without the privilege check (VerifyAudit walks the chain).
  Result<std::vector<AuditEvent>> ReadAuditEvents(int64_t after_seq, int64_t limit);
  Catalog() = default;
  Status Migrate();
  Result<DatasetInfo> Register(const std::string& name, const std::string& uri, bool own_namespace);
  Status Emit(const RunInfo& run, const char* event_type, const std::vector<Edge>& edges);
  Result<LineageGraph> Walk(const Node& start, bool upstream, int max_depth);

  // Serialises the catalog's calls on its one connection.
  mutable absl::Mutex mu_;
  std::unique_ptr<SqlDb> db_ ABSL_GUARDED_BY(mu_);
  CatalogOptions options_;
  std::string root_;  // directory catalogs
  std::string principal_;
  std::vector<std::unique_ptr<EventSink>> sinks_;
};

// The acting identity: FLYWHEEL_USER, else the first line of the file
// FLYWHEEL_TOKEN_FILE names ("user" or "user:secret"), else the OS user.
Result<std::string> PrincipalFromEnvironment();

}  // namespace flywheel::catalog
