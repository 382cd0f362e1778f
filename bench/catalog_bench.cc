// catalog_bench: end-to-end figures of the catalog (src/flywheel/catalog) on
// both backends, in the same run: SQLite (a directory catalog in a scratch
// directory) and PostgreSQL (a throwaway server, testing::PgServer, that the
// bench starts and stops itself; fsync=off, unix socket). Results:
// <--out>/catalog.json; catalog design: docs/catalog.md.
//
//   catalog_bench [--quick] [--runs=2000] [--writers=4] [--repeats=3]
//                 [--graph-runs=100000] [--queries=200] [--backends=sqlite,postgresql]
//
// Workloads, per backend <b>:
//   write/<b>/4-writers        --writers forked processes, each opening its own
//                              Catalog after fork, wait for a common start,
//                              then do --runs runs each of StartRun + 2 AddEdge
//                              (an input dataset "raw/w<k>@i", an output
//                              "clean/w<k>@i") + FinishRun(COMPLETE), on a fresh
//                              catalog with no OpenLineage sink. runs/s and
//                              (runs+edges)/s = 3 records per run over the wall
//                              time (start signal to the last writer's exit).
//                              Baseline: 1 writer process doing --runs runs in
//                              the same way (same run). Ratio: 4-writer/1-writer.
//   write/<b>/4-writers+jsonl  the same with the OpenLineage JSON Lines file
//                              sink on (2 events per run, appended under
//                              flock). Baseline: 4 writers without a sink.
//                              SQLite: no-sink runs open the directory catalog
//                              with openlineage_file = "-" (off); the +jsonl
//                              runs use its default sink <root>/openlineage.jsonl.
//                              PostgreSQL: no sink by default; +jsonl sets
//                              CatalogOptions::openlineage_file.
//   lineage/<b>/upstream       Catalog::Upstream(artifact) latency on a graph of
//                              --graph-runs runs, bulk-inserted through db() in
//                              one transaction (schema of catalog.cc): per
//                              source dataset s (graph-runs/100 of them) and
//                              version v = 1..20, five runs:
//                                ingest   file:/landing/s/part-v -> raw/s@v
//                                clean    raw/s@v -> clean/s@v
//                                features clean/s@v -> features/s@v
//                                train    features/s@v + features/<pair of s>@v
//                                         -> artifact:/ckpt/s/v/model.pt
//                                eval     artifact + eval/holdout@1 -> eval/s@v
//                              --queries random artifacts; p50/p99/max ms and
//                              the steps returned.
//   lineage/<b>/downstream     Catalog::Downstream(raw/s@v) for --queries
//                              random s, v; the same figures.
//   Baseline (both lineage rows): the walk's own first query alone, a single
//                              indexed point query on edges_by_node
//                              (SELECT DISTINCT run_id FROM edges WHERE kind = ?
//                              AND node = ? AND direction = ? [AND version ...])
//                              for the same start nodes. Ratio: walk p50 /
//                              point-query p50 (how many point queries a walk
//                              costs).
// The query plans of the walk's statements go into the results file.
// Writes: best of --repeats (each repeat runs 1 writer, N writers and N
// writers + jsonl on fresh catalogs); every repeat is in the results file.
// --quick: a smoke run (~10 s: --runs=30 --graph-runs=5000 --queries=40
// --repeats=1) that writes no results file unless --out is given.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "flywheel/catalog/catalog.h"
#include "flywheel/catalog/sql.h"
#include "flywheel/catalog/testing/pg_server.h"

namespace fb = flywheel::bench;
namespace fc = flywheel::catalog;
using flywheel::Status;
using nlohmann::json;

namespace {

constexpr int kVersions = 20;        // versions per source dataset in the graph
constexpr int kRunsPerVersion = 5;   // ingest, clean, features, train, eval

// Where one backend's catalogs live: a directory catalog per measurement
// (SQLite) or a database per measurement on the shared server (PostgreSQL).
struct Backend {
  std::string name;  // "sqlite" or "postgresql"
  fb::TempDir* tmp = nullptr;
  fc::testing::PgServer* pg = nullptr;
  int next_id = 0;

