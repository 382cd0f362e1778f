// `flywheel serve`: the dashboard on loopback (docs/observability.md,
// "Dashboard"). obs::Dashboard serves the page, the live series it scrapes
// and /metrics; this file adds the table browser (a warehouse directory or
// the catalog's datasets) and the lineage graph (the catalog).
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flywheel/cli/commands.h"
#include "flywheel/cli/common.h"
#include "flywheel/obs/dashboard.h"
#include "flywheel/obs/http_server.h"
#include "flywheel/table/table.h"

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using obs::HttpRequest;
using obs::HttpResponse;
using obs::JsonError;

constexpr int kMaxTables = 2000;       // listed per /api/tables
constexpr int kMaxDepth = 4;           // directory levels searched below the warehouse
constexpr int kVersionsWithBytes = 50;  // newest versions whose size is computed (a manifest read each)

bool IsTableDir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p / "_versions", ec);
}

uint64_t Bytes(const table::Manifest& m) {
  uint64_t bytes = 0;
  for (const auto& f : m.fragments) {
    for (const auto& df : f.files) bytes += df.size_bytes;
  }
  return bytes;
}

struct TableEntry {
  std::string name;  // dataset name or path relative to the warehouse
  std::string uri;
};

class Browser {
 public:
  Browser(std::string warehouse, catalog::Catalog* catalog) : warehouse_(std::move(warehouse)), catalog_(catalog) {}

