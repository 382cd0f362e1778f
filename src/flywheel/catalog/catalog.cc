#include "flywheel/catalog/catalog.h"

#include <pwd.h>
#include <unistd.h>
#include <xxhash.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "flywheel/base/logging.h"
#include "flywheel/catalog/internal/common.h"
#include "flywheel/catalog/openlineage.h"
#include "flywheel/catalog/sql.h"

namespace flywheel::catalog {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using internal_catalog::NowMs;

std::string NewUuid() {
  // Reseeded in a forked child: it would otherwise repeat its parent's ids.
  static thread_local pid_t seeded_for = -1;
  static thread_local std::mt19937_64 rng;
  if (seeded_for != ::getpid()) {
    seeded_for = ::getpid();
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), static_cast<unsigned>(seeded_for),
                      static_cast<unsigned>(NowMs())};
    rng.seed(seq);
  }
  uint64_t hi = rng(), lo = rng();
  hi = (hi & ~0xF000ull) | 0x4000ull;                    // version 4
  lo = (lo & 0x3FFFFFFFFFFFFFFFull) | 0x8000000000000000ull;  // variant 10
  char buf[37];
  std::snprintf(buf, sizeof(buf), "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xFFFF), static_cast<unsigned>(hi & 0xFFFF),
                static_cast<unsigned>(lo >> 48), static_cast<unsigned long long>(lo & 0xFFFFFFFFFFFFull));
  return buf;
}

const char* KindName(Node::Kind k) {
  switch (k) {
    case Node::Kind::kDataset: return "dataset";
    case Node::Kind::kArtifact: return "artifact";
    case Node::Kind::kFile: return "file";
  }
  return "dataset";
}

Result<Node::Kind> KindFromName(const std::string& s) {
  if (s == "dataset") return Node::Kind::kDataset;
  if (s == "artifact") return Node::Kind::kArtifact;
  if (s == "file") return Node::Kind::kFile;
  return absl::DataLossError(absl::StrCat("catalog: unknown node kind '", s, "'"));
}

Result<RunState> StateFromName(const std::string& s) {
  for (RunState st : {RunState::kRunning, RunState::kComplete, RunState::kFail, RunState::kAbort})
    if (s == RunStateName(st)) return st;
  return absl::DataLossError(absl::StrCat("catalog: unknown run state '", s, "'"));
}

std::string AbsolutePath(const std::string& p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec) return p;
  fs::path canon = fs::weakly_canonical(abs, ec);
  std::string out = (ec ? abs.lexically_normal() : canon).string();
  // "/a/b/" and "/a/b" are one path (normalising "/a/b/c/.." keeps a slash).
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// The versioned schema. Each entry is applied once, in order, in one
// exclusive transaction that also records it in schema_migrations. {{ID}} is
// each dialect's auto-increment primary key. Never edit an applied entry:
// append a new one (docs/catalog.md, "Schema").
const char* const kMigrations[] = {
    // 1: datasets, versions, jobs, runs, artifacts, lineage edges.
    R"sql(
CREATE TABLE namespaces (name TEXT PRIMARY KEY, created_ms BIGINT NOT NULL);
CREATE TABLE datasets (
  name TEXT PRIMARY KEY, namespace TEXT NOT NULL REFERENCES namespaces(name),
  uri TEXT NOT NULL UNIQUE, created_ms BIGINT NOT NULL);
CREATE TABLE dataset_versions (
  dataset TEXT NOT NULL REFERENCES datasets(name), version BIGINT NOT NULL,
  committed_ms BIGINT NOT NULL, operation TEXT NOT NULL, num_rows BIGINT NOT NULL,
  schema_json TEXT NOT NULL, PRIMARY KEY (dataset, version));
CREATE TABLE jobs (name TEXT PRIMARY KEY, job_type TEXT NOT NULL, created_ms BIGINT NOT NULL);
CREATE TABLE runs (
  id TEXT PRIMARY KEY, job TEXT NOT NULL REFERENCES jobs(name), job_type TEXT NOT NULL,
  principal TEXT NOT NULL, state TEXT NOT NULL, started_ms BIGINT NOT NULL,
  ended_ms BIGINT NOT NULL DEFAULT 0, params TEXT NOT NULL, error TEXT NOT NULL DEFAULT '');
CREATE INDEX runs_by_job ON runs(job, started_ms);
CREATE TABLE artifacts (
  path TEXT NOT NULL, hash TEXT NOT NULL, size_bytes BIGINT NOT NULL,
  created_ms BIGINT NOT NULL, run_id TEXT NOT NULL REFERENCES runs(id), PRIMARY KEY (path, hash));
CREATE TABLE edges (
  id {{ID}}, run_id TEXT NOT NULL REFERENCES runs(id), direction TEXT NOT NULL,
  kind TEXT NOT NULL, node TEXT NOT NULL, version BIGINT NOT NULL, hash TEXT NOT NULL,
  detail TEXT NOT NULL);
CREATE INDEX edges_by_node ON edges(kind, node, direction, version);
CREATE INDEX edges_by_run ON edges(run_id);
)sql",
    // 2: governance: principals, grants, column tags, policies, the audit chain.
    R"sql(
CREATE TABLE principals (
  name TEXT PRIMARY KEY, is_admin INTEGER NOT NULL DEFAULT 0, clearances TEXT NOT NULL DEFAULT '',
  created_ms BIGINT NOT NULL);