  struct Target {
    std::string spec_no_sink;  // opens the catalog without an event sink
    std::string spec_sink;     // opens it with the JSON Lines sink
    fc::CatalogOptions opts_no_sink, opts_sink;
    std::string events_file;
  };
  Target Fresh(const std::string& tag) {
    Target t;
    const std::string id = tag + "_" + std::to_string(next_id++);
    t.opts_no_sink.principal = t.opts_sink.principal = "bench";
    if (name == "sqlite") {
      const std::string root = tmp->Sub("sqlite_" + id);
      std::filesystem::create_directories(root);
      t.spec_sink = root;  // the directory catalog: its default sink <root>/openlineage.jsonl
      t.spec_no_sink = root;
      t.opts_no_sink.openlineage_file = "-";
      t.events_file = root + "/openlineage.jsonl";
      t.opts_no_sink.warehouse = root;
    } else {
      const std::string conninfo = fb::CheckResult(pg->CreateDatabase(id), "creating database " + id);
      t.spec_sink = t.spec_no_sink = "pg:" + conninfo;
      t.events_file = tmp->Sub("pg_events_" + id + ".jsonl");
      t.opts_sink.openlineage_file = t.events_file;
    }
    return t;
  }
};

// ---------------------------------------------------------------- writes

struct WriteResult {
  int writers = 0;
  int64_t runs = 0;
  double wall = 0;
  std::vector<double> latencies;  // seconds per run (StartRun .. FinishRun)
  int64_t events_lines = 0;
  double runs_per_s() const { return static_cast<double>(runs) / wall; }
  double records_per_s() const { return 3.0 * static_cast<double>(runs) / wall; }
  json ToJson() const {
    return json{{"writers", writers},
                {"runs", runs},
                {"edges", 2 * runs},
                {"wall_s", wall},
                {"runs_per_s", runs_per_s()},
                {"records_per_s", records_per_s()},
                {"run_p50_ms", fb::Percentile(latencies, 50) * 1e3},
                {"run_p99_ms", fb::Percentile(latencies, 99) * 1e3},
                {"run_max_ms", fb::Percentile(latencies, 100) * 1e3},
                {"event_lines", events_lines}};
  }
};

void ReadAll(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      std::fprintf(stderr, "catalog_bench: a writer process died before it was ready\n");
      std::exit(1);
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
}

// One writer process: opens its own catalog, says it is ready, waits for
// the start (EOF on `go`), does `runs` runs, writes its latencies to `lat_path`.
int WriterMain(const std::string& spec, const fc::CatalogOptions& opts, int w, int runs, int ready_fd,
               int go_fd, const std::string& lat_path) {
  auto cat = fc::Catalog::Open(spec, opts);
  if (!cat.ok()) {
    std::fprintf(stderr, "writer %d: %s\n", w, std::string(cat.status().message()).c_str());
    return 1;
  }
  const char one = 1;
  if (::write(ready_fd, &one, 1) != 1) return 1;
  char c;
  while (::read(go_fd, &c, 1) > 0) {
  }  // EOF = start
  const std::string job = "bench/writer" + std::to_string(w);
  const std::string in = "raw/w" + std::to_string(w), out = "clean/w" + std::to_string(w);
  std::vector<double> lat;
  lat.reserve(runs);
  for (int i = 0; i < runs; ++i) {
    const double t0 = fb::Now();
    auto run = (*cat)->StartRun(job, "transform", R"({"step":"clean"})");
    if (!run.ok()) {
      std::fprintf(stderr, "writer %d: StartRun: %s\n", w, std::string(run.status().message()).c_str());
      return 1;
    }
    Status s = (*cat)->AddEdge(fc::Edge{run->id, true, fc::Node{fc::Node::Kind::kDataset, in, i, ""}, "{}"});
    if (s.ok()) s = (*cat)->AddEdge(fc::Edge{run->id, false, fc::Node{fc::Node::Kind::kDataset, out, i, ""}, "{}"});
    if (s.ok()) s = (*cat)->FinishRun(run->id, fc::RunState::kComplete);
    if (!s.ok()) {
      std::fprintf(stderr, "writer %d: %s\n", w, std::string(s.message()).c_str());
      return 1;
    }
    lat.push_back(fb::Now() - t0);
  }
  cat->reset();
  std::ofstream f(lat_path);
  for (double l : lat) f << l << "\n";
  f.close();
  return f ? 0 : 1;
}

WriteResult RunWriters(Backend& be, int writers, int runs, bool sink) {
  Backend::Target t = be.Fresh(sink ? "wj" : "w");
  const std::string& spec = sink ? t.spec_sink : t.spec_no_sink;
  const fc::CatalogOptions& opts = sink ? t.opts_sink : t.opts_no_sink;
  {
    // Create the schema and the datasets the edges name (not timed); closed
    // again before fork so no child inherits a live connection.
    auto cat = fb::CheckResult(fc::Catalog::Open(spec, opts), "opening " + be.name + " catalog");
    for (int w = 0; w < writers; ++w) {
      for (const char* ns : {"raw", "clean"}) {
        const std::string name = std::string(ns) + "/w" + std::to_string(w);
        fb::CheckResult(cat->RegisterDataset(name, be.tmp->Sub("tables/" + be.name + "/" + name)), "register");
      }
    }
  }
  int ready[2], go[2];
  if (::pipe(ready) != 0 || ::pipe(go) != 0) {
    std::perror("pipe");
    std::exit(1);
  }
  std::vector<pid_t> pids;
  for (int w = 0; w < writers; ++w) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fork");
      std::exit(1);
    }
    if (pid == 0) {
      ::close(ready[0]);
      ::close(go[1]);
      ::_exit(WriterMain(spec, opts, w, runs, ready[1], go[0], be.tmp->Sub("lat." + std::to_string(w))));
    }
    pids.push_back(pid);
  }
  ::close(ready[1]);
  ::close(go[0]);
  for (int w = 0; w < writers; ++w) {
    char c;
    ReadAll(ready[0], &c, 1);
  }
  ::close(ready[0]);
  const double t0 = fb::Now();
  ::close(go[1]);
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  WriteResult r;
  r.wall = fb::Now() - t0;
  if (!ok) {
    std::fprintf(stderr, "catalog_bench: a %s writer process failed\n", be.name.c_str());
    std::exit(1);
  }
  r.writers = writers;
  r.runs = static_cast<int64_t>(writers) * runs;
  for (int w = 0; w < writers; ++w) {
    const std::string path = be.tmp->Sub("lat." + std::to_string(w));
    std::ifstream in(path);
    double l;
    while (in >> l) r.latencies.push_back(l);
    std::filesystem::remove(path);
  }
  // Check what the writers left: every run complete, every edge, every event.
  auto cat = fb::CheckResult(fc::Catalog::Open(t.spec_no_sink, t.opts_no_sink), "reopening");
  auto rows = fb::CheckResult(cat->db()->Query("SELECT (SELECT count(*) FROM runs WHERE state = 'COMPLETE'), "
                                               "(SELECT count(*) FROM edges)"),
                              "counting");
  if (rows[0].Int(0) != r.runs || rows[0].Int(1) != 2 * r.runs) {
    std::fprintf(stderr, "catalog_bench: %s has %lld complete runs and %lld edges, expected %lld and %lld\n",
                 be.name.c_str(), static_cast<long long>(rows[0].Int(0)), static_cast<long long>(rows[0].Int(1)),
                 static_cast<long long>(r.runs), static_cast<long long>(2 * r.runs));
    std::exit(1);
  }
  if (sink) {
    std::ifstream ev(t.events_file);
    std::string line;
    while (std::getline(ev, line)) ++r.events_lines;
    if (r.events_lines != 2 * r.runs) {
      std::fprintf(stderr, "catalog_bench: %s wrote %lld events, expected %lld\n", be.name.c_str(),
                   static_cast<long long>(r.events_lines), static_cast<long long>(2 * r.runs));
      std::exit(1);
    }
  }
  return r;
}

