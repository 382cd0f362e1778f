// Catalog governance: privileges inherited from the catalog ("*") to
// namespaces to datasets, admins, clearances, column tags and mask policies.
// docs/catalog.md, "Governance".
#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "flywheel/catalog/catalog.h"
#include "flywheel/catalog/internal/common.h"
#include "flywheel/catalog/sql.h"

namespace flywheel::catalog {
namespace {

using internal_catalog::NowMs;
using json = nlohmann::json;

// The objects whose grants apply to `object`: itself and its ancestors.
std::vector<std::string> Scopes(const std::string& object) {
  std::vector<std::string> out = {object};
  if (object != "*") {
    if (size_t slash = object.find('/'); slash != std::string::npos) out.push_back(object.substr(0, slash));
    out.push_back("*");
  }
  return out;
}

Status ValidateObject(const std::string& object) {
  if (object == "*") return absl::OkStatus();
  if (object.find('/') == std::string::npos) {
    // A namespace: validated as the first part of a dataset name.
    return Catalog::ValidateDatasetName(object + "/x");
  }
  return Catalog::ValidateDatasetName(object);
}

Status ValidateTag(const std::string& tag) {
  if (tag.empty() || tag.size() > 64) return absl::InvalidArgumentError("a tag is 1-64 characters");
  for (char c : tag) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
      return absl::InvalidArgumentError(absl::StrCat("tag '", tag, "': use letters, digits, '_', '-' and '.'"));
  }
  return absl::OkStatus();
}

std::string NewSalt() {
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

}  // namespace

const char* PrivilegeName(Privilege p) {
  switch (p) {
    case Privilege::kRead: return "READ";
    case Privilege::kWrite: return "WRITE";
    case Privilege::kAdmin: return "ADMIN";
  }
  return "READ";
}

Result<Privilege> ParsePrivilege(const std::string& text) {
  std::string t = absl::AsciiStrToUpper(text);
  if (t == "READ") return Privilege::kRead;
  if (t == "WRITE") return Privilege::kWrite;
  if (t == "ADMIN") return Privilege::kAdmin;
  return absl::InvalidArgumentError(absl::StrCat("privilege '", text, "': expected READ, WRITE or ADMIN"));
}

const char* MaskModeName(ReadPolicy::Mode m) {
  switch (m) {
    case ReadPolicy::Mode::kHash: return "hash";
    case ReadPolicy::Mode::kNull: return "null";
    case ReadPolicy::Mode::kRefuse: return "refuse";
  }
  return "hash";
}

Result<ReadPolicy::Mode> ParseMaskMode(const std::string& text) {
  if (text == "hash") return ReadPolicy::Mode::kHash;
  if (text == "null") return ReadPolicy::Mode::kNull;
  if (text == "refuse") return ReadPolicy::Mode::kRefuse;
  return absl::InvalidArgumentError(absl::StrCat("mask policy '", text, "': expected hash, null or refuse"));
}

Result<bool> Catalog::HasPrivilege(const std::string& principal, const std::string& object, Privilege p) {
  FW_RETURN_IF_ERROR(ValidateObject(object));
  absl::MutexLock lock(&mu_);
  FW_ASSIGN_OR_RETURN(SqlRows admin, db_->Query("SELECT is_admin FROM principals WHERE name = ?", {principal}));
  if (!admin.empty() && admin[0].Int(0) != 0) return true;
  std::vector<std::string> scopes = Scopes(object);
  std::string sql = "SELECT privilege FROM grants WHERE principal = ? AND object IN (?";
  std::vector<SqlValue> params = {principal, scopes[0]};
  for (size_t i = 1; i < scopes.size(); ++i) {
    sql += ", ?";
    params.push_back(scopes[i]);
  }
  sql += ")";
  FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query(sql, params));
  for (const auto& r : rows) {
    auto held = ParsePrivilege(r.Text(0));
    if (held.ok() && static_cast<int>(*held) >= static_cast<int>(p)) return true;
  }
  return false;
}

Status Catalog::Authorize(const std::string& object, Privilege p, const std::string& action,
                          const std::string& detail_json) {
  FW_ASSIGN_OR_RETURN(bool ok, HasPrivilege(principal_, object, p));
  json detail = json::parse(detail_json.empty() ? "{}" : detail_json, nullptr, false);
  if (!detail.is_object()) detail = json::object();
  detail["privilege"] = PrivilegeName(p);
  if (!ok) detail["denied"] = true;
  FW_RETURN_IF_ERROR(Audit(action, object, detail.dump()));
  if (!ok) {
    return absl::PermissionDeniedError(absl::StrCat("principal '", principal_, "' lacks ", PrivilegeName(p), " on ",
                                                    object == "*" ? "the catalog" : absl::StrCat("'", object, "'"),
                                                    " (an admin of it can run: flywheel grant ", PrivilegeName(p),
                                                    " ", object, " ", principal_, ")"));
  }
  return absl::OkStatus();
}