CREATE TABLE grants (
  principal TEXT NOT NULL, object TEXT NOT NULL, privilege TEXT NOT NULL, granted_by TEXT NOT NULL,
  granted_ms BIGINT NOT NULL, PRIMARY KEY (principal, object, privilege));
CREATE INDEX grants_by_object ON grants(object);
CREATE TABLE column_tags (
  dataset TEXT NOT NULL, column_name TEXT NOT NULL, tag TEXT NOT NULL, PRIMARY KEY (dataset, column_name, tag));
CREATE TABLE policies (
  dataset TEXT PRIMARY KEY, mask TEXT NOT NULL, salt TEXT NOT NULL,
  keep_versions BIGINT NOT NULL DEFAULT 0, keep_days BIGINT NOT NULL DEFAULT 0);
CREATE TABLE audit (
  seq BIGINT PRIMARY KEY, time_ms BIGINT NOT NULL, principal TEXT NOT NULL, action TEXT NOT NULL,
  object TEXT NOT NULL, detail TEXT NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL);
)sql",
};

std::string DialectSql(std::string_view dialect, const char* sql) {
  return absl::StrReplaceAll(sql, {{"{{ID}}", dialect == "sqlite" ? "INTEGER PRIMARY KEY"
                                                                  : "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"}});
}

Result<RunInfo> RunFromRow(const SqlRow& r) {
  RunInfo run;
  run.id = r.Text(0);
  run.job = r.Text(1);
  run.job_type = r.Text(2);
  run.principal = r.Text(3);
  FW_ASSIGN_OR_RETURN(run.state, StateFromName(r.Text(4)));
  run.started_ms = r.Int(5);
  run.ended_ms = r.Int(6);
  run.params_json = r.Text(7);
  run.error = r.Text(8);
  return run;
}
constexpr const char* kRunColumns = "id, job, job_type, principal, state, started_ms, ended_ms, params, error";

Result<Edge> EdgeFromRow(const SqlRow& r) {
  // run_id, direction, kind, node, version, hash, detail
  Edge e;
  e.run_id = r.Text(0);
  e.input = r.Text(1) == "in";
  FW_ASSIGN_OR_RETURN(e.node.kind, KindFromName(r.Text(2)));
  e.node.name = r.Text(3);
  e.node.version = r.Int(4);
  e.node.hash = r.Text(5);
  e.detail_json = r.Text(6);
  return e;
}
constexpr const char* kEdgeColumns = "run_id, direction, kind, node, version, hash, detail";

Status ValidateNamePart(std::string_view part, std::string_view what, const std::string& name) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("dataset name '", name, "': the ", AsAbsl(what), " ",
                                                   AsAbsl(why)));
  };
  if (part.empty()) return bad("is empty");
  if (part.size() > 128) return bad("is longer than 128 bytes");
  if (part == "." || part == "..") return bad("may not be '.' or '..'");
  if (part == "*") return bad("may not be '*' (it names the whole catalog in grants)");
  for (unsigned char c : part) {
    if (c < 0x20 || c == 0x7f) return bad("contains a control character");
    if (c == '\\') return bad("contains '\\'");
  }
  return absl::OkStatus();
}

json NodeJson(const Node& n) {
  json j = {{"kind", n.kind == Node::Kind::kDataset ? "dataset" : n.kind == Node::Kind::kArtifact ? "artifact" : "file"},
            {"name", n.name},
            {"id", n.ToString()}};
  if (n.version >= 0) j["version"] = n.version;
  if (!n.hash.empty()) j["hash"] = n.hash;
  return j;
}

json EdgeJson(const Edge& e) {
  json j = NodeJson(e.node);
  json d = json::parse(e.detail_json, nullptr, false);
  if (d.is_object() && !d.empty()) j["detail"] = d;
  return j;
}

json GraphJson(const LineageGraph& g, bool up) {
  json runs = json::array();
  for (const auto& s : g.steps) {
    json r = {{"run_id", s.run.id},           {"job", s.run.job},
              {"job_type", s.run.job_type},   {"state", RunStateName(s.run.state)},
              {"principal", s.run.principal}, {"started_ms", s.run.started_ms},
              {"ended_ms", s.run.ended_ms},   {"depth", s.depth}, {"error", s.run.error},
              {"params", json::parse(s.run.params_json, nullptr, false)}};
    r["inputs"] = json::array();
    r["outputs"] = json::array();
    for (const auto& e : s.inputs) r["inputs"].push_back(EdgeJson(e));
    for (const auto& e : s.outputs) r["outputs"].push_back(EdgeJson(e));
    runs.push_back(r);
  }
  return {{"start", NodeJson(g.start)}, {"direction", up ? "up" : "down"}, {"runs", runs}};
}

}  // namespace

std::string LineageJson(const LineageGraph& g, bool upstream) { return GraphJson(g, upstream).dump(); }

std::string SampleSetJson(const SampleSet& s) {
  json sources = json::array();
  for (const auto& e : s.sources) {
    sources.push_back({{"dataset", e.node.name}, {"version", e.node.version},
                       {"detail", json::parse(e.detail_json, nullptr, false)}});
  }
  return json{{"artifact", NodeJson(s.artifact)}, {"run_id", s.run_id}, {"sources", sources}}.dump();
}