  // Tables the dashboard shows: the catalog's datasets the principal may
  // read, else the table directories under the warehouse.
  Result<std::vector<TableEntry>> List() {
    std::vector<TableEntry> out;
    if (catalog_ != nullptr) {
      FW_ASSIGN_OR_RETURN(auto datasets, catalog_->ListDatasets());
      for (const auto& d : datasets) {
        FW_ASSIGN_OR_RETURN(bool ok, catalog_->HasPrivilege(catalog_->principal(), d.name, catalog::Privilege::kRead));
        if (ok) out.push_back({d.name, d.uri});
      }
      return out;
    }
    if (warehouse_.empty()) return out;
    std::error_code ec;
    fs::recursive_directory_iterator it(warehouse_, fs::directory_options::skip_permission_denied, ec), end;
    if (ec) return absl::NotFoundError(absl::StrCat("warehouse ", warehouse_, ": ", ec.message()));
    for (; it != end && static_cast<int>(out.size()) < kMaxTables; it.increment(ec)) {
      if (ec) break;
      if (!it->is_directory(ec) || it->is_symlink(ec)) {
        it.disable_recursion_pending();
        continue;
      }
      const fs::path& p = it->path();
      if (p.filename().string().rfind('_', 0) == 0 || p.filename() == "data" || p.filename() == "deletions") {
        it.disable_recursion_pending();
        continue;
      }
      if (IsTableDir(p)) {
        out.push_back({fs::relative(p, warehouse_, ec).string(), p.string()});
        it.disable_recursion_pending();  // no tables inside tables
      } else if (it.depth() + 1 >= kMaxDepth) {
        it.disable_recursion_pending();
      }
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return out;
  }

  Result<TableEntry> Find(const std::string& name) {
    FW_ASSIGN_OR_RETURN(auto all, List());
    for (auto& e : all) {
      if (e.name == name) return e;
    }
    return absl::NotFoundError(absl::StrCat("no table '", name, "'",
                                            catalog_ ? " readable in the catalog" : " in the warehouse"));
  }

  HttpResponse Tables() {
    auto list = List();
    if (!list.ok()) return JsonError(500, std::string(list.status().message()));
    json tables = json::array();
    for (const auto& e : *list) {
      json row{{"name", e.name}};
      auto t = table::Table::Open(e.uri);
      if (!t.ok()) {
        row["error"] = std::string(t.status().message());
      } else {
        const table::Manifest& m = (*t)->manifest();
        json tags = json::array();
        if (auto tg = (*t)->Tags(); tg.ok()) {
          for (const auto& [tag, v] : *tg) tags.push_back(tag);
        }
        row.update(json{{"version", m.version},
                        {"rows", m.num_rows()},
                        {"bytes", Bytes(m)},
                        {"columns", m.schema.fields.size()},
                        {"tags", std::move(tags)},
                        {"updated_unix", static_cast<double>(m.timestamp_ms) / 1000.0}});
      }
      tables.push_back(std::move(row));
    }
    const std::string where = catalog_ ? catalog_->warehouse() : warehouse_;
    return obs::JsonResponse(obs::Dump(json{{"warehouse", where.empty() ? json(nullptr) : json(where)},
                                            {"source", catalog_ ? "catalog" : "warehouse"},
                                            {"tables", std::move(tables)}}));
  }

  HttpResponse Detail(const std::string& name) {
    if (name.empty()) return JsonError(400, "name: missing (/api/table?name=NS/TABLE)");
    auto e = Find(name);
    if (!e.ok()) return JsonError(404, std::string(e.status().message()));
    auto t = table::Table::Open(e->uri);
    if (!t.ok()) return JsonError(500, absl::StrCat("opening ", e->uri, ": ", t.status().message()));
    auto versions = (*t)->Versions();
    if (!versions.ok()) return JsonError(500, std::string(versions.status().message()));
    std::map<int64_t, std::vector<std::string>> tags_of;
    json tags = json::object();
    if (auto tg = (*t)->Tags(); tg.ok()) {
      for (const auto& [tag, v] : *tg) {
        tags[tag] = v;
        tags_of[v].push_back(tag);
      }
    }
    json schema = json::array();
    for (const auto& f : (*t)->schema().fields) {
      schema.push_back(json{{"name", f.name}, {"type", f.type.ToString()}, {"nullable", f.nullable}});
    }
    json vs = json::array();
    int with_bytes = 0;
    for (auto it = versions->rbegin(); it != versions->rend(); ++it) {
      json v{{"version", it->version},
             {"op", it->operation.type},
             {"writer", it->operation.writer},
             {"rows", it->num_rows},
             {"fragments", it->num_fragments},
             {"timestamp_unix", static_cast<double>(it->timestamp_ms) / 1000.0},
             {"tags", tags_of.count(it->version) ? json(tags_of[it->version]) : json::array()}};
      if (with_bytes++ < kVersionsWithBytes) {
        if (auto at = (*t)->Checkout(it->version); at.ok()) v["bytes"] = Bytes((*at)->manifest());
      }
      vs.push_back(std::move(v));
    }
    return obs::JsonResponse(obs::Dump(json{{"name", e->name},
                                            {"uri", e->uri},
                                            {"version", (*t)->version()},
                                            {"rows", (*t)->num_rows()},
                                            {"bytes", Bytes((*t)->manifest())},
                                            {"schema", std::move(schema)},
                                            {"tags", std::move(tags)},
                                            {"versions", std::move(vs)}}));
  }

  HttpResponse Datasets() {
    if (catalog_ == nullptr) return JsonError(404, "no catalog: start flywheel serve with --catalog");
    auto list = List();
    if (!list.ok()) return JsonError(500, std::string(list.status().message()));
    json out = json::array();
    for (const auto& e : *list) {
      json d{{"name", e.name}};
      if (auto v = catalog_->Versions(e.name); v.ok() && !v->empty()) d["latest_version"] = v->back().version;
      out.push_back(std::move(d));
    }
    return obs::JsonResponse(obs::Dump(json{{"datasets", std::move(out)}}));
  }

  HttpResponse Lineage(const std::string& node_text, const std::string& direction) {
    if (catalog_ == nullptr) return JsonError(404, "no catalog: start flywheel serve with --catalog");
    if (node_text.empty()) return JsonError(400, "node: missing (a dataset ns/t[@VERSION] or an artifact path)");
    if (direction != "up" && direction != "down" && !direction.empty()) {
      return JsonError(400, absl::StrCat("direction: '", direction, "' is not up or down"));
    }
    const bool up = direction != "down";
    // A dataset name, ns/t@v, artifact:PATH or file:PATH; else an artifact's path.
    Result<catalog::Node> n = catalog::Node::Parse(node_text);
    if (!n.ok()) n = catalog::Node::Parse("artifact:" + node_text);
    if (!n.ok()) return JsonError(400, std::string(n.status().message()));
    if (n->kind == catalog::Node::Kind::kDataset) {
      auto ok = catalog_->HasPrivilege(catalog_->principal(), n->name, catalog::Privilege::kRead);
      if (!ok.ok()) return JsonError(500, std::string(ok.status().message()));
      if (!*ok) {
        return JsonError(403, absl::StrCat(catalog_->principal(), " may not read dataset '", n->name, "'"));
      }
    }
    auto g = up ? catalog_->Upstream(*n) : catalog_->Downstream(*n);
    if (!g.ok()) return JsonError(absl::IsNotFound(g.status()) ? 404 : 400, std::string(g.status().message()));
    if (g->steps.empty() && n->kind == catalog::Node::Kind::kArtifact && node_text.rfind("artifact:", 0) != 0) {
      // Maybe a source file rather than a logged artifact.
      if (auto f = catalog::Node::Parse("file:" + node_text); f.ok()) {
        auto gf = up ? catalog_->Upstream(*f) : catalog_->Downstream(*f);
        if (gf.ok() && !gf->steps.empty()) g = std::move(gf);
      }
    }
    return obs::JsonResponse(obs::Dump(GraphJson(*g)));
  }

 private:
  static std::string NodeId(const catalog::Node& n) {
    switch (n.kind) {
      case catalog::Node::Kind::kDataset:
        return "dataset:" + n.ToString();
      case catalog::Node::Kind::kArtifact:
        return "artifact:" + n.name;
      case catalog::Node::Kind::kFile:
        return "file:" + n.name;
    }
    return n.ToString();
  }
  static const char* NodeKind(const catalog::Node& n) {
    switch (n.kind) {
      case catalog::Node::Kind::kDataset:
        return "dataset";
      case catalog::Node::Kind::kArtifact:
        return "artifact";
      case catalog::Node::Kind::kFile:
        return "file";
    }
    return "dataset";
  }

  // Nodes laid out by distance from the root (a run one step away is at 1,
  // what it read or wrote at 2, ...); edges point from producer to consumer.
  static json GraphJson(const catalog::LineageGraph& g) {
    json nodes = json::array(), edges = json::array();
    std::set<std::string> seen;
    auto add_node = [&](const std::string& id, const std::string& kind, const std::string& label, int depth) {
      if (!seen.insert(id).second) return;
      nodes.push_back(json{{"id", id}, {"kind", kind}, {"label", label}, {"depth", depth}});
    };
    const std::string root = NodeId(g.start);
    add_node(root, NodeKind(g.start), g.start.ToString(), 0);
    for (const auto& step : g.steps) {
      const std::string run = "run:" + step.run.id;
      add_node(run, "run",
               absl::StrCat(step.run.job, " (", step.run.job_type, ", ", catalog::RunStateName(step.run.state), ")"),
               2 * step.depth - 1);
      for (const auto& e : step.inputs) {
        const std::string id = NodeId(e.node);
        add_node(id, NodeKind(e.node), e.node.ToString(), 2 * step.depth);
        edges.push_back(json{{"from", id}, {"to", run}, {"label", "input"}});
      }
      for (const auto& e : step.outputs) {
        const std::string id = NodeId(e.node);
        add_node(id, NodeKind(e.node), e.node.ToString(), 2 * step.depth);
        edges.push_back(json{{"from", run}, {"to", id}, {"label", "output"}});
      }
    }
    return json{{"root", root}, {"nodes", std::move(nodes)}, {"edges", std::move(edges)}};
  }

  std::string warehouse_;
  catalog::Catalog* catalog_;
};

struct ServeArgs {
  std::string address = "127.0.0.1";
  int port = 8080;
  std::string warehouse;
  std::vector<std::string> scrape;
  double interval = 1.0;
  double history = 900;
  double exit_after = 0;  // seconds; 0 = until SIGINT/SIGTERM
};

int Serve(const ServeArgs& a) {
  auto c = CliCatalog();
  if (!c.ok()) return Fail(c.status());
  catalog::Catalog* catalog = *c;
  for (const std::string& url : a.scrape) {
    if (url.rfind("http://", 0) != 0) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("--scrape ", url, ": not an http:// URL")));
    }
  }
  if (!a.warehouse.empty()) {
    std::error_code ec;
    if (!fs::is_directory(a.warehouse, ec)) {
      return Fail(absl::NotFoundError(absl::StrCat("--warehouse ", a.warehouse, ": not a directory")));
    }
  }
  if (a.interval < 0.05 || a.history < a.interval) {
    return Fail(absl::InvalidArgumentError("--interval must be >= 0.05 s and --history >= --interval"));
  }
  obs::DashboardOptions o;
  o.targets = a.scrape;
  o.interval_seconds = a.interval;
  o.history_seconds = a.history;
  o.warehouse = catalog ? catalog->warehouse() : a.warehouse;
  o.catalog = catalog != nullptr;
  auto server = obs::HttpServer::Create(a.address, a.port);
  if (!server.ok()) return Fail(Annotate(server.status(), "flywheel serve"));
  obs::Dashboard dash(o);
  dash.Install(**server);
  auto browser = std::make_shared<Browser>(a.warehouse, catalog);
  (*server)->Handle("/api/tables", [browser](const HttpRequest&) { return browser->Tables(); });
  (*server)->Handle("/api/table", [browser](const HttpRequest& r) {
    return browser->Detail(obs::QueryParam(r.query, "name"));
  });
  (*server)->Handle("/api/datasets", [browser](const HttpRequest&) { return browser->Datasets(); });
  (*server)->Handle("/api/lineage", [browser](const HttpRequest& r) {
    return browser->Lineage(obs::QueryParam(r.query, "node"), obs::QueryParam(r.query, "direction"));
  });
  // Block the stop signals before any thread starts, so sigtimedwait gets them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  if (Status s = (*server)->Start(); !s.ok()) return Fail(Annotate(s, "flywheel serve"));
  dash.Start();
  std::printf("flywheel serve: dashboard on http://%s:%d/\n",
              a.address == "::1" ? "[::1]" : a.address.c_str(), (*server)->port());
  std::printf("flywheel serve: scraping %zu target%s every %.2g s%s%s\n", a.scrape.size(),
              a.scrape.size() == 1 ? "" : "s", a.interval,
              o.warehouse.empty() ? "" : absl::StrCat("; tables in ", o.warehouse).c_str(),
              catalog ? "; lineage from the catalog" : "");
  std::fflush(stdout);
  timespec wait{};
  const bool bounded = a.exit_after > 0;
  if (bounded) {
    wait.tv_sec = static_cast<time_t>(a.exit_after);
    wait.tv_nsec = static_cast<long>((a.exit_after - static_cast<double>(wait.tv_sec)) * 1e9);
  }
  int sig;
  do {
    sig = sigtimedwait(&sigs, nullptr, bounded ? &wait : nullptr);
  } while (sig < 0 && errno == EINTR && !bounded);
  dash.Stop();
  (*server)->Stop();
  std::printf("flywheel serve: stopped\n");
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, int* rc) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand(
      "serve",
      "The dashboard on loopback: live charts of running jobs (--scrape their /metrics), a table\n"
      "browser (--warehouse DIR, or the catalog's datasets) and lineage graphs (--catalog)");
  cmd->add_option("--port", a->port, "Port (0 = a free one, printed)")->capture_default_str();
  cmd->add_option("--address", a->address, "Loopback address to bind: 127.0.0.1, ::1 or localhost")
      ->capture_default_str();
  cmd->add_option("--warehouse", a->warehouse, "Directory whose tables the browser lists (without a catalog)");
  cmd->add_option("--scrape", a->scrape,
                  "Prometheus endpoint of a running job to chart, e.g. http://127.0.0.1:9100/metrics\n"
                  "(repeatable; `flywheel replay serve` and `flywheel run` print theirs)");
  cmd->add_option("--interval", a->interval, "Seconds between scrapes")->capture_default_str();
  cmd->add_option("--history", a->history, "Seconds of history kept and charted")->capture_default_str();
  cmd->add_option("--exit-after", a->exit_after, "Stop after this many seconds (0 = at Ctrl-C or SIGTERM)")
      ->capture_default_str();
  cmd->callback([a, rc] { *rc = Serve(*a); });
}

}  // namespace flywheel::cli