Status Catalog::Grant(const std::string& principal, const std::string& object, Privilege p) {
  if (principal.empty()) return absl::InvalidArgumentError("grant: the principal is empty");
  FW_RETURN_IF_ERROR(Authorize(object, Privilege::kAdmin, "grant",
                               json{{"to", principal}, {"grant", PrivilegeName(p)}}.dump()));
  absl::MutexLock lock(&mu_);
  return db_->InTransaction(TxnMode::kWrite, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
    FW_RETURN_IF_ERROR(db_->Exec(
        "INSERT INTO principals (name, is_admin, clearances, created_ms) VALUES (?, 0, '', ?) ON CONFLICT DO NOTHING",
        {principal, NowMs()}));
    return db_->Exec(
        "INSERT INTO grants (principal, object, privilege, granted_by, granted_ms) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING",
        {principal, object, PrivilegeName(p), principal_, NowMs()});
  });
}

Status Catalog::Revoke(const std::string& principal, const std::string& object, Privilege p) {
  FW_RETURN_IF_ERROR(Authorize(object, Privilege::kAdmin, "revoke",
                               json{{"from", principal}, {"revoke", PrivilegeName(p)}}.dump()));
  absl::MutexLock lock(&mu_);
  FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query("DELETE FROM grants WHERE principal = ? AND object = ? AND "
                                               "privilege = ? RETURNING principal",
                                               {principal, object, PrivilegeName(p)}));
  if (rows.empty()) {
    return absl::NotFoundError(
        absl::StrCat("'", principal, "' holds no ", PrivilegeName(p), " grant on '", object, "'"));
  }
  return absl::OkStatus();
}

Result<std::vector<GrantInfo>> Catalog::Grants(const std::string& object) {
  absl::MutexLock lock(&mu_);
  SqlRows rows;
  const char* cols = "SELECT principal, object, privilege, granted_by, granted_ms FROM grants";
  if (object.empty()) {
    FW_ASSIGN_OR_RETURN(rows, db_->Query(absl::StrCat(cols, " ORDER BY object, principal, privilege")));
  } else {
    FW_ASSIGN_OR_RETURN(rows, db_->Query(absl::StrCat(cols, " WHERE object = ? ORDER BY principal, privilege"),
                                         {object}));
  }
  std::vector<GrantInfo> out;
  for (const auto& r : rows) {
    FW_ASSIGN_OR_RETURN(Privilege p, ParsePrivilege(r.Text(2)));
    out.push_back({r.Text(0), r.Text(1), p, r.Text(3), r.Int(4)});
  }
  return out;
}

Status Catalog::SetAdmin(const std::string& principal, bool admin) {
  FW_RETURN_IF_ERROR(Authorize("*", Privilege::kAdmin, admin ? "make_admin" : "remove_admin",
                               json{{"principal", principal}}.dump()));
  absl::MutexLock lock(&mu_);
  return db_->Exec(
      "INSERT INTO principals (name, is_admin, clearances, created_ms) VALUES (?, ?, '', ?) "
      "ON CONFLICT (name) DO UPDATE SET is_admin = excluded.is_admin",
      {principal, int64_t{admin ? 1 : 0}, NowMs()});
}

Status Catalog::SetClearances(const std::string& principal, const std::vector<std::string>& tags) {
  for (const auto& t : tags) FW_RETURN_IF_ERROR(ValidateTag(t));
  std::vector<std::string> sorted = tags;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  const std::string joined = absl::StrJoin(sorted, ",");
  FW_RETURN_IF_ERROR(Authorize("*", Privilege::kAdmin, "set_clearances",
                               json{{"principal", principal}, {"clearances", sorted}}.dump()));
  absl::MutexLock lock(&mu_);
  return db_->Exec(
      "INSERT INTO principals (name, is_admin, clearances, created_ms) VALUES (?, 0, ?, ?) "
      "ON CONFLICT (name) DO UPDATE SET clearances = excluded.clearances",
      {principal, joined, NowMs()});
}

Result<PrincipalInfo> Catalog::GetPrincipal(const std::string& name) {
  absl::MutexLock lock(&mu_);
  FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query("SELECT is_admin, clearances FROM principals WHERE name = ?", {name}));
  PrincipalInfo p;
  p.name = name;
  if (!rows.empty()) {
    p.admin = rows[0].Int(0) != 0;
    p.clearances = absl::StrSplit(rows[0].Text(1), ',', absl::SkipEmpty());
  }
  return p;
}