const char* RunStateName(RunState s) {
  switch (s) {
    case RunState::kRunning: return "RUNNING";
    case RunState::kComplete: return "COMPLETE";
    case RunState::kFail: return "FAIL";
    case RunState::kAbort: return "ABORT";
  }
  return "RUNNING";
}

std::string Node::ToString() const {
  switch (kind) {
    case Kind::kDataset: return version >= 0 ? absl::StrCat(name, "@", version) : name;
    case Kind::kArtifact: return absl::StrCat("artifact:", name);
    case Kind::kFile: return absl::StrCat("file:", name);
  }
  return name;
}

Result<Node> Node::Parse(const std::string& text) {
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("a lineage node name may not contain control characters");
    }
  }
  Node n;
  if (absl::StartsWith(text, "artifact:")) {
    n.kind = Kind::kArtifact;
    n.name = AbsolutePath(text.substr(9));
    return n;
  }
  if (absl::StartsWith(text, "file:")) {
    n.kind = Kind::kFile;
    n.name = AbsolutePath(text.substr(5));
    return n;
  }
  n.kind = Kind::kDataset;
  n.name = text;
  if (size_t at = text.rfind('@'); at != std::string::npos) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(text.substr(at + 1), &v) || v < 0)
      return absl::InvalidArgumentError(absl::StrCat("'", text, "': the version after '@' must be a number >= 0"));
    n.name = text.substr(0, at);
    n.version = v;
  }
  FW_RETURN_IF_ERROR(Catalog::ValidateDatasetName(n.name));
  return n;
}

Result<std::string> PrincipalFromEnvironment() {
  if (const char* u = std::getenv("FLYWHEEL_USER"); u != nullptr && *u != '\0') return std::string(u);
  if (const char* path = std::getenv("FLYWHEEL_TOKEN_FILE"); path != nullptr && *path != '\0') {
    std::ifstream in(path);
    if (!in) return absl::PermissionDeniedError(absl::StrCat("FLYWHEEL_TOKEN_FILE: cannot read ", path));
    std::string line;
    std::getline(in, line);
    std::string user = line.substr(0, line.find(':'));
    while (!user.empty() && (user.back() == '\r' || user.back() == ' ')) user.pop_back();
    if (user.empty()) return absl::PermissionDeniedError(absl::StrCat("FLYWHEEL_TOKEN_FILE ", path, ": no user name"));
    return user;
  }
  if (passwd* pw = ::getpwuid(::geteuid()); pw != nullptr) return std::string(pw->pw_name);
  return absl::StrCat("uid:", ::geteuid());
}

Result<std::unique_ptr<Catalog>> Catalog::Open(const std::string& spec, CatalogOptions options) {
  if (spec.empty()) return absl::InvalidArgumentError("catalog: empty location");
  std::unique_ptr<Catalog> c(new Catalog());
  std::unique_ptr<SqlDb> db;
  if (absl::StartsWith(spec, "postgresql://") || absl::StartsWith(spec, "postgres://")) {
    FW_ASSIGN_OR_RETURN_CTX(db, OpenPostgres(spec), "opening catalog");
  } else if (absl::StartsWith(spec, "pg:")) {
    FW_ASSIGN_OR_RETURN_CTX(db, OpenPostgres(spec.substr(3)), "opening catalog");
  } else if (absl::StartsWith(spec, "sqlite:")) {
    FW_ASSIGN_OR_RETURN_CTX(db, OpenSqlite(spec.substr(7)), "opening catalog");
  } else {
    c->root_ = AbsolutePath(spec);
    std::error_code ec;
    fs::create_directories(c->root_, ec);
    if (ec) return absl::PermissionDeniedError(absl::StrCat("creating catalog root ", c->root_, ": ", ec.message()));
    FW_ASSIGN_OR_RETURN_CTX(db, OpenSqlite((fs::path(c->root_) / "catalog.db").string()), "opening catalog");
    if (options.warehouse.empty()) options.warehouse = c->root_;
  }
  {
    absl::MutexLock lock(&c->mu_);
    c->db_ = std::move(db);
  }
  if (options.warehouse.empty())
    if (const char* w = std::getenv("FLYWHEEL_WAREHOUSE"); w != nullptr) options.warehouse = w;
  if (!options.warehouse.empty()) options.warehouse = AbsolutePath(options.warehouse);
  // The events file: the option, else FLYWHEEL_OPENLINEAGE_FILE, else the
  // directory catalog's own.
  if (options.openlineage_file.empty())
    if (const char* f = std::getenv("FLYWHEEL_OPENLINEAGE_FILE"); f != nullptr) options.openlineage_file = f;
  if (options.openlineage_file.empty() && !c->root_.empty())
    options.openlineage_file = (fs::path(c->root_) / "openlineage.jsonl").string();
  if (options.audit_anchor.empty())
    if (const char* a = std::getenv("FLYWHEEL_AUDIT_ANCHOR"); a != nullptr) options.audit_anchor = a;
  if (options.audit_anchor.empty() && !c->root_.empty())
    options.audit_anchor = (fs::path(c->root_) / "audit.head").string();
  if (options.audit_anchor == "-") options.audit_anchor.clear();
  if (options.openlineage_url.empty())
    if (const char* u = std::getenv("FLYWHEEL_OPENLINEAGE_URL"); u != nullptr) options.openlineage_url = u;
  // "-" turns the file sink off (a directory catalog has one by default).
  if (!options.openlineage_file.empty() && options.openlineage_file != "-")
    c->sinks_.push_back(MakeFileSink(options.openlineage_file));
  if (!options.openlineage_url.empty()) c->sinks_.push_back(MakeHttpSink(options.openlineage_url));
  if (options.principal.empty()) {
    FW_ASSIGN_OR_RETURN(options.principal, PrincipalFromEnvironment());
  }
  c->principal_ = options.principal;
  c->options_ = std::move(options);
  FW_RETURN_IF_ERROR_CTX(c->Migrate(), "catalog ", spec, ": applying schema migrations");
  return c;
}