// ---------------------------------------------------------------- graph

// Multi-row INSERTs of `ncols` columns, `batch` rows per statement. The
// rows of `parent` (the table a foreign key references) are flushed first.
class BulkInsert {
 public:
  BulkInsert(fc::SqlDb* db, std::string head, int ncols, BulkInsert* parent = nullptr, int batch = 400)
      : db_(db), head_(std::move(head)), ncols_(ncols), batch_(batch), parent_(parent) {}
  Status Add(std::vector<fc::SqlValue> row) {
    for (auto& v : row) params_.push_back(std::move(v));
    if (++rows_ == batch_) return Flush();
    return Status();
  }
  Status Flush() {
    if (rows_ == 0) return Status();
    if (parent_ != nullptr) FW_RETURN_IF_ERROR(parent_->Flush());
    std::string sql = head_ + " VALUES ";
    std::string tuple = "(";
    for (int c = 0; c < ncols_; ++c) tuple += c == 0 ? "?" : ", ?";
    tuple += ")";
    for (int r = 0; r < rows_; ++r) sql += (r == 0 ? "" : ", ") + tuple;
    Status s = db_->Exec(sql, params_);
    params_.clear();
    total_ += rows_;
    rows_ = 0;
    return s;
  }
  int64_t total() const { return total_; }

 private:
  fc::SqlDb* db_;
  std::string head_;
  int ncols_, batch_;
  BulkInsert* parent_;
  int rows_ = 0;
  int64_t total_ = 0;
  std::vector<fc::SqlValue> params_;
};

std::string Src(int s) {
  char b[16];
  std::snprintf(b, sizeof b, "src%04d", s);
  return b;
}
std::string ArtifactPath(int s, int v) {
  char b[64];
  std::snprintf(b, sizeof b, "/ckpt/%s/v%02d/model.pt", Src(s).c_str(), v);
  return b;
}
std::string RunId(std::mt19937_64& rng) {
  uint64_t hi = rng(), lo = rng();
  hi = (hi & ~0xF000ull) | 0x4000ull;
  lo = (lo & 0x3FFFFFFFFFFFFFFFull) | 0x8000000000000000ull;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xFFFF), static_cast<unsigned>(hi & 0xFFFF),
                static_cast<unsigned>(lo >> 48), static_cast<unsigned long long>(lo & 0xFFFFFFFFFFFFull));
  return buf;
}

struct GraphInfo {
  int sources = 0;
  int64_t runs = 0, edges = 0, jobs = 0;
  double build_s = 0;
};

