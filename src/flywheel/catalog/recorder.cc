#include "flywheel/catalog/recorder.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "flywheel/base/logging.h"

namespace flywheel::catalog {

std::string SchemaJson(const format::Schema& schema) {
  nlohmann::json fields = nlohmann::json::array();
  for (const auto& f : schema.fields) {
    fields.push_back({{"name", f.name}, {"type", f.type.ToString()}, {"nullable", f.nullable}});
  }
  return fields.dump();
}

Result<Node> MirrorVersion(Catalog& catalog, const table::Table& t) {
  FW_ASSIGN_OR_RETURN(DatasetInfo ds, catalog.ResolveTable(t.uri()));
  const table::Manifest& m = t.manifest();
  FW_RETURN_IF_ERROR(catalog.RecordVersion(
      DatasetVersion{ds.name, m.version, m.timestamp_ms, m.operation.type, t.num_rows(), SchemaJson(t.schema())}));
  return Node{Node::Kind::kDataset, ds.name, m.version, ""};
}

Result<std::string> ResolveTableArgument(Catalog* catalog, const std::string& arg, bool for_create) {
  if (catalog == nullptr) return arg;
  std::error_code ec;
  if (Catalog::ValidateDatasetName(arg).ok()) {
    auto ds = catalog->GetDataset(arg);
    if (ds.ok()) return ds->uri;
    if (!absl::IsNotFound(ds.status())) return ds.status();
    if (std::filesystem::exists(arg, ec)) return arg;
    if (for_create) return catalog->DefaultLocation(arg);
    return absl::NotFoundError(absl::StrCat("'", arg, "' is neither a dataset in the catalog nor a table directory"));
  }
  return arg;
}

Result<std::string> DatasetNameFor(Catalog& catalog, const std::string& uri) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(uri, ec).lexically_normal();
  if (!catalog.warehouse().empty()) {
    std::string rel = abs.lexically_relative(catalog.warehouse()).generic_string();
    if (!rel.empty() && rel.rfind("..", 0) != 0 && Catalog::ValidateDatasetName(rel).ok()) return rel;
  }
  return std::string();
}

Result<std::string> AuthorizeTable(Catalog* catalog, const std::string& arg, Privilege privilege,
                                   const std::string& action, bool for_create) {
  FW_ASSIGN_OR_RETURN(std::string path, ResolveTableArgument(catalog, arg, for_create));
  if (catalog == nullptr) return path;
  std::error_code ec;
  const bool exists = std::filesystem::exists(std::filesystem::path(path) / "_versions", ec) ||
                      std::filesystem::exists(std::filesystem::path(path) / "_latest", ec);
  std::string name;
  if (!exists) {
    // No table there (yet). Reads: let the table library report it in its
    // own words, registering nothing.
    if (!for_create) return path;
    FW_ASSIGN_OR_RETURN(name, DatasetNameFor(*catalog, path));
    if (name.empty()) return path;  // a new table outside the warehouse: not governed until it exists
  } else {
    FW_ASSIGN_OR_RETURN(DatasetInfo ds, catalog->ResolveTable(path));
    name = ds.name;
  }
  FW_RETURN_IF_ERROR(catalog->Authorize(name, privilege, action));
  return path;
}

namespace {

// "user_id=123" reads as "user_id == 123" (a single '=' between a name and a value).
Result<table::Predicate> ParseWhere(const std::string& where) {
  std::string text = where;
  const size_t eq = text.find('=');
  if (eq != std::string::npos && eq > 0 && text.find("==") == std::string::npos &&
      std::string("!<>").find(text[eq - 1]) == std::string::npos) {
    text = text.substr(0, eq) + " == " + text.substr(eq + 1);
  }
  return table::Predicate::Parse(text);
}

}  // namespace