Result<std::unique_ptr<Catalog>> Catalog::FromEnvironment(CatalogOptions options) {
  const char* spec = std::getenv("FLYWHEEL_CATALOG");
  if (spec == nullptr || *spec == '\0') return std::unique_ptr<Catalog>();
  return Open(spec, std::move(options));
}

Catalog::~Catalog() = default;

std::string_view Catalog::backend() const {
  absl::MutexLock lock(&mu_);
  return db_->dialect();
}

Status Catalog::Migrate() {
  absl::MutexLock lock(&mu_);
  constexpr int kLatest = static_cast<int>(std::size(kMigrations));
  return db_->InTransaction(TxnMode::kExclusive, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
    FW_RETURN_IF_ERROR(db_->ExecScript(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_ms BIGINT NOT NULL)"));
    FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query("SELECT coalesce(max(version), 0) FROM schema_migrations"));
    int current = static_cast<int>(rows.at(0).Int(0));
    if (current > kLatest) {
      return absl::FailedPreconditionError(absl::StrCat("the catalog's schema is version ", current,
                                                        "; this flywheel knows versions up to ", kLatest,
                                                        " (upgrade flywheel)"));
    }
    for (int v = current + 1; v <= kLatest; ++v) {
      FW_RETURN_IF_ERROR_CTX(db_->ExecScript(DialectSql(db_->dialect(), kMigrations[v - 1])), "migration ", v);
      FW_RETURN_IF_ERROR(db_->Exec("INSERT INTO schema_migrations (version, applied_ms) VALUES (?, ?)",
                                   {int64_t{v}, NowMs()}));
      if (v == 2) {
        // Whoever creates (or upgrades) the catalog administers it.
        FW_RETURN_IF_ERROR(db_->Exec(
            "INSERT INTO principals (name, is_admin, clearances, created_ms) VALUES (?, 1, '', ?)",
            {principal_, NowMs()}));
      }
    }
    return absl::OkStatus();
  });
}

Result<int> Catalog::SchemaVersion() {
  absl::MutexLock lock(&mu_);
  FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query("SELECT coalesce(max(version), 0) FROM schema_migrations"));
  return static_cast<int>(rows.at(0).Int(0));
}

// ---- datasets -------------------------------------------------------------

Status Catalog::ValidateDatasetName(const std::string& name) {
  size_t slash = name.find('/');
  if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset name '", name, "': expected \"namespace/table\" (exactly one '/')"));
  }
  FW_RETURN_IF_ERROR(ValidateNamePart(std::string_view(name).substr(0, slash), "namespace", name));
  return ValidateNamePart(std::string_view(name).substr(slash + 1), "table name", name);
}

Result<std::string> Catalog::DefaultLocation(const std::string& name) const {
  FW_RETURN_IF_ERROR(ValidateDatasetName(name));
  if (options_.warehouse.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset '", name, "': this catalog has no warehouse directory to create tables in "
                                         "(set FLYWHEEL_WAREHOUSE or register the table by path)"));
  }
  return (fs::path(options_.warehouse) / name).string();
}

Result<DatasetInfo> Catalog::RegisterDataset(const std::string& name, const std::string& uri) {
  FW_RETURN_IF_ERROR(ValidateDatasetName(name));
  const std::string ns = name.substr(0, name.find('/'));
  bool ns_exists = false;
  {
    absl::MutexLock lock(&mu_);
    FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query("SELECT name FROM namespaces WHERE name = ?", {ns}));
    ns_exists = !rows.empty();
  }
  // Naming a table in a namespace takes WRITE on it; opening a namespace
  // takes WRITE on the catalog. The registrant then owns what it made.
  FW_RETURN_IF_ERROR(Authorize(ns_exists ? ns : "*", Privilege::kWrite, "register",
                               json{{"dataset", name}, {"uri", AbsolutePath(uri)}}.dump()));
  return Register(name, uri, /*own_namespace=*/true);
}