// The lineage graph of the header, in one transaction.
GraphInfo BuildGraph(fc::Catalog* cat, int64_t graph_runs, uint64_t seed) {
  GraphInfo g;
  g.sources = static_cast<int>(std::max<int64_t>(2, (graph_runs + kVersions * kRunsPerVersion - 1) /
                                                       (kVersions * kRunsPerVersion)));
  fc::SqlDb* db = cat->db();
  const double t0 = fb::Now();
  std::mt19937_64 rng(seed);
  const int64_t base_ms = 1767225600000;  // 2026-01-01
  fb::Check(db->InTransaction(fc::TxnMode::kWrite, [&]() -> Status {
    BulkInsert ns(db, "INSERT INTO namespaces (name, created_ms)", 2);
    BulkInsert ds(db, "INSERT INTO datasets (name, namespace, uri, created_ms)", 4, &ns);
    BulkInsert dv(db, "INSERT INTO dataset_versions (dataset, version, committed_ms, operation, num_rows, schema_json)",
                  6, &ds);
    BulkInsert jobs(db, "INSERT INTO jobs (name, job_type, created_ms)", 3);
    BulkInsert runs(db,
                    "INSERT INTO runs (id, job, job_type, principal, state, started_ms, ended_ms, params, error)", 9,
                    &jobs);
    BulkInsert edges(db, "INSERT INTO edges (run_id, direction, kind, node, version, hash, detail)", 7, &runs);
    BulkInsert arts(db, "INSERT INTO artifacts (path, hash, size_bytes, created_ms, run_id)", 5, &runs);
    static const char* kNs[] = {"raw", "clean", "features", "eval"};
    static const char* kSteps[] = {"ingest", "clean", "features", "train", "eval"};
    const std::string schema = R"([{"name":"id","type":"int64"},{"name":"text","type":"string"}])";
    for (const char* n : kNs) FW_RETURN_IF_ERROR(ns.Add({std::string(n), base_ms}));
    FW_RETURN_IF_ERROR(ds.Add({std::string("eval/holdout"), std::string("eval"),
                               std::string("/warehouse/eval/holdout"), base_ms}));
    FW_RETURN_IF_ERROR(dv.Add({std::string("eval/holdout"), int64_t{1}, base_ms, std::string("append"),
                               int64_t{100000}, schema}));
    for (int s = 0; s < g.sources; ++s) {
      for (const char* n : kNs) {
        const std::string name = std::string(n) + "/" + Src(s);
        FW_RETURN_IF_ERROR(ds.Add({name, std::string(n), "/warehouse/" + name, base_ms}));
      }
      for (const char* step : kSteps) {
        FW_RETURN_IF_ERROR(jobs.Add({std::string(step) + "/" + Src(s),
                                     std::string(std::strcmp(step, "train") == 0 ? "train"
                                                 : std::strcmp(step, "ingest") == 0 ? "ingest"
                                                                                    : "transform"),
                                     base_ms}));
        ++g.jobs;
      }
    }
    int64_t now = base_ms;
    auto edge = [&](const std::string& run, bool in, const char* kind, const std::string& node, int64_t version,
                    const std::string& hash, const std::string& detail) {
      ++g.edges;
      return edges.Add({run, std::string(in ? "in" : "out"), std::string(kind), node, version, hash, detail});
    };
    for (int v = 1; v <= kVersions; ++v) {
      for (int s = 0; s < g.sources; ++s) {
        const std::string src = Src(s);
        std::string ids[kRunsPerVersion];
        for (int k = 0; k < kRunsPerVersion; ++k) {
          ids[k] = RunId(rng);
          now += 1000;
          const std::string type = k == 0 ? "ingest" : k == 3 ? "train" : "transform";
          FW_RETURN_IF_ERROR(runs.Add({ids[k], std::string(kSteps[k]) + "/" + src, type, std::string("bench"),
                                       std::string("COMPLETE"), now, now + 500 + static_cast<int64_t>(rng() % 60000),
                                       std::string(R"({"version":)") + std::to_string(v) + "}", std::string()}));
          ++g.runs;
        }
        for (const char* n : {"raw", "clean", "features", "eval"}) {
          FW_RETURN_IF_ERROR(dv.Add({std::string(n) + "/" + src, int64_t{v}, now, std::string("append"),
                                     int64_t{1000 + static_cast<int64_t>(rng() % 100000)}, schema}));
        }
        char part[32];
        std::snprintf(part, sizeof part, "/part-%02d.parquet", v);
        FW_RETURN_IF_ERROR(edge(ids[0], true, "file", "/landing/" + src + part, -1, "", "{}"));
        FW_RETURN_IF_ERROR(edge(ids[0], false, "dataset", "raw/" + src, v, "", "{}"));
        FW_RETURN_IF_ERROR(edge(ids[1], true, "dataset", "raw/" + src, v, "", "{}"));
        FW_RETURN_IF_ERROR(edge(ids[1], false, "dataset", "clean/" + src, v, "", "{}"));
        FW_RETURN_IF_ERROR(edge(ids[2], true, "dataset", "clean/" + src, v, "", "{}"));
        FW_RETURN_IF_ERROR(edge(ids[2], false, "dataset", "features/" + src, v, "", "{}"));
        const std::string loader = R"({"seed":)" + std::to_string(rng() % 1000) + R"(,"epoch":3,"positions":[)" +
                                   std::to_string(rng() % 100000) + "," + std::to_string(rng() % 100000) + "]}";
        FW_RETURN_IF_ERROR(edge(ids[3], true, "dataset", "features/" + src, v, "", loader));
        FW_RETURN_IF_ERROR(edge(ids[3], true, "dataset", "features/" + Src((s ^ 1) < g.sources ? (s ^ 1) : s), v, "",
                                loader));
        char hash[48];
        std::snprintf(hash, sizeof hash, "xxh3:%016llx%016llx", static_cast<unsigned long long>(rng()),
                      static_cast<unsigned long long>(rng()));
        const std::string art = ArtifactPath(s, v);
        FW_RETURN_IF_ERROR(edge(ids[3], false, "artifact", art, -1, hash,
                                R"({"samples":[{"dataset":"features/)" + src + R"(","version":)" +
                                    std::to_string(v) + "}],\"size_bytes\":104857600}"));
        FW_RETURN_IF_ERROR(arts.Add({art, std::string(hash), int64_t{104857600}, now, ids[3]}));
        FW_RETURN_IF_ERROR(edge(ids[4], true, "artifact", art, -1, hash, "{}"));
        FW_RETURN_IF_ERROR(edge(ids[4], true, "dataset", "eval/holdout", 1, "", "{}"));
        FW_RETURN_IF_ERROR(edge(ids[4], false, "dataset", "eval/" + src, v, "", "{}"));
      }
    }
    for (BulkInsert* b : {&ns, &ds, &dv, &jobs, &runs, &arts, &edges}) FW_RETURN_IF_ERROR(b->Flush());
    return Status();
  }),
            "bulk-inserting the lineage graph");
  // PostgreSQL's autovacuum would analyze the new tables within a minute;
  // the catalog never runs ANALYZE on SQLite, so neither does the bench.
  if (db->dialect() == "postgresql") fb::Check(db->ExecScript("ANALYZE"), "ANALYZE");
  g.build_s = fb::Now() - t0;
  return g;
}

