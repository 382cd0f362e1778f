// `flywheel lineage up|down|samples`, `flywheel catalog ...`, grant/revoke/grants,
// audit, erase and retention
// (docs/catalog.md).
#include <cstdio>
#include <filesystem>
#include <ctime>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "flywheel/catalog/catalog.h"
#include "flywheel/catalog/recorder.h"
#include "flywheel/cli/commands.h"
#include "flywheel/cli/common.h"

namespace flywheel::cli {
namespace {

using catalog::Catalog;
using catalog::Edge;
using catalog::LineageGraph;
using catalog::Node;
using json = nlohmann::json;

Result<Catalog*> RequireCatalog() {
  FW_ASSIGN_OR_RETURN(Catalog * c, CliCatalog());
  if (c == nullptr) {
    return absl::FailedPreconditionError("no catalog: pass --catalog DIR|postgresql://... or set FLYWHEEL_CATALOG");
  }
  return c;
}

std::string Time(int64_t ms) {
  if (ms <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string DotQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

void PrintDot(const LineageGraph& g) {
  std::printf("digraph lineage {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n");
  std::set<std::string> nodes;
  auto node = [&](const Node& n) {
    std::string id = n.ToString();
    if (nodes.insert(id).second) {
      const char* shape = n.kind == Node::Kind::kDataset ? "cylinder" : n.kind == Node::Kind::kArtifact ? "note" : "folder";
      std::printf("  %s [shape=%s];\n", DotQuote(id).c_str(), shape);
    }
    return DotQuote(id);
  };
  node(g.start);
  for (const auto& s : g.steps) {
    std::string run = DotQuote("run:" + s.run.id);
    // Two label lines: the quoted parts joined by dot's "\n" escape.
    std::string job = DotQuote(s.run.job), kind = DotQuote(s.run.job_type + " " + catalog::RunStateName(s.run.state));
    std::printf("  %s [shape=box, style=rounded, label=%s\\n%s];\n", run.c_str(),
                job.substr(0, job.size() - 1).c_str(), kind.substr(1).c_str());
    for (const auto& e : s.inputs) std::printf("  %s -> %s;\n", node(e.node).c_str(), run.c_str());
    for (const auto& e : s.outputs) std::printf("  %s -> %s;\n", run.c_str(), node(e.node).c_str());
  }
  std::printf("}\n");
}

// One line about what a training input read: the loader's seed, order and
// the positions of each epoch from its start state to its state.
std::string DescribeSamples(const json& d) {
  if (!d.is_object()) return "";
  const json& st = d.contains("state") && d["state"].is_object() ? d["state"] : d;
  if (!st.contains("epoch") || !st.contains("consumed")) return "";
  std::string order = "sequential";
  if (st.contains("order") && st["order"].value("shuffle", false)) order = st["order"].value("mode", "row") + " shuffle";
  int64_t e1 = st.value("epoch", int64_t{0}), c1 = st.value("consumed", int64_t{0});
  int64_t e0 = 0, c0 = 0;
  if (d.contains("start") && d["start"].is_object()) {
    e0 = d["start"].value("epoch", int64_t{0});
    c0 = d["start"].value("consumed", int64_t{0});
  }
  std::string out = absl::StrCat("seed ", st.value("seed", uint64_t{0}), ", ", order, ": ");
  if (e0 == e1) {
    absl::StrAppend(&out, "epoch ", e1, " positions [", c0, ", ", c1, ")");
  } else {
    absl::StrAppend(&out, "epoch ", e0, " positions [", c0, ", end)");
    if (e1 - e0 > 1) absl::StrAppend(&out, ", epochs ", e0 + 1, "-", e1 - 1, " complete");
    absl::StrAppend(&out, ", epoch ", e1, " positions [0, ", c1, ")");
  }
  if (st.contains("mixture") && st["mixture"].is_object()) absl::StrAppend(&out, " (mixture; see --json)");
  return out;
}

void PrintText(const LineageGraph& g, bool up) {
  std::printf("%s %s%s\n", up ? "upstream of" : "downstream of", g.start.ToString().c_str(),
              g.start.hash.empty() ? "" : (" (" + g.start.hash + ")").c_str());
  if (g.steps.empty()) std::printf("  (no runs recorded)\n");
  for (const auto& s : g.steps) {
    std::string pad(2 * s.depth, ' ');
    std::printf("%s%s [%s] %s run %s by %s at %s\n", pad.c_str(), s.run.job.c_str(), s.run.job_type.c_str(),
                catalog::RunStateName(s.run.state), s.run.id.c_str(), s.run.principal.c_str(),
                Time(s.run.started_ms).c_str());
    for (const auto* list : {&s.inputs, &s.outputs}) {
      for (const auto& e : *list) {
        std::string extra = DescribeSamples(json::parse(e.detail_json, nullptr, false));
        std::printf("%s    %s %s%s%s\n", pad.c_str(), e.input ? "in " : "out", e.node.ToString().c_str(),
                    e.node.hash.empty() ? "" : (" (" + e.node.hash + ")").c_str(),
                    extra.empty() ? "" : ("  " + extra).c_str());
      }
    }
  }
}

// The samples behind an artifact, and behind every checkpoint its run
// resumed from (an artifact input of that run), newest first.
Status PrintSamples(Catalog& c, const Node& artifact, bool as_json, json* out, int depth) {
  FW_ASSIGN_OR_RETURN(catalog::SampleSet s, c.Samples(artifact));
  FW_ASSIGN_OR_RETURN(catalog::RunInfo run, c.GetRun(s.run_id));
  json entry = json::parse(catalog::SampleSetJson(s));
  entry["job"] = run.job;
  if (!as_json) {
    std::printf("%s%s (%s), logged by run %s (%s)\n", std::string(2 * depth, ' ').c_str(),
                s.artifact.ToString().c_str(), s.artifact.hash.c_str(), s.run_id.c_str(), run.job.c_str());
  }
  for (const auto& e : s.sources) {
    json d = json::parse(e.detail_json, nullptr, false);
    if (!as_json) {
      std::printf("%s  %s: %s\n", std::string(2 * depth, ' ').c_str(), e.node.ToString().c_str(),
                  DescribeSamples(d).c_str());
    }
  }
  if (s.sources.empty() && !as_json) std::printf("%s  (no training samples recorded)\n", std::string(2 * depth, ' ').c_str());
  out->push_back(entry);
  FW_ASSIGN_OR_RETURN(std::vector<Edge> edges, c.RunEdges(s.run_id));
  for (const auto& e : edges) {
    if (e.input && e.node.kind == Node::Kind::kArtifact && depth < 32) {
      if (!as_json) std::printf("%s  resumed from:\n", std::string(2 * depth, ' ').c_str());
      Status s = PrintSamples(c, e.node, as_json, out, depth + 1);
      if (absl::IsNotFound(s)) {
        // Resumed from a checkpoint no run logged: say so, keep going.
        if (!as_json) std::printf("%s  %s (no run logged it)\n", std::string(2 * depth + 2, ' ').c_str(),
                                  e.node.ToString().c_str());
        out->push_back({{"artifact", {{"id", e.node.ToString()}}}, {"unlogged", true}});
        continue;
      }
      FW_RETURN_IF_ERROR(s);
    }
  }
  return absl::OkStatus();
}

}  // namespace

void AddCatalogCommands(CLI::App& app, int* rc) {
  CLI::App* lin = app.add_subcommand("lineage", "Where data came from and what it trained (needs a catalog)");
  lin->require_subcommand(1);
  for (bool up : {true, false}) {
    auto* cmd = lin->add_subcommand(
        up ? "up" : "down",
        up ? "Runs and data upstream of a table version, artifact or file (what it was made from)"
           : "Runs and data downstream of a table version, artifact or file (what was made from it)");
    auto node = std::make_shared<std::string>();
    auto as_json = std::make_shared<bool>(false);
    auto as_dot = std::make_shared<bool>(false);
    auto depth = std::make_shared<int>(64);
    cmd->add_option("NODE", *node,
                    "ns/table@VERSION (no @VERSION: every version), artifact:PATH, file:PATH, or a path\n"
                    "to a logged artifact")
        ->required();
    cmd->add_flag("--json", *as_json, "JSON instead of text");
    cmd->add_flag("--dot", *as_dot, "Graphviz dot instead of text");
    cmd->add_option("--depth", *depth, "Follow at most this many runs")->capture_default_str()->check(AtLeast(0));
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      // An existing file is an artifact (a checkpoint path like ckpt/model.pt
      // would otherwise read as a dataset name).
      std::error_code ec;
      const bool is_file = std::filesystem::is_regular_file(*node, ec);
      auto n = is_file ? Node::Parse("artifact:" + *node) : Node::Parse(*node);
      if (!n.ok()) {
        return void(*rc = Fail(Annotate(n.status(), "not a dataset (ns/table[@VERSION]), artifact:PATH, file:PATH "
                                                    "or an existing file")));
      }
      auto g = up ? (*c)->Upstream(*n, *depth) : (*c)->Downstream(*n, *depth);
      if (!g.ok()) return void(*rc = Fail(g.status()));
      if (*as_json) std::printf("%s\n", json::parse(catalog::LineageJson(*g, up)).dump(2).c_str());
      else if (*as_dot) PrintDot(*g);
      else PrintText(*g, up);
    });
  }
  {
    auto* cmd = lin->add_subcommand("samples",
                                    "The table versions and exact sample positions that trained a checkpoint");
    auto node = std::make_shared<std::string>();
    auto as_json = std::make_shared<bool>(false);
    cmd->add_option("CHECKPOINT", *node, "Path of a checkpoint logged with run.log_artifact")->required();
    cmd->add_flag("--json", *as_json, "JSON instead of text");
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      std::string text = node->rfind("artifact:", 0) == 0 ? *node : "artifact:" + *node;
      auto n = Node::Parse(text);
      if (!n.ok()) return void(*rc = Fail(n.status()));
      json out = json::array();
      Status s = PrintSamples(**c, *n, *as_json, &out, 0);
      if (!s.ok()) return void(*rc = Fail(s));
      if (*as_json) std::printf("%s\n", out.dump(2).c_str());
    });
  }

  // ---- grants
  for (bool grant : {true, false}) {
    auto* cmd = app.add_subcommand(grant ? "grant" : "revoke",
                                   grant ? "Give a principal READ, WRITE or ADMIN on the catalog (*), a namespace or a dataset"
                                         : "Take a grant back");
    auto priv = std::make_shared<std::string>();
    auto object = std::make_shared<std::string>();
    auto who = std::make_shared<std::string>();
    cmd->add_option("PRIVILEGE", *priv, "READ, WRITE or ADMIN (each implies the ones before)")->required();
    cmd->add_option("OBJECT", *object, "'*' (the whole catalog), a namespace, or namespace/table")->required();
    cmd->add_option("PRINCIPAL", *who, "Who gets (or loses) it")->required();
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      auto p = catalog::ParsePrivilege(*priv);
      if (!p.ok()) return void(*rc = Fail(p.status()));
      Status s = grant ? (*c)->Grant(*who, *object, *p) : (*c)->Revoke(*who, *object, *p);
      if (!s.ok()) return void(*rc = Fail(s));
      std::printf("%s %s on %s %s %s\n", grant ? "granted" : "revoked", catalog::PrivilegeName(*p), object->c_str(),
                  grant ? "to" : "from", who->c_str());
    });
  }
  {
    auto* cmd = app.add_subcommand("grants", "List grants (of one object, or all)");
    auto object = std::make_shared<std::string>();
    cmd->add_option("OBJECT", *object, "'*', a namespace or namespace/table (default: every grant)");
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      auto g = (*c)->Grants(*object);
      if (!g.ok()) return void(*rc = Fail(g.status()));
      for (const auto& x : *g) {
        std::printf("%s\t%s\t%s\tby %s\n", x.object.c_str(), x.principal.c_str(), catalog::PrivilegeName(x.privilege),
                    x.granted_by.c_str());
      }
    });
  }

  // ---- audit
  {
    CLI::App* aud = app.add_subcommand("audit", "The catalog's hash-chained audit log");
    aud->require_subcommand(1);
    auto* verify = aud->add_subcommand("verify", "Check the chain: exit 0 when intact, 5 naming the first bad event");
    auto vjson = std::make_shared<bool>(false);
    verify->add_flag("--json", *vjson, "JSON instead of text");
    verify->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      auto r = (*c)->VerifyAudit();
      if (!r.ok()) return void(*rc = Fail(r.status()));
      if (*vjson) {
        json j = {{"ok", r->ok}, {"events", r->events}, {"head_hash", r->head_hash}};
        if (!r->ok) {
          j["first_bad_seq"] = r->first_bad_seq;
          j["problem"] = r->problem;
        }
        std::printf("%s\n", j.dump(2).c_str());
      } else if (r->ok) {
        std::printf("audit log intact: %lld events, head %s\n", static_cast<long long>(r->events), r->head_hash.c_str());
      } else {
        std::printf("audit log TAMPERED: %s\n", r->problem.c_str());
      }
      if (!r->ok) *rc = 5;
    });
    auto* log = aud->add_subcommand("log", "Print events");
    auto after = std::make_shared<int64_t>(0);
    auto limit = std::make_shared<int64_t>(100);
    auto ljson = std::make_shared<bool>(false);
    log->add_option("--after", *after, "Only events after this sequence number")->capture_default_str()->check(AtLeast(0));
    log->add_option("--limit", *limit, "At most this many events")->capture_default_str()->check(AtLeast(1));
    log->add_flag("--json", *ljson, "JSON lines instead of text");
    log->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      auto ev = (*c)->AuditEvents(*after, *limit);
      if (!ev.ok()) return void(*rc = Fail(ev.status()));
      for (const auto& e : *ev) {
        if (*ljson) {
          std::printf("%s\n", json{{"seq", e.seq}, {"time_ms", e.time_ms}, {"principal", e.principal},
                                   {"action", e.action}, {"object", e.object},
                                   {"detail", json::parse(e.detail_json, nullptr, false)}, {"hash", e.hash}}
                                  .dump()
                                  .c_str());
        } else {
          std::printf("%6lld %s %-10s %-14s %s %s\n", static_cast<long long>(e.seq), Time(e.time_ms).c_str(),
                      e.principal.c_str(), e.action.c_str(), e.object.c_str(), e.detail_json.c_str());
        }
      }
    });
  }

  // ---- erasure
  {
    auto* cmd = app.add_subcommand(
        "erase",
        "Remove a key's rows (e.g. one user's) from every retained version of a dataset, and with\n"
        "--downstream from every dataset derived from it; the old files are deleted (needs ADMIN)");
    auto ds = std::make_shared<std::string>();
    auto where = std::make_shared<std::string>();
    auto downstream = std::make_shared<bool>(false);
    auto dry = std::make_shared<bool>(false);
    auto as_json = std::make_shared<bool>(false);
    cmd->add_option("--dataset", *ds, "namespace/table")->required();
    cmd->add_option("--where", *where, "COLUMN=VALUE or 'COLUMN OP VALUE' (OP: == != < <= > >=)")->required();
    cmd->add_flag("--downstream", *downstream, "Also erase from datasets derived from it (lineage) that have the column");
    cmd->add_flag("--dry-run", *dry, "Count what would be erased; change nothing");
    cmd->add_flag("--json", *as_json, "The report as JSON");
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      catalog::EraseRequest req{*ds, *where, *downstream, *dry};
      auto r = catalog::EraseEverywhere(**c, req);
      if (!r.ok()) return void(*rc = Fail(r.status()));
      if (*as_json) {
        std::printf("%s\n", json::parse(catalog::ErasureReportJson(*r)).dump(2).c_str());
        return;
      }
      for (const auto& d : *r) {
        if (!d.skipped.empty()) {
          std::printf("%s: skipped (%s)\n", d.dataset.c_str(), d.skipped.c_str());
          continue;
        }
        std::printf("%s: %s%lld rows in %lld fragment(s); %zu version(s) rewritten, %zu file(s) deleted\n",
                    d.dataset.c_str(), *dry ? "would erase " : "erased ", static_cast<long long>(d.result.rows_erased),
                    static_cast<long long>(d.result.fragments_rewritten), d.result.versions_rewritten.size(),
                    d.result.files_deleted.size());
        for (const auto& [v, n] : d.result.rows_by_version) {
          if (n > 0) std::printf("  version %lld: %lld row(s)\n", static_cast<long long>(v), static_cast<long long>(n));
        }
      }
    });
  }

  // ---- retention
  {
    CLI::App* ret = app.add_subcommand("retention", "Per-dataset version retention (expire + vacuum)");
    ret->require_subcommand(1);
    auto* set = ret->add_subcommand("set", "Keep the newest N versions and/or those younger than D days");
    auto ds = std::make_shared<std::string>();
    auto versions = std::make_shared<int64_t>(0);
    auto days = std::make_shared<int64_t>(0);
    set->add_option("DATASET", *ds, "namespace/table")->required();
    set->add_option("--keep-versions", *versions, "Newest versions to keep (tagged ones are always kept)")->check(AtLeast(1));
    set->add_option("--keep-days", *days, "Keep versions younger than this many days")->check(AtLeast(0));
    set->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      Status s = (*c)->SetRetention(*ds, *versions, *days);
      if (!s.ok()) return void(*rc = Fail(s));
      std::printf("%s: keep %lld version(s), %lld day(s)\n", ds->c_str(), static_cast<long long>(*versions),
                  static_cast<long long>(*days));
    });
    auto* list = ret->add_subcommand("list", "Datasets with a retention policy");
    list->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      auto p = (*c)->RetentionPolicies();
      if (!p.ok()) return void(*rc = Fail(p.status()));
      for (const auto& [name, rule] : *p) {
        std::printf("%s\tkeep_versions=%lld\tkeep_days=%lld\n", name.c_str(), static_cast<long long>(rule.first),
                    static_cast<long long>(rule.second));
      }
    });
    auto* apply = ret->add_subcommand("apply", "Expire and vacuum per policy (one dataset or all)");
    auto ads = std::make_shared<std::string>();
    auto dry = std::make_shared<bool>(false);
    auto grace = std::make_shared<std::string>("1h");
    apply->add_option("DATASET", *ads, "Only this dataset");
    apply->add_flag("--dry-run", *dry, "List what would be expired");
    apply->add_option("--grace", *grace, "Vacuum keeps unreferenced files younger than this (in-flight writers)")
        ->capture_default_str();
    apply->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      auto g = ParseDurationMs(*grace);
      if (!g.ok()) return void(*rc = Fail(g.status()));
      auto r = catalog::ApplyRetention(**c, *ads, *dry, *g);
      if (!r.ok()) return void(*rc = Fail(r.status()));
      for (const auto& o : *r) {
        std::string vs;
        for (int64_t v : o.expired) vs += (vs.empty() ? "" : ",") + std::to_string(v);
        std::printf("%s: %s %zu version(s)%s%s", o.dataset.c_str(), *dry ? "would expire" : "expired",
                    o.expired.size(), vs.empty() ? "" : " ", vs.c_str());
        if (!*dry) std::printf(", deleted %zu file(s), %llu bytes", o.deleted_files.size(),
                               static_cast<unsigned long long>(o.bytes_freed));
        std::printf("\n");
      }
    });
  }

  CLI::App* grp = app.add_subcommand("catalog", "Datasets, runs, principals, column tags and policies");
  grp->require_subcommand(1);
  {
    auto* cmd = grp->add_subcommand("datasets", "List datasets (name, location)");
    auto ns = std::make_shared<std::string>();
    cmd->add_option("--namespace", *ns, "Only this namespace");
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      auto ds = (*c)->ListDatasets(*ns);
      if (!ds.ok()) return void(*rc = Fail(ds.status()));
      for (const auto& d : *ds) std::printf("%s\t%s\n", d.name.c_str(), d.uri.c_str());
    });
  }
  {
    auto* cmd = grp->add_subcommand("register", "Name the table at a path as dataset NS/TABLE");
    auto name = std::make_shared<std::string>();
    auto path = std::make_shared<std::string>();
    cmd->add_option("NAME", *name, "namespace/table")->required();
    cmd->add_option("PATH", *path, "Table directory")->required();
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      auto d = (*c)->RegisterDataset(*name, *path);
      if (!d.ok()) return void(*rc = Fail(d.status()));
      std::printf("registered %s -> %s\n", d->name.c_str(), d->uri.c_str());
    });
  }
  {
    auto* cmd = grp->add_subcommand("whoami", "The acting principal, whether it is an admin, and its clearances");
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      auto p = (*c)->GetPrincipal((*c)->principal());
      if (!p.ok()) return void(*rc = Fail(p.status()));
      std::string cl;
      for (const auto& t : p->clearances) cl += (cl.empty() ? "" : ",") + t;
      std::printf("%s%s clearances: %s\n", p->name.c_str(), p->admin ? " (admin)" : "", cl.empty() ? "-" : cl.c_str());
    });
  }
  {
    auto* cmd = grp->add_subcommand("admin", "Make a principal a catalog admin, or stop it being one (admins only)");
    auto who = std::make_shared<std::string>();
    auto off = std::make_shared<bool>(false);
    cmd->add_option("PRINCIPAL", *who, "Who")->required();
    cmd->add_flag("--remove", *off, "Remove admin rights instead");
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      Status s = (*c)->SetAdmin(*who, !*off);
      if (!s.ok()) return void(*rc = Fail(s));
      std::printf("%s is %san admin\n", who->c_str(), *off ? "no longer " : "");
    });
  }
  {
    auto* cmd = grp->add_subcommand("clearance", "Set the column tags a principal may read unmasked (admins only)");
    auto who = std::make_shared<std::string>();
    auto tags = std::make_shared<std::vector<std::string>>();
    cmd->add_option("PRINCIPAL", *who, "Who")->required();
    cmd->add_option("TAG", *tags, "Tags (none: no clearances)");
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      Status s = (*c)->SetClearances(*who, *tags);
      if (!s.ok()) return void(*rc = Fail(s));
      std::printf("%s cleared for %zu tag(s)\n", who->c_str(), tags->size());
    });
  }
  {
    auto* cmd = grp->add_subcommand("tag", "Tag a column (e.g. pii); uncleared readers get it masked or refused");
    auto ds = std::make_shared<std::string>();
    auto col = std::make_shared<std::string>();
    auto tag = std::make_shared<std::string>();
    auto remove = std::make_shared<bool>(false);
    cmd->add_option("DATASET", *ds, "namespace/table")->required();
    cmd->add_option("COLUMN", *col, "Column name")->required();
    cmd->add_option("TAG", *tag, "Tag, e.g. pii or email")->required();
    cmd->add_flag("--remove", *remove, "Remove the tag instead");
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      Status s = *remove ? (*c)->UntagColumn(*ds, *col, *tag) : (*c)->TagColumn(*ds, *col, *tag);
      if (!s.ok()) return void(*rc = Fail(s));
      std::printf("%s %s.%s %s\n", *remove ? "untagged" : "tagged", ds->c_str(), col->c_str(), tag->c_str());
    });
  }
  {
    auto* cmd = grp->add_subcommand("mask", "How tagged columns reach uncleared readers: hash (default), null or refuse");
    auto ds = std::make_shared<std::string>();
    auto mode = std::make_shared<std::string>();
    cmd->add_option("DATASET", *ds, "namespace/table")->required();
    cmd->add_option("MODE", *mode, "hash: a salted hash; null: nulls; refuse: reading the column is an error")
        ->required();
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      auto m = catalog::ParseMaskMode(*mode);
      if (!m.ok()) return void(*rc = Fail(m.status()));
      Status s = (*c)->SetMaskPolicy(*ds, *m);
      if (!s.ok()) return void(*rc = Fail(s));
      std::printf("%s: tagged columns are %s for uncleared readers\n", ds->c_str(),
                  *m == catalog::ReadPolicy::Mode::kRefuse ? "refused" : catalog::MaskModeName(*m));
    });
  }
  {
    auto* cmd = grp->add_subcommand("run", "Show one run with its inputs and outputs");
    auto id = std::make_shared<std::string>();
    cmd->add_option("RUN_ID", *id, "The run's id")->required();
    cmd->callback([=] {
      auto c = RequireCatalog();
      if (!c.ok()) return void(*rc = Fail(c.status()));
      auto r = (*c)->GetRun(*id);
      if (!r.ok()) return void(*rc = Fail(r.status()));
      auto edges = (*c)->RunEdges(*id);
      if (!edges.ok()) return void(*rc = Fail(edges.status()));
      catalog::LineageGraph g;
      g.start = Node{Node::Kind::kFile, "run:" + *id, -1, ""};
      catalog::LineageStep step{*r, {}, {}, 0};
      for (const auto& e : *edges) (e.input ? step.inputs : step.outputs).push_back(e);
      g.steps.push_back(step);
      std::printf("%s\n", json::parse(catalog::LineageJson(g, true))["runs"][0].dump(2).c_str());
    });
  }
}

}  // namespace flywheel::cli