Result<DatasetInfo> Catalog::Register(const std::string& name, const std::string& uri, bool own_namespace) {
  FW_RETURN_IF_ERROR(ValidateDatasetName(name));
  const std::string abs = AbsolutePath(uri);
  const std::string ns = name.substr(0, name.find('/'));
  absl::MutexLock lock(&mu_);
  DatasetInfo info;
  FW_RETURN_IF_ERROR(db_->InTransaction(TxnMode::kWrite, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
    FW_ASSIGN_OR_RETURN(SqlRows have, db_->Query("SELECT uri, created_ms FROM datasets WHERE name = ?", {name}));
    if (!have.empty()) {
      if (have[0].Text(0) != abs) {
        return absl::AlreadyExistsError(absl::StrCat("dataset '", name, "' is registered for ", have[0].Text(0),
                                                     ", not ", abs));
      }
      info = DatasetInfo{name, ns, abs, have[0].Int(1)};
      return absl::OkStatus();
    }
    FW_ASSIGN_OR_RETURN(SqlRows taken, db_->Query("SELECT name FROM datasets WHERE uri = ?", {abs}));
    if (!taken.empty()) {
      return absl::AlreadyExistsError(
          absl::StrCat("the table at ", abs, " is registered as dataset '", taken[0].Text(0), "'"));
    }
    const int64_t now = NowMs();
    FW_ASSIGN_OR_RETURN(SqlRows new_ns,
                        db_->Query("INSERT INTO namespaces (name, created_ms) VALUES (?, ?) ON CONFLICT DO NOTHING "
                                   "RETURNING name",
                                   {ns, now}));
    FW_RETURN_IF_ERROR(db_->Exec("INSERT INTO datasets (name, namespace, uri, created_ms) VALUES (?, ?, ?, ?)",
                                 {name, ns, abs, now}));
    // The principal who brings a dataset (and a new namespace) into the
    // catalog owns it: ADMIN on it (docs/catalog.md, "Grants").
    const char* kOwner =
        "INSERT INTO grants (principal, object, privilege, granted_by, granted_ms) VALUES (?, ?, 'ADMIN', ?, ?) "
        "ON CONFLICT DO NOTHING";
    FW_RETURN_IF_ERROR(db_->Exec(kOwner, {principal_, name, std::string("owner"), now}));
    if (own_namespace && !new_ns.empty()) {
      FW_RETURN_IF_ERROR(db_->Exec(kOwner, {principal_, ns, std::string("owner"), now}));
    }
    info = DatasetInfo{name, ns, abs, now};
    return absl::OkStatus();
  }));
  return info;
}

Result<DatasetInfo> Catalog::GetDataset(const std::string& name) {
  FW_RETURN_IF_ERROR(ValidateDatasetName(name));
  absl::MutexLock lock(&mu_);
  FW_ASSIGN_OR_RETURN(SqlRows rows,
                      db_->Query("SELECT name, namespace, uri, created_ms FROM datasets WHERE name = ?", {name}));
  if (rows.empty()) return absl::NotFoundError(absl::StrCat("dataset '", name, "' is not in the catalog"));
  return DatasetInfo{rows[0].Text(0), rows[0].Text(1), rows[0].Text(2), rows[0].Int(3)};
}

Result<std::vector<DatasetInfo>> Catalog::ListDatasets(const std::string& ns) {
  absl::MutexLock lock(&mu_);
  SqlRows rows;
  if (ns.empty()) {
    FW_ASSIGN_OR_RETURN(rows, db_->Query("SELECT name, namespace, uri, created_ms FROM datasets ORDER BY name"));
  } else {
    FW_ASSIGN_OR_RETURN(rows, db_->Query("SELECT name, namespace, uri, created_ms FROM datasets WHERE namespace = ? "
                                         "ORDER BY name",
                                         {ns}));
  }
  std::vector<DatasetInfo> out;
  for (const auto& r : rows) out.push_back({r.Text(0), r.Text(1), r.Text(2), r.Int(3)});
  return out;
}

Result<DatasetInfo> Catalog::ResolveTable(const std::string& uri) {
  const std::string abs = AbsolutePath(uri);
  {
    absl::MutexLock lock(&mu_);
    FW_ASSIGN_OR_RETURN(SqlRows rows,
                        db_->Query("SELECT name, namespace, uri, created_ms FROM datasets WHERE uri = ?", {abs}));
    if (!rows.empty()) return DatasetInfo{rows[0].Text(0), rows[0].Text(1), rows[0].Text(2), rows[0].Int(3)};
  }
  if (!options_.warehouse.empty()) {
    fs::path rel = fs::path(abs).lexically_relative(options_.warehouse);
    std::string r = rel.generic_string();
    if (!rel.empty() && !absl::StartsWith(r, "..") && ValidateDatasetName(r).ok()) {
      auto got = Register(r, abs, /*own_namespace=*/false);
      if (got.ok()) FW_RETURN_IF_ERROR(Audit("register_first_sight", got->name, json{{"uri", abs}}.dump()));
      if (got.ok() || !absl::IsAlreadyExists(got.status())) return got;
    }
  }
  std::string base = fs::path(abs).filename().string();
  if (base.empty() || !ValidateNamePart(base, "table name", base).ok()) base = "table";
  for (int i = 0; i < 1000; ++i) {
    std::string name = i == 0 ? absl::StrCat("external/", base) : absl::StrCat("external/", base, "-", i + 1);
    auto got = Register(name, abs, /*own_namespace=*/false);
    if (got.ok()) {
      FW_RETURN_IF_ERROR(Audit("register_first_sight", got->name, json{{"uri", abs}}.dump()));
      return got;
    }
    if (!absl::IsAlreadyExists(got.status())) return got.status();
    // Another process may have registered this very table meanwhile.
    absl::MutexLock lock(&mu_);
    FW_ASSIGN_OR_RETURN(SqlRows rows,
                        db_->Query("SELECT name, namespace, uri, created_ms FROM datasets WHERE uri = ?", {abs}));
    if (!rows.empty()) return DatasetInfo{rows[0].Text(0), rows[0].Text(1), rows[0].Text(2), rows[0].Int(3)};
  }
  return absl::ResourceExhaustedError(absl::StrCat("no free dataset name for ", abs));
}