Status Catalog::TagColumn(const std::string& dataset, const std::string& column, const std::string& tag) {
  FW_RETURN_IF_ERROR(ValidateDatasetName(dataset));
  FW_RETURN_IF_ERROR(ValidateTag(tag));
  if (column.empty()) return absl::InvalidArgumentError("tag: the column name is empty");
  FW_RETURN_IF_ERROR(GetDataset(dataset).status());
  FW_RETURN_IF_ERROR(Authorize(dataset, Privilege::kAdmin, "tag_column", json{{"column", column}, {"tag", tag}}.dump()));
  absl::MutexLock lock(&mu_);
  return db_->Exec("INSERT INTO column_tags (dataset, column_name, tag) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                   {dataset, column, tag});
}

Status Catalog::UntagColumn(const std::string& dataset, const std::string& column, const std::string& tag) {
  FW_RETURN_IF_ERROR(Authorize(dataset, Privilege::kAdmin, "untag_column",
                               json{{"column", column}, {"tag", tag}}.dump()));
  absl::MutexLock lock(&mu_);
  return db_->Exec("DELETE FROM column_tags WHERE dataset = ? AND column_name = ? AND tag = ?", {dataset, column, tag});
}

Result<std::map<std::string, std::vector<std::string>>> Catalog::ColumnTags(const std::string& dataset) {
  absl::MutexLock lock(&mu_);
  FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query("SELECT column_name, tag FROM column_tags WHERE dataset = ? "
                                               "ORDER BY column_name, tag",
                                               {dataset}));
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& r : rows) out[r.Text(0)].push_back(r.Text(1));
  return out;
}

Status Catalog::SetMaskPolicy(const std::string& dataset, ReadPolicy::Mode mode) {
  FW_RETURN_IF_ERROR(GetDataset(dataset).status());
  FW_RETURN_IF_ERROR(Authorize(dataset, Privilege::kAdmin, "set_mask_policy",
                               json{{"mask", MaskModeName(mode)}}.dump()));
  absl::MutexLock lock(&mu_);
  return db_->Exec(
      "INSERT INTO policies (dataset, mask, salt) VALUES (?, ?, ?) ON CONFLICT (dataset) DO UPDATE SET mask = "
      "excluded.mask",
      {dataset, MaskModeName(mode), NewSalt()});
}

Result<ReadPolicy> Catalog::ReadPolicyFor(const std::string& dataset) {
  // The policy (and its salt) is for readers of the dataset only.
  FW_ASSIGN_OR_RETURN(bool may_read, HasPrivilege(principal_, dataset, Privilege::kRead));
  if (!may_read) {
    return absl::PermissionDeniedError(
        absl::StrCat("principal '", principal_, "' lacks READ on '", dataset, "'"));
  }
  FW_ASSIGN_OR_RETURN(PrincipalInfo me, GetPrincipal(principal_));
  FW_ASSIGN_OR_RETURN(auto tags, ColumnTags(dataset));
  ReadPolicy policy;
  if (me.admin || tags.empty()) return policy;
  {
    absl::MutexLock lock(&mu_);
    FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query("SELECT mask, salt FROM policies WHERE dataset = ?", {dataset}));
    if (rows.empty()) {
      // A salt is fixed the first time it is needed, so hashes stay stable
      // (joinable) across reads; ON CONFLICT keeps a concurrent winner's.
      FW_RETURN_IF_ERROR(db_->Exec("INSERT INTO policies (dataset, mask, salt) VALUES (?, 'hash', ?) "
                                   "ON CONFLICT DO NOTHING",
                                   {dataset, NewSalt()}));
      FW_ASSIGN_OR_RETURN(rows, db_->Query("SELECT mask, salt FROM policies WHERE dataset = ?", {dataset}));
    }
    FW_ASSIGN_OR_RETURN(policy.mode, ParseMaskMode(rows.at(0).Text(0)));
    policy.salt = rows.at(0).Text(1);
  }
  for (const auto& [column, column_tags] : tags) {
    ReadPolicy::Column c{column, {}};
    for (const auto& t : column_tags) {
      if (std::find(me.clearances.begin(), me.clearances.end(), t) == me.clearances.end()) c.tags.push_back(t);
    }
    if (!c.tags.empty()) policy.columns.push_back(std::move(c));
  }
  return policy;
}

Status Catalog::SetRetention(const std::string& dataset, int64_t keep_versions, int64_t keep_days) {
  if (keep_versions < 0 || keep_days < 0) return absl::InvalidArgumentError("retention: counts must be >= 0");
  FW_RETURN_IF_ERROR(GetDataset(dataset).status());
  FW_RETURN_IF_ERROR(Authorize(dataset, Privilege::kAdmin, "set_retention",
                               json{{"keep_versions", keep_versions}, {"keep_days", keep_days}}.dump()));
  absl::MutexLock lock(&mu_);
  return db_->Exec(
      "INSERT INTO policies (dataset, mask, salt, keep_versions, keep_days) VALUES (?, 'hash', ?, ?, ?) "
      "ON CONFLICT (dataset) DO UPDATE SET keep_versions = excluded.keep_versions, keep_days = excluded.keep_days",
      {dataset, NewSalt(), keep_versions, keep_days});
}

Result<std::map<std::string, std::pair<int64_t, int64_t>>> Catalog::RetentionPolicies() {
  absl::MutexLock lock(&mu_);
  FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query("SELECT dataset, keep_versions, keep_days FROM policies WHERE "
                                               "keep_versions > 0 OR keep_days > 0 ORDER BY dataset"));
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  for (const auto& r : rows) out[r.Text(0)] = {r.Int(1), r.Int(2)};
  return out;
}

}  // namespace flywheel::catalog