Result<std::vector<DatasetErasure>> EraseEverywhere(Catalog& catalog, const EraseRequest& request) {
  FW_ASSIGN_OR_RETURN(table::Predicate pred, ParseWhere(request.where));
  FW_ASSIGN_OR_RETURN(DatasetInfo root, catalog.GetDataset(request.dataset));
  std::vector<std::string> order = {root.name};
  if (request.downstream) {
    FW_ASSIGN_OR_RETURN(LineageGraph g, catalog.Downstream(Node{Node::Kind::kDataset, root.name, -1, ""}));
    for (const auto& step : g.steps) {
      for (const auto& e : step.outputs) {
        if (e.node.kind == Node::Kind::kDataset &&
            std::find(order.begin(), order.end(), e.node.name) == order.end()) {
          order.push_back(e.node.name);
        }
      }
    }
  }
  // Every dataset that will be erased is checked before any is touched, so a
  // refusal anywhere leaves everything as it was.
  std::vector<std::pair<std::string, std::shared_ptr<table::Table>>> targets;
  std::vector<DatasetErasure> report;
  for (const std::string& name : order) {
    FW_ASSIGN_OR_RETURN(DatasetInfo ds, catalog.GetDataset(name));
    auto t = table::Table::Open(ds.uri);
    if (!t.ok()) {
      if (name == root.name) return t.status();
      DatasetErasure d{name, ds.uri, {}, absl::StrCat("cannot open: ", t.status().message())};
      report.push_back(std::move(d));
      continue;
    }
    if ((*t)->schema().FieldIndex(pred.column) < 0 && name != root.name) {
      report.push_back(DatasetErasure{name, ds.uri, {}, absl::StrCat("no column '", pred.column, "'")});
      continue;
    }
    FW_RETURN_IF_ERROR(catalog.Authorize(name, Privilege::kAdmin, request.dry_run ? "erase_dry_run" : "erase_check",
                                         nlohmann::json{{"where", request.where}}.dump()));
    targets.emplace_back(name, *t);
  }
  for (auto& [name, t] : targets) {
    DatasetErasure d;
    d.dataset = name;
    d.uri = t->uri();
    table::EraseOptions eo;
    eo.dry_run = request.dry_run;
    auto r = t->Erase(pred, eo);
    if (!r.ok()) {
      // What was erased so far is on record before the error is returned.
      if (!request.dry_run) {
        nlohmann::json detail = nlohmann::json::parse(ErasureReportJson(report));
        detail["where"] = request.where;
        detail["failed"] = absl::StrCat(name, ": ", r.status().message());
        (void)catalog.Audit("erase", root.name, detail.dump());
      }
      return Annotate(r.status(), absl::StrCat("erasing from ", name));
    }
    d.result = std::move(*r);
    report.push_back(std::move(d));
  }
  if (!request.dry_run) {
    nlohmann::json detail = nlohmann::json::parse(ErasureReportJson(report));
    detail["where"] = request.where;
    FW_RETURN_IF_ERROR(catalog.Audit("erase", root.name, detail.dump()));
  }
  return report;
}

std::string ErasureReportJson(const std::vector<DatasetErasure>& report) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& d : report) {
    nlohmann::json j = {{"dataset", d.dataset}, {"uri", d.uri}};
    if (!d.skipped.empty()) {
      j["skipped"] = d.skipped;
    } else {
      nlohmann::json versions = nlohmann::json::object();
      for (const auto& [v, n] : d.result.rows_by_version) versions[std::to_string(v)] = n;
      j["rows_erased"] = d.result.rows_erased;
      j["rows_by_version"] = versions;
      j["versions_rewritten"] = d.result.versions_rewritten;
      j["fragments_scanned"] = d.result.fragments_scanned;
      j["fragments_skipped"] = d.result.fragments_skipped;
      j["fragments_rewritten"] = d.result.fragments_rewritten;
      j["files_deleted"] = d.result.files_deleted;
      j["files_written"] = d.result.files_written;
    }
    out.push_back(j);
  }
  return nlohmann::json{{"datasets", out}}.dump();
}