// The query plan of `sql` with `params`, as text.
std::string Plan(fc::SqlDb* db, const std::string& sql, const std::vector<fc::SqlValue>& params) {
  const bool sqlite = db->dialect() == "sqlite";
  auto rows = db->Query((sqlite ? "EXPLAIN QUERY PLAN " : "EXPLAIN ") + sql, params);
  if (!rows.ok()) return "EXPLAIN failed: " + std::string(rows.status().message());
  std::string out;
  for (const auto& r : *rows) {
    if (!out.empty()) out += " | ";
    out += r.Text(sqlite ? 3 : 0);
  }
  return out;
}

struct Latencies {
  std::vector<double> ms;
  std::vector<double> steps;
  std::vector<int> version;  // the start node's version (walks only)
  json ToJson() const {
    json j{{"n", ms.size()},
           {"p50_ms", fb::Percentile(ms, 50)},
           {"p99_ms", fb::Percentile(ms, 99)},
           {"max_ms", fb::Percentile(ms, 100)}};
    if (!steps.empty()) {
      double sum = 0;
      for (double s : steps) sum += s;
      j["steps_p50"] = fb::Percentile(steps, 50);
      j["steps_mean"] = sum / static_cast<double>(steps.size());
      j["steps_min"] = fb::Percentile(steps, 0);
      j["steps_max"] = fb::Percentile(steps, 100);
    }
    if (!version.empty()) {
      // How a walk grows with the start node's version: walking up from
      // ns/t@v meets the producers of every version <= v (catalog.h).
      json by = json::object();
      for (int v = 1; v <= kVersions; ++v) {
        double n = 0, sum_ms = 0, sum_steps = 0;
        for (size_t i = 0; i < version.size(); ++i) {
          if (version[i] != v) continue;
          ++n;
          sum_ms += ms[i];
          sum_steps += steps[i];
        }
        if (n > 0) by[std::to_string(v)] = {{"n", n}, {"mean_ms", sum_ms / n}, {"mean_steps", sum_steps / n}};
      }
      j["by_start_version"] = by;
    }
    return j;
  }
};

// The walk's first statement (Catalog::Walk's runs_touching) for `n`.
std::pair<std::string, std::vector<fc::SqlValue>> FirstQuery(const fc::Node& n, bool upstream) {
  std::string sql = "SELECT DISTINCT run_id FROM edges WHERE kind = ? AND node = ? AND direction = ?";
  std::vector<fc::SqlValue> params = {std::string(n.kind == fc::Node::Kind::kDataset ? "dataset" : "artifact"),
                                      n.name, std::string(upstream ? "out" : "in")};
  if (n.kind == fc::Node::Kind::kDataset && n.version >= 0) {
    sql += upstream ? " AND version <= ?" : " AND version >= ?";
    params.push_back(n.version);
  }
  return {sql, params};
}