Status Catalog::RecordVersion(const DatasetVersion& v) {
  absl::MutexLock lock(&mu_);
  return db_->Exec(
      "INSERT INTO dataset_versions (dataset, version, committed_ms, operation, num_rows, schema_json) "
      "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
      {v.dataset, v.version, v.committed_ms, v.operation, v.num_rows, v.schema_json.empty() ? "[]" : v.schema_json});
}

Result<std::vector<DatasetVersion>> Catalog::Versions(const std::string& dataset) {
  absl::MutexLock lock(&mu_);
  FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query("SELECT dataset, version, committed_ms, operation, num_rows, "
                                               "schema_json FROM dataset_versions WHERE dataset = ? ORDER BY version",
                                               {dataset}));
  std::vector<DatasetVersion> out;
  for (const auto& r : rows) out.push_back({r.Text(0), r.Int(1), r.Int(2), r.Text(3), r.Int(4), r.Text(5)});
  return out;
}

// ---- runs -----------------------------------------------------------------

Result<RunInfo> Catalog::StartRun(const std::string& job, const std::string& job_type,
                                  const std::string& params_json) {
  if (job.empty()) return absl::InvalidArgumentError("run: the job name is empty");
  if (job_type.empty()) return absl::InvalidArgumentError("run: the job type is empty");
  json params = json::parse(params_json.empty() ? "{}" : params_json, nullptr, false);
  if (!params.is_object()) return absl::InvalidArgumentError("run: params must be a JSON object");
  RunInfo run;
  run.id = NewUuid();
  run.job = job;
  run.job_type = job_type;
  run.principal = principal_;
  run.started_ms = NowMs();
  run.params_json = params.dump();
  {
    absl::MutexLock lock(&mu_);
    FW_RETURN_IF_ERROR_CTX(db_->InTransaction(TxnMode::kWrite, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
      FW_RETURN_IF_ERROR(db_->Exec("INSERT INTO jobs (name, job_type, created_ms) VALUES (?, ?, ?) "
                                   "ON CONFLICT DO NOTHING",
                                   {job, job_type, run.started_ms}));
      return db_->Exec(absl::StrCat("INSERT INTO runs (", kRunColumns, ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                       {run.id, job, job_type, principal_, RunStateName(run.state), run.started_ms, int64_t{0},
                        run.params_json, std::string()});
    }),
                           "starting a run of job '", job, "'");
  }
  FW_RETURN_IF_ERROR(Emit(run, "START", {}));
  return run;
}

Status Catalog::AddEdge(const Edge& e) {
  if (e.node.kind == Node::Kind::kDataset) FW_RETURN_IF_ERROR(ValidateDatasetName(e.node.name));
  if (e.node.name.empty()) return absl::InvalidArgumentError("lineage edge: the node has no name");
  json detail = json::parse(e.detail_json.empty() ? "{}" : e.detail_json, nullptr, false);
  if (detail.is_discarded()) return absl::InvalidArgumentError("lineage edge: detail is not JSON");
  absl::MutexLock lock(&mu_);
  FW_ASSIGN_OR_RETURN(SqlRows run, db_->Query("SELECT state FROM runs WHERE id = ?", {e.run_id}));
  if (run.empty()) return absl::NotFoundError(absl::StrCat("run ", e.run_id, " is not in the catalog"));
  // A finished run's events are out; an edge added now would be in the
  // catalog but in none of them.
  if (run[0].Text(0) != RunStateName(RunState::kRunning)) {
    return absl::FailedPreconditionError(
        absl::StrCat("run ", e.run_id, " has finished (", run[0].Text(0), "); record edges before finishing it"));
  }
  return db_->Exec(
      "INSERT INTO edges (run_id, direction, kind, node, version, hash, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
      {e.run_id, e.input ? "in" : "out", KindName(e.node.kind), e.node.name, e.node.version, e.node.hash,
       detail.dump()});
}

Result<RunInfo> Catalog::GetRun(const std::string& run_id) {
  absl::MutexLock lock(&mu_);
  FW_ASSIGN_OR_RETURN(SqlRows rows,
                      db_->Query(absl::StrCat("SELECT ", kRunColumns, " FROM runs WHERE id = ?"), {run_id}));
  if (rows.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " is not in the catalog"));
  return RunFromRow(rows[0]);
}

Result<std::vector<Edge>> Catalog::RunEdges(const std::string& run_id) {
  absl::MutexLock lock(&mu_);
  FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query(absl::StrCat("SELECT ", kEdgeColumns,
                                                            " FROM edges WHERE run_id = ? ORDER BY id"),
                                               {run_id}));
  std::vector<Edge> out;
  for (const auto& r : rows) {
    FW_ASSIGN_OR_RETURN(Edge e, EdgeFromRow(r));
    out.push_back(std::move(e));
  }
  return out;
}