Result<std::vector<RetentionOutcome>> ApplyRetention(Catalog& catalog, const std::string& dataset, bool dry_run,
                                                     int64_t grace_ms) {
  FW_ASSIGN_OR_RETURN(auto policies, catalog.RetentionPolicies());
  if (!dataset.empty()) {
    if (!policies.count(dataset)) {
      return absl::NotFoundError(absl::StrCat("dataset '", dataset, "' has no retention policy"));
    }
    auto one = policies[dataset];
    policies = {{dataset, one}};
  }
  std::vector<RetentionOutcome> out;
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  // Every dataset is checked before any is expired.
  for (const auto& [name, rule] : policies) {
    FW_RETURN_IF_ERROR(catalog.Authorize(name, Privilege::kAdmin, dry_run ? "retention_dry_run" : "retention"));
  }
  for (const auto& [name, rule] : policies) {
    const auto [keep_versions, keep_days] = rule;
    FW_ASSIGN_OR_RETURN(DatasetInfo ds, catalog.GetDataset(name));
    FW_ASSIGN_OR_RETURN(auto t, table::Table::Open(ds.uri));
    RetentionOutcome o;
    o.dataset = name;
    table::ExpireOptions eo;
    eo.keep_last = std::max<int64_t>(1, keep_versions);
    eo.older_than_ms = keep_days > 0 ? now - keep_days * 86400000 : -1;
    if (dry_run) {
      // What Expire would drop: versions outside the newest keep_last and
      // older than the cut-off, untagged.
      FW_ASSIGN_OR_RETURN(auto versions, t->Versions());
      FW_ASSIGN_OR_RETURN(auto tags, t->Tags());
      std::set<int64_t> tagged;
      for (const auto& [tag, v] : tags) tagged.insert(v);
      for (size_t i = 0; i + static_cast<size_t>(eo.keep_last) < versions.size(); ++i) {
        const auto& v = versions[i];
        if (tagged.count(v.version)) continue;
        if (eo.older_than_ms >= 0 && v.timestamp_ms >= eo.older_than_ms) continue;
        o.expired.push_back(v.version);
      }
    } else {
      FW_ASSIGN_OR_RETURN(table::ExpireResult er, t->Expire(eo));
      o.expired = er.expired;
      table::VacuumOptions vo;
      vo.grace_period_ms = grace_ms;
      FW_ASSIGN_OR_RETURN(table::VacuumResult vr, t->Vacuum(vo));
      o.deleted_files = vr.deleted;
      o.bytes_freed = vr.bytes_freed;
      FW_RETURN_IF_ERROR(catalog.Audit("retention_applied", name,
                                       nlohmann::json{{"expired", o.expired},
                                                      {"files_deleted", o.deleted_files.size()},
                                                      {"bytes_freed", o.bytes_freed}}
                                           .dump()));
    }
    out.push_back(std::move(o));
  }
  return out;
}

Result<std::unique_ptr<RunScope>> RunScope::Start(Catalog* catalog, const std::string& job,
                                                  const std::string& job_type, const std::string& params_json) {
  std::unique_ptr<RunScope> scope(new RunScope());
  scope->catalog_ = catalog;
  if (catalog != nullptr) {
    FW_ASSIGN_OR_RETURN(RunInfo run, catalog->StartRun(job, job_type, params_json));
    scope->run_id_ = run.id;
  }
  return scope;
}

RunScope::~RunScope() {
  if (catalog_ != nullptr && !finished_) {
    if (Status s = catalog_->FinishRun(run_id_, RunState::kAbort, "the run ended without finishing"); !s.ok()) {
      FW_LOG(WARNING) << "catalog: finishing run " << run_id_ << ": " << s.message();
    }
  }
}

Status RunScope::Add(bool input, const Node& node, const std::string& detail_json) {
  return catalog_->AddEdge(Edge{run_id_, input, node, detail_json});
}

