#include "flywheel/catalog/recorder.h"

#include <filesystem>
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
  if (exists || !for_create) {
    if (!std::filesystem::exists(path, ec)) {
      // Let the table library report the missing table in its own words.
      return path;
    }
    FW_ASSIGN_OR_RETURN(DatasetInfo ds, catalog->ResolveTable(path));
    name = ds.name;
  } else {
    FW_ASSIGN_OR_RETURN(name, DatasetNameFor(*catalog, path));
    if (name.empty()) return path;  // a new table outside the warehouse: not governed until it exists
  }
  FW_RETURN_IF_ERROR(catalog->Authorize(name, privilege, action));
  return path;
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

Status RunScope::Finish(const Status& outcome) {
  if (catalog_ == nullptr || finished_) return absl::OkStatus();
  finished_ = true;
  return catalog_->FinishRun(run_id_, outcome.ok() ? RunState::kComplete : RunState::kFail,
                             outcome.ok() ? "" : std::string(outcome.message()));
}

}  // namespace flywheel::catalog