Status Catalog::FinishRun(const std::string& run_id, RunState state, const std::string& error) {
  if (state == RunState::kRunning) return absl::InvalidArgumentError("FinishRun: the final state cannot be RUNNING");
  {
    absl::MutexLock lock(&mu_);
    FW_RETURN_IF_ERROR(db_->InTransaction(TxnMode::kWrite, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
      FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query("SELECT state FROM runs WHERE id = ?", {run_id}));
      if (rows.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " is not in the catalog"));
      if (rows[0].Text(0) != RunStateName(RunState::kRunning)) {
        return absl::FailedPreconditionError(
            absl::StrCat("run ", run_id, " has already finished (", rows[0].Text(0), ")"));
      }
      return db_->Exec("UPDATE runs SET state = ?, ended_ms = ?, error = ? WHERE id = ?",
                       {RunStateName(state), NowMs(), error, run_id});
    }));
  }
  if (sinks_.empty()) return absl::OkStatus();
  FW_ASSIGN_OR_RETURN(RunInfo run, GetRun(run_id));
  FW_ASSIGN_OR_RETURN(std::vector<Edge> edges, RunEdges(run_id));
  return Emit(run, RunStateName(state), edges);
}

Result<std::string> Catalog::HashFile(const std::string& path) {
  const std::string abs = AbsolutePath(path);
  std::FILE* f = std::fopen(abs.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("artifact ", abs, ": cannot open: ", std::strerror(errno)));
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) XXH3_128bits_update(st, buf.data(), n);
  const bool read_error = std::ferror(f) != 0;
  std::fclose(f);
  XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  if (read_error) return absl::DataLossError(absl::StrCat("artifact ", abs, ": read error"));
  char hex[40];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return absl::StrCat("xxh3:", hex);
}

Result<Node> Catalog::LogArtifact(const std::string& run_id, const std::string& path,
                                  const std::string& samples_json) {
  json samples = json::parse(samples_json.empty() ? "[]" : samples_json, nullptr, false);
  if (!samples.is_array()) return absl::InvalidArgumentError("LogArtifact: samples must be a JSON array");
  const std::string abs = AbsolutePath(path);
  FW_ASSIGN_OR_RETURN(std::string hash, HashFile(abs));
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(abs, ec);
  Node node{Node::Kind::kArtifact, abs, -1, hash};
  {
    absl::MutexLock lock(&mu_);
    FW_RETURN_IF_ERROR(db_->InTransaction(TxnMode::kWrite, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
      FW_ASSIGN_OR_RETURN(SqlRows run, db_->Query("SELECT state FROM runs WHERE id = ?", {run_id}));
      if (run.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " is not in the catalog"));
      if (run[0].Text(0) != RunStateName(RunState::kRunning)) {
        return absl::FailedPreconditionError(absl::StrCat("run ", run_id, " has finished (", run[0].Text(0), ")"));
      }
      FW_RETURN_IF_ERROR(db_->Exec("INSERT INTO artifacts (path, hash, size_bytes, created_ms, run_id) "
                                   "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                                   {abs, node.hash, static_cast<int64_t>(size), NowMs(), run_id}));
      return db_->Exec(
          "INSERT INTO edges (run_id, direction, kind, node, version, hash, detail) VALUES (?, 'out', ?, ?, -1, ?, ?)",
          {run_id, KindName(node.kind), abs, node.hash, json{{"samples", samples}, {"size_bytes", size}}.dump()});
    }));
  }
  return node;
}

// ---- lineage queries ------------------------------------------------------

Result<LineageGraph> Catalog::Upstream(const Node& start, int max_depth) { return Walk(start, true, max_depth); }
Result<LineageGraph> Catalog::Downstream(const Node& start, int max_depth) { return Walk(start, false, max_depth); }

Result<LineageGraph> Catalog::Walk(const Node& start, bool upstream, int max_depth) {
  LineageGraph g;
  g.start = start;
  if (start.kind == Node::Kind::kArtifact || start.kind == Node::Kind::kFile) g.start.name = AbsolutePath(start.name);
  absl::MutexLock lock(&mu_);
  // Breadth-first, one level at a time with a few statements per level
  // (not per run): the runs touching any node of the level, then those
  // runs and all their edges. A table version carries the rows of the
  // versions before it, so walking up from ns/t@v meets the producers of
  // every version <= v, and walking down the consumers of every version >= v.
  constexpr size_t kChunk = 64;
  std::set<std::string> seen_runs, seen_nodes;
  std::vector<Node> level = {g.start};
  seen_nodes.insert(g.start.ToString() + "#" + g.start.hash);
  for (int depth = 0; !level.empty() && depth < max_depth; ++depth) {
    std::vector<std::pair<int64_t, std::string>> found;  // (started_ms, run id)
    for (size_t at = 0; at < level.size(); at += kChunk) {
      std::string sql =
          "SELECT DISTINCT e.run_id, r.started_ms FROM edges e JOIN runs r ON r.id = e.run_id "
          "WHERE e.direction = ? AND (";
      std::vector<SqlValue> params = {std::string(upstream ? "out" : "in")};
      for (size_t i = at; i < std::min(level.size(), at + kChunk); ++i) {
        const Node& n = level[i];
        absl::StrAppend(&sql, i == at ? "" : " OR ", "(e.kind = ? AND e.node = ?");
        params.push_back(std::string(KindName(n.kind)));
        params.push_back(n.name);
        if (n.kind == Node::Kind::kDataset && n.version >= 0) {
          sql += upstream ? " AND e.version <= ?" : " AND e.version >= ?";
          params.push_back(n.version);
        }
        if (n.kind != Node::Kind::kDataset && !n.hash.empty()) {
          sql += " AND e.hash = ?";
          params.push_back(n.hash);
        }
        sql += ")";
      }
      sql += ")";
      FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query(sql, params));
      for (const auto& r : rows) {
        if (!seen_runs.count(r.Text(0))) found.emplace_back(r.Int(1), r.Text(0));
      }
    }
    std::sort(found.begin(), found.end());
    found.erase(std::unique(found.begin(), found.end()), found.end());
    std::vector<std::string> ids;
    for (auto& [started, id] : found) {
      if (seen_runs.insert(id).second) ids.push_back(id);
    }
    std::map<std::string, LineageStep> steps;
    for (size_t at = 0; at < ids.size(); at += kChunk) {
      std::string in = "(";
      std::vector<SqlValue> params;
      for (size_t i = at; i < std::min(ids.size(), at + kChunk); ++i) {
        in += i == at ? "?" : ", ?";
        params.push_back(ids[i]);
      }
      in += ")";
      FW_ASSIGN_OR_RETURN(SqlRows rr, db_->Query(absl::StrCat("SELECT ", kRunColumns, " FROM runs WHERE id IN ", in),
                                                 params));
      for (const auto& r : rr) {
        FW_ASSIGN_OR_RETURN(RunInfo run, RunFromRow(r));
        LineageStep& step = steps[run.id];
        step.run = std::move(run);
        step.depth = depth + 1;
      }
      FW_ASSIGN_OR_RETURN(SqlRows er, db_->Query(absl::StrCat("SELECT ", kEdgeColumns, " FROM edges WHERE run_id IN ",
                                                              in, " ORDER BY id"),
                                                 params));
      for (const auto& r : er) {
        FW_ASSIGN_OR_RETURN(Edge e, EdgeFromRow(r));
        auto it = steps.find(e.run_id);
        if (it != steps.end()) (e.input ? it->second.inputs : it->second.outputs).push_back(std::move(e));
      }
    }
    std::vector<Node> next;
    for (const std::string& id : ids) {
      auto it = steps.find(id);
      if (it == steps.end()) continue;
      for (const Edge& e : upstream ? it->second.inputs : it->second.outputs) {
        if (seen_nodes.insert(e.node.ToString() + "#" + e.node.hash).second) next.push_back(e.node);
      }
      g.steps.push_back(std::move(it->second));
    }
    level = std::move(next);
  }
  return g;
}