struct LineageResult {
  GraphInfo graph;
  Latencies up, down, point_up, point_down;
  json plans;
};

LineageResult RunLineage(Backend& be, int64_t graph_runs, int queries, uint64_t seed) {
  LineageResult res;
  Backend::Target t = be.Fresh("graph");
  auto cat = fb::CheckResult(fc::Catalog::Open(t.spec_no_sink, t.opts_no_sink), "opening graph catalog");
  res.graph = BuildGraph(cat.get(), graph_runs, seed);
  std::printf("  %s: graph of %lld runs, %lld edges (%d sources x %d versions) built in %.1f s\n", be.name.c_str(),
              static_cast<long long>(res.graph.runs), static_cast<long long>(res.graph.edges), res.graph.sources,
              kVersions, res.graph.build_s);
  std::fflush(stdout);
  std::mt19937_64 rng(seed + 1);
  std::vector<int> versions_up;
  auto pick = [&](bool upstream) {
    const int s = static_cast<int>(rng() % static_cast<uint64_t>(res.graph.sources));
    const int v = 1 + static_cast<int>(rng() % kVersions);
    if (upstream) versions_up.push_back(v);
    return upstream ? fc::Node{fc::Node::Kind::kArtifact, ArtifactPath(s, v), -1, ""}
                    : fc::Node{fc::Node::Kind::kDataset, "raw/" + Src(s), v, ""};
  };
  std::vector<fc::Node> ups, downs;
  for (int i = 0; i < queries; ++i) ups.push_back(pick(true));
  for (int i = 0; i < queries; ++i) downs.push_back(pick(false));
  fc::SqlDb* db = cat->db();
  // Plans of every statement a walk runs.
  {
    auto [usql, uparams] = FirstQuery(ups[0], true);
    auto [dsql, dparams] = FirstQuery(downs[0], false);
    auto dsql_up = FirstQuery(fc::Node{fc::Node::Kind::kDataset, downs[0].name, downs[0].version, ""}, true);
    auto first = fb::CheckResult(db->Query(usql, uparams), "first query");
    const std::string run_id = first.empty() ? std::string("x") : first[0].Text(0);
    res.plans = json{
        {"runs_touching(artifact, up)", Plan(db, usql, uparams)},
        {"runs_touching(dataset@v, down)", Plan(db, dsql, dparams)},
        {"runs_touching(dataset@v, up)", Plan(db, dsql_up.first, dsql_up.second)},
        {"run by id", Plan(db, "SELECT id, job, job_type, principal, state, started_ms, ended_ms, params, error "
                               "FROM runs WHERE id = ?",
                           {run_id})},
        {"edges of run", Plan(db, "SELECT run_id, direction, kind, node, version, hash, detail FROM edges "
                                  "WHERE run_id = ? ORDER BY id",
                              {run_id})},
    };
  }
  // Warm the caches (not timed).
  for (int i = 0; i < std::min(queries, 20); ++i) {
    fb::CheckResult(cat->Upstream(ups[i]), "Upstream");
    fb::CheckResult(cat->Downstream(downs[i]), "Downstream");
  }
  auto walk = [&](const std::vector<fc::Node>& nodes, bool upstream, Latencies* out) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      const fc::Node& n = nodes[i];
      out->version.push_back(upstream ? versions_up[i] : static_cast<int>(n.version));
      const double t0 = fb::Now();
      auto g = fb::CheckResult(upstream ? cat->Upstream(n) : cat->Downstream(n), "lineage walk");
      out->ms.push_back((fb::Now() - t0) * 1e3);
      out->steps.push_back(static_cast<double>(g.steps.size()));
    }
  };
  auto point = [&](const std::vector<fc::Node>& nodes, bool upstream, Latencies* out) {
    for (const auto& n : nodes) {
      auto [sql, params] = FirstQuery(n, upstream);
      const double t0 = fb::Now();
      auto rows = fb::CheckResult(db->Query(sql, params), "point query");
      out->ms.push_back((fb::Now() - t0) * 1e3);
      out->steps.push_back(static_cast<double>(rows.size()));  // rows (runs) it returned
    }
  };
  walk(ups, true, &res.up);
  walk(downs, false, &res.down);
  point(ups, true, &res.point_up);
  point(downs, false, &res.point_down);
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  // --quick changes the defaults, which flags given explicitly still override.
  const bool quick = fb::HasSwitch(argc, argv, "quick");
  std::map<std::string, std::string> defaults = {{"runs", "2000"},
                                                 {"writers", "4"},
                                                 {"repeats", "3"},
                                                 {"graph-runs", "100000"},
                                                 {"queries", "200"},
                                                 {"backends", "sqlite,postgresql"},
                                                 {"seed", "42"},
                                                 {"quick", "0"},
                                                 {"tmp", "/tmp"},
                                                 {"out", fb::SourceDir() + "/bench/results"}};
  if (quick) {
    defaults["runs"] = "30";
    defaults["repeats"] = "1";
    defaults["graph-runs"] = "5000";
    defaults["queries"] = "40";
    defaults["out"] = "";  // a smoke run keeps no results unless asked
  }
  fb::Flags flags(argc, argv, defaults,
                  "catalog_bench: catalog write rate with concurrent writer processes and lineage query latency,\n"
                  "SQLite and PostgreSQL (workloads: header of bench/catalog_bench.cc).\n"
                  "  catalog_bench [--quick] [--runs=N per writer] [--writers=4] [--repeats=N]\n"
                  "                [--graph-runs=N] [--queries=N] [--backends=sqlite,postgresql] [--out=DIR]\n"
                  "--quick: smoke run (~10 s), no results file unless --out=DIR is given.");
  // The environment must not add sinks to the no-sink measurements.
  ::unsetenv("FLYWHEEL_OPENLINEAGE_FILE");
  ::unsetenv("FLYWHEEL_OPENLINEAGE_URL");
  const int runs = static_cast<int>(flags.Int("runs"));
  const int writers = static_cast<int>(flags.Int("writers"));
  const int repeats = static_cast<int>(std::max<int64_t>(1, flags.Int("repeats")));
  const int queries = static_cast<int>(flags.Int("queries"));
  const uint64_t seed = static_cast<uint64_t>(flags.Int("seed"));

  fb::TempDir tmp(flags.Str("tmp"), "fw_catalog_bench");
  const json machine = fb::MachineInfo(tmp.path());
  fb::Report report("catalog", "Catalog write rate (concurrent writer processes) and lineage query latency, "
                               "SQLite and PostgreSQL");
  std::printf("catalog_bench: %s, %lld CPUs, load %s; %d writers x %d runs, best of %d; graph %lld runs, %d "
              "queries%s\n",
              machine["cpu_model"].get<std::string>().c_str(), static_cast<long long>(machine["nproc"].get<int64_t>()),
              machine["loadavg_at_start"].get<std::string>().c_str(), writers, runs, repeats,
              static_cast<long long>(flags.Int("graph-runs")), queries, quick ? " (--quick)" : "");

  std::unique_ptr<fc::testing::PgServer> pg;
  json extra_backends = json::object();
  std::vector<std::string> lat_table;
  for (const std::string& name : flags.List("backends")) {
    if (name != "sqlite" && name != "postgresql") {
      std::fprintf(stderr, "catalog_bench: unknown backend '%s' (sqlite, postgresql)\n", name.c_str());
      return 2;
    }
    Backend be{name, &tmp};
    json& ex = extra_backends[name];
    if (name == "postgresql") {
      const double t0 = fb::Now();
      auto started = fc::testing::PgServer::Start();
      if (!started.ok()) {
        std::fprintf(stderr, "catalog_bench: cannot start PostgreSQL (--backends=sqlite skips it): %s\n",
                     std::string(started.status().message()).c_str());
        return 1;
      }
      pg = std::move(*started);
      be.pg = pg.get();
      ex["server"] = {{"start_s", fb::Now() - t0},
                      {"socket_dir", pg->socket_dir()},
                      {"settings", "testing::PgServer: unix socket, fsync=off, max_connections=50"}};
      auto probe = fb::CheckResult(fc::OpenPostgres(fb::CheckResult(pg->CreateDatabase("postgres"), "conninfo")),
                                   "connecting");
      auto ver = probe->Query("SHOW server_version");
      if (ver.ok() && !ver->empty()) ex["server"]["version"] = (*ver)[0].Text(0);
    } else {
      ex["sqlite"] = "WAL, synchronous=NORMAL (catalog defaults); data in " + tmp.path() + " (" +
                     machine.value("data_fs", std::string("?")) + ")";
    }
    std::printf("\n== %s\n", name.c_str());
    std::fflush(stdout);

    // ---- writes
    WriteResult best1, bestn, bestj;
    json reps = json::array();
    for (int r = 0; r < repeats; ++r) {
      WriteResult w1 = RunWriters(be, 1, runs, false);
      WriteResult wn = RunWriters(be, writers, runs, false);
      WriteResult wj = RunWriters(be, writers, runs, true);
      std::printf("  repeat %d: 1 writer %.0f runs/s, %d writers %.0f runs/s, %d writers + jsonl %.0f runs/s\n", r,
                  w1.runs_per_s(), writers, wn.runs_per_s(), writers, wj.runs_per_s());
      std::fflush(stdout);
      reps.push_back({{"1_writer", w1.ToJson()}, {"n_writers", wn.ToJson()}, {"n_writers_jsonl", wj.ToJson()}});
      if (w1.runs_per_s() > best1.runs_per_s() || best1.runs == 0) best1 = w1;
      if (wn.runs_per_s() > bestn.runs_per_s() || bestn.runs == 0) bestn = wn;
      if (wj.runs_per_s() > bestj.runs_per_s() || bestj.runs == 0) bestj = wj;
    }
    ex["write_repeats"] = reps;
    const std::string nw = std::to_string(writers) + "-writers";
    report.Add(fb::Comparison{"write/" + name + "/" + nw, "runs/s", bestn.runs_per_s(),
                              "1 writer (same run)", best1.runs_per_s(), 0,
                              "StartRun+2 AddEdge+FinishRun, no event sink; run p50 " +
                                  std::to_string(fb::Percentile(bestn.latencies, 50) * 1e3).substr(0, 5) + " ms",
                              json{{"n_writers", bestn.ToJson()}, {"1_writer", best1.ToJson()}}});
    report.Add(fb::Comparison{"write/" + name + "/" + nw + " (runs+edges)", "records/s", bestn.records_per_s(),
                              "1 writer (same run)", best1.records_per_s(), 0, "3 records per run",
                              json{{"n_writers", bestn.ToJson()}, {"1_writer", best1.ToJson()}}});
    report.Add(fb::Comparison{"write/" + name + "/" + nw + "+jsonl", "runs/s", bestj.runs_per_s(),
                              nw + ", no event sink", bestn.runs_per_s(), 0,
                              "OpenLineage JSONL file sink on (2 events/run)",
                              json{{"n_writers_jsonl", bestj.ToJson()}, {"n_writers", bestn.ToJson()}}});

    // ---- lineage
    LineageResult lr = RunLineage(be, flags.Int("graph-runs"), queries, seed);
    ex["graph"] = {{"runs", lr.graph.runs},       {"edges", lr.graph.edges},
                   {"jobs", lr.graph.jobs},       {"sources", lr.graph.sources},
                   {"versions", kVersions},       {"build_s", lr.graph.build_s},
                   {"build_records_per_s", static_cast<double>(lr.graph.runs + lr.graph.edges) / lr.graph.build_s}};
    ex["plans"] = lr.plans;
    auto add_walk = [&](const std::string& what, const Latencies& walk, const Latencies& point,
                        const std::string& start) {
      char note[200];
      std::snprintf(note, sizeof note, "p99 %.2f ms, max %.2f ms; steps p50 %.0f (%.0f..%.0f)",
                    fb::Percentile(walk.ms, 99), fb::Percentile(walk.ms, 100), fb::Percentile(walk.steps, 50),
                    fb::Percentile(walk.steps, 0), fb::Percentile(walk.steps, 100));
      json pj = point.ToJson();
      pj["rows_p50"] = pj["steps_p50"];
      for (const char* k : {"steps_p50", "steps_mean", "steps_min", "steps_max"}) pj.erase(k);
      report.Add(fb::Comparison{"lineage/" + name + "/" + what, "ms p50", fb::Percentile(walk.ms, 50),
                                "1 indexed point query (p50)", fb::Percentile(point.ms, 50), 0, note,
                                json{{"start", start}, {"walk", walk.ToJson()}, {"point_query", pj}}});
      char line[256];
      std::snprintf(line, sizeof line, "%-11s %-10s %8.2f %8.2f %8.2f %7.0f %7.0f %7.0f %10.3f %10.3f", name.c_str(),
                    what.c_str(), fb::Percentile(walk.ms, 50), fb::Percentile(walk.ms, 99),
                    fb::Percentile(walk.ms, 100), fb::Percentile(walk.steps, 50), fb::Percentile(walk.steps, 0),
                    fb::Percentile(walk.steps, 100), fb::Percentile(point.ms, 50), fb::Percentile(point.ms, 99));
      lat_table.push_back(line);
    };
    add_walk("upstream", lr.up, lr.point_up, "artifact:/ckpt/<src>/v<v>/model.pt");
    add_walk("downstream", lr.down, lr.point_down, "raw/<src>@<v>");
  }
  pg.reset();  // stops the server

  std::printf("\nlineage walks (%d random start nodes each; point = the walk's first query alone)\n", queries);
  std::printf("%-11s %-10s %8s %8s %8s %7s %7s %7s %10s %10s\n", "backend", "walk", "p50 ms", "p99 ms", "max ms",
              "steps50", "min", "max", "point p50", "point p99");
  for (const auto& l : lat_table) std::printf("%s\n", l.c_str());
  report.extra()["backends"] = extra_backends;
  report.extra()["notes"] = json::array(
      {"SQLite no-sink rows open the directory catalog with openlineage_file \"-\" (no events); +jsonl rows use "
       "its default sink <root>/openlineage.jsonl",
       "PostgreSQL is testing::PgServer (fsync=off, unix socket) on the same 2-core machine as the writers",
       "graph bulk-inserted in one transaction through Catalog::db(); PostgreSQL ANALYZEd afterwards, SQLite not "
       "(the catalog never runs ANALYZE)"});
  if (flags.Str("out").empty()) {
    std::printf("no results file (--quick without --out)\n");
  } else {
    report.Write(flags.Str("out"), machine, flags.ToJson());
  }
  return 0;
}