Status RunScope::Input(const table::Table& t, const std::string& detail_json) {
  if (catalog_ == nullptr) return absl::OkStatus();
  FW_ASSIGN_OR_RETURN(Node n, MirrorVersion(*catalog_, t));
  return Add(true, n, detail_json);
}

Status RunScope::Output(const table::Table& t, const std::string& detail_json) {
  if (catalog_ == nullptr) return absl::OkStatus();
  FW_ASSIGN_OR_RETURN(Node n, MirrorVersion(*catalog_, t));
  return Add(false, n, detail_json);
}

Status RunScope::InputFile(const std::string& path, const std::string& detail_json) {
  if (catalog_ == nullptr) return absl::OkStatus();
  return Add(true, Node{Node::Kind::kFile, std::filesystem::absolute(path).lexically_normal().string(), -1, ""},
             detail_json);
}

Status RunScope::OutputFile(const std::string& path, const std::string& detail_json) {
  if (catalog_ == nullptr) return absl::OkStatus();
  return Add(false, Node{Node::Kind::kFile, std::filesystem::absolute(path).lexically_normal().string(), -1, ""},
             detail_json);
}

namespace {

Result<Node> OperationNodeOf(Catalog& catalog, const OperationNode& n) {
  if (n.uri.empty()) return Node::Parse(n.text);
  table::OpenOptions o;
  o.version = n.version;
  FW_ASSIGN_OR_RETURN_CTX(auto t, table::Table::Open(n.uri, o), "recording lineage of ", n.uri, "@", n.version);
  return MirrorVersion(catalog, *t);
}

}  // namespace

Result<std::string> RecordOperation(Catalog& catalog, const std::string& run_id, const std::string& job_type,
                                    const std::string& job, const std::vector<OperationNode>& inputs,
                                    const std::vector<OperationNode>& outputs, const std::string& params_json) {
  auto add_all = [&](const std::string& id) -> Status {
    for (int side = 0; side < 2; ++side) {
      for (const auto& n : side == 0 ? inputs : outputs) {
        FW_ASSIGN_OR_RETURN(Node node, OperationNodeOf(catalog, n));
        FW_RETURN_IF_ERROR(catalog.AddEdge(Edge{id, side == 0, node, n.detail_json}));
      }
    }
    return absl::OkStatus();
  };
  if (!run_id.empty()) {
    FW_RETURN_IF_ERROR(add_all(run_id));
    return run_id;
  }
  FW_ASSIGN_OR_RETURN(auto run, RunScope::Start(&catalog, job, job_type, params_json));
  const Status added = add_all(run->run_id());
  FW_RETURN_IF_ERROR(run->Finish(added));
  FW_RETURN_IF_ERROR(added);
  return run->run_id();
}

Status RecordTableWrite(Catalog& catalog, const std::string& run_id, const std::string& op, const std::string& uri,
                        int64_t before, int64_t after, const std::string& params_json) {
  FW_ASSIGN_OR_RETURN(DatasetInfo ds, catalog.ResolveTable(uri));
  FW_RETURN_IF_ERROR(catalog.Audit("commit", ds.name,
                                   absl::StrCat("{\"version\": ", after, ", \"operation\": \"", op, "\"}")));
  std::vector<OperationNode> inputs;
  if (before >= 1 && run_id.empty()) inputs.push_back(OperationNode{uri, before, "", "{}"});
  return RecordOperation(catalog, run_id, op, absl::StrCat(op, ":", ds.name), inputs,
                         {OperationNode{uri, after, "", "{}"}}, params_json)
      .status();
}

Status RunScope::Finish(const Status& outcome) {
  if (catalog_ == nullptr || finished_) return absl::OkStatus();
  finished_ = true;
  return catalog_->FinishRun(run_id_, outcome.ok() ? RunState::kComplete : RunState::kFail,
                             outcome.ok() ? "" : std::string(outcome.message()));
}

}  // namespace flywheel::catalog