Result<SampleSet> Catalog::Samples(const Node& artifact) {
  if (artifact.kind != Node::Kind::kArtifact) {
    return absl::InvalidArgumentError(absl::StrCat("samples: '", artifact.ToString(), "' is not an artifact"));
  }
  const std::string abs = AbsolutePath(artifact.name);
  absl::MutexLock lock(&mu_);
  std::string sql = "SELECT run_id, hash, detail FROM edges WHERE direction = 'out' AND kind = 'artifact' AND node = ?";
  std::vector<SqlValue> params = {abs};
  if (!artifact.hash.empty()) {
    sql += " AND hash = ?";
    params.push_back(artifact.hash);
  }
  sql += " ORDER BY id DESC LIMIT 1";
  FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query(sql, params));
  if (rows.empty()) return absl::NotFoundError(absl::StrCat("no run logged the artifact ", abs));
  SampleSet out;
  out.artifact = Node{Node::Kind::kArtifact, abs, -1, rows[0].Text(1)};
  out.run_id = rows[0].Text(0);
  json detail = json::parse(rows[0].Text(2), nullptr, false);
  if (detail.is_object() && detail.contains("samples") && detail["samples"].is_array()) {
    for (const auto& s : detail["samples"]) {
      Edge e;
      e.run_id = out.run_id;
      e.input = true;
      e.node.kind = Node::Kind::kDataset;
      e.node.name = s.value("dataset", "");
      e.node.version = s.value("version", int64_t{-1});
      json detail = s;  // {state, start, rank, world_size}: what the loader had handed out
      if (detail.is_object()) {
        detail.erase("dataset");
        detail.erase("version");
      }
      e.detail_json = detail.dump();
      out.sources.push_back(std::move(e));
    }
  }
  return out;
}

// ---- events ---------------------------------------------------------------

Status Catalog::Emit(const RunInfo& run, const char* event_type, const std::vector<Edge>& edges) {
  if (sinks_.empty()) return absl::OkStatus();
  std::map<std::string, DatasetFacts> facts;
  {
    absl::MutexLock lock(&mu_);
    for (const Edge& e : edges) {
      if (e.node.kind != Node::Kind::kDataset) continue;
      DatasetFacts f;
      FW_ASSIGN_OR_RETURN(SqlRows d, db_->Query("SELECT uri FROM datasets WHERE name = ?", {e.node.name}));
      if (!d.empty()) f.uri = d[0].Text(0);
      FW_ASSIGN_OR_RETURN(SqlRows v, db_->Query("SELECT schema_json FROM dataset_versions WHERE dataset = ? AND "
                                                "version = ?",
                                                {e.node.name, e.node.version}));
      if (!v.empty()) f.schema_json = v[0].Text(0);
      facts[e.node.ToString()] = std::move(f);
    }
  }
  const std::string event = BuildRunEvent(run, event_type, edges, facts, NowMs());
  for (const auto& sink : sinks_) {
    // The catalog is the record; a sink that is down costs the event, not the run.
    if (Status s = sink->Send(event); !s.ok()) {
      FW_LOG(WARNING) << "OpenLineage: " << event_type << " event of run " << run.id << " not delivered to "
                      << sink->Describe() << ": " << s.message();
    }
  }
  return absl::OkStatus();
}

}  // namespace flywheel::catalog
