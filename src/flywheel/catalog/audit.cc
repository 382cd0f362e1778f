// The audit log: an append-only chain where each event's hash covers the
// previous event's hash and its own fields, so editing, removing, inserting
// or reordering any event breaks the chain from there on. docs/catalog.md,
// "Audit".
#include <openssl/evp.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "flywheel/catalog/catalog.h"
#include "flywheel/catalog/internal/common.h"
#include "flywheel/catalog/sql.h"

namespace flywheel::catalog {
namespace {

using internal_catalog::NowMs;

// Serialises anchor updates between the catalogs of one process: the anchor
// is a file, which no catalog member can guard.
ABSL_CONST_INIT absl::Mutex g_anchor_mu(absl::kConstInit);

// Moves the anchor file at `path` forward to event `seq` (never back).
Status AdvanceAnchor(const std::string& path, int64_t seq, const std::string& hash)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_anchor_mu);

// Each field is length-prefixed so no two different events hash the same
// bytes.
std::string EventHash(const AuditEvent& e) {
  std::string buf;
  auto add = [&](std::string_view s) {
    absl::StrAppend(&buf, s.size(), ":");
    buf.append(s.data(), s.size());
  };
  add("flywheel.audit.v1");
  add(e.prev_hash);
  add(std::to_string(e.seq));
  add(std::to_string(e.time_ms));
  add(e.principal);
  add(e.action);
  add(e.object);
  add(e.detail_json);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(buf.data(), buf.size(), md, &len, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[md[i] >> 4];
    hex += kHex[md[i] & 15];
  }
  return hex;
}

AuditEvent FromRow(const SqlRow& r) {
  return AuditEvent{r.Int(0), r.Int(1), r.Text(2), r.Text(3), r.Text(4), r.Text(5), r.Text(6), r.Text(7)};
}
constexpr const char* kColumns = "seq, time_ms, principal, action, object, detail, prev_hash, hash";

Status AdvanceAnchor(const std::string& path, int64_t seq, const std::string& hash) {
  int64_t current = 0;
  if (std::FILE* f = std::fopen(path.c_str(), "r")) {
    long long at = 0;
    if (std::fscanf(f, "%lld", &at) == 1) current = at;
    std::fclose(f);
  }
  if (seq <= current) return absl::OkStatus();
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return absl::UnavailableError(absl::StrCat("audit anchor ", path, ": cannot write"));
  std::fprintf(f, "%lld %s\n", static_cast<long long>(seq), hash.c_str());
  const bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  std::fclose(f);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("audit anchor ", path, ": cannot update"));
  }
  return absl::OkStatus();
}


}  // namespace

Status Catalog::Audit(const std::string& action, const std::string& object, const std::string& detail_json) {
  absl::MutexLock lock(&mu_);
  AuditEvent appended;
  // Exclusive: the next event must extend the latest one.
  FW_RETURN_IF_ERROR(db_->InTransaction(TxnMode::kExclusive, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> Status {
    FW_ASSIGN_OR_RETURN(SqlRows last, db_->Query("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1"));
    AuditEvent e;
    e.seq = last.empty() ? 1 : last[0].Int(0) + 1;
    e.prev_hash = last.empty() ? "" : last[0].Text(1);
    e.time_ms = NowMs();
    e.principal = principal_;
    e.action = action;
    e.object = object;
    e.detail_json = detail_json.empty() ? "{}" : detail_json;
    e.hash = EventHash(e);
    appended = e;
    return db_->Exec(absl::StrCat("INSERT INTO audit (", kColumns, ") VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
                     {e.seq, e.time_ms, e.principal, e.action, e.object, e.detail_json, e.prev_hash, e.hash});
  }));
  if (!options_.audit_anchor.empty()) {
    // After the commit, so the anchor never names an event that is not
    // stored. Concurrent appenders may leave it a few events behind; it
    // must never be ahead, so an older anchor never overwrites a newer one.
    absl::MutexLock anchor_lock(&g_anchor_mu);
    FW_RETURN_IF_ERROR(AdvanceAnchor(options_.audit_anchor, appended.seq, appended.hash));
  }
  return absl::OkStatus();
}

Result<std::vector<AuditEvent>> Catalog::AuditEvents(int64_t after_seq, int64_t limit) {
  FW_ASSIGN_OR_RETURN(const bool admin, HasPrivilege(principal_, "*", Privilege::kAdmin));
  if (!admin) {
    FW_RETURN_IF_ERROR(Audit("audit_read", "*", R"({"privilege": "ADMIN", "denied": true})"));
    return absl::PermissionDeniedError(absl::StrCat("principal '", principal_,
                                                    "' lacks ADMIN on the catalog, which reading the audit log needs "
                                                    "(its events name keys, e.g. erased users)"));
  }
  return ReadAuditEvents(after_seq, limit);
}

Result<std::vector<AuditEvent>> Catalog::ReadAuditEvents(int64_t after_seq, int64_t limit) {
  absl::MutexLock lock(&mu_);
  FW_ASSIGN_OR_RETURN(SqlRows rows, db_->Query(absl::StrCat("SELECT ", kColumns,
                                                            " FROM audit WHERE seq > ? ORDER BY seq LIMIT ?"),
                                               {after_seq, limit}));
  std::vector<AuditEvent> out;
  for (const auto& r : rows) out.push_back(FromRow(r));
  return out;
}

Result<AuditVerifyResult> Catalog::VerifyAudit() {
  AuditVerifyResult res;
  std::string prev;
  int64_t expect = 1;
  // Pages in storage order of seq; a reordered event shows as a chain break
  // (its prev_hash no longer names its predecessor).
  while (true) {
    FW_ASSIGN_OR_RETURN(std::vector<AuditEvent> page, ReadAuditEvents(expect - 1, 10000));
    if (page.empty()) break;
    for (const AuditEvent& e : page) {
      auto fail = [&](std::string problem) {
        res.ok = false;
        res.first_bad_seq = expect;
        res.problem = std::move(problem);
      };
      if (e.seq != expect) {
        fail(absl::StrCat("event ", expect, " is missing (the next stored event is ", e.seq, ")"));
      } else if (e.prev_hash != prev) {
        fail(absl::StrCat("event ", e.seq, " does not follow event ", e.seq - 1,
                          " (removed, inserted or reordered events)"));
      } else if (EventHash(e) != e.hash) {
        fail(absl::StrCat("event ", e.seq, " was edited (its hash does not match its contents)"));
      }
      if (!res.ok) return res;
      prev = e.hash;
      ++expect;
      ++res.events;
    }
  }
  // Rows the walk above cannot reach (a sequence number <= 0) are
  // insertions too.
  {
    absl::MutexLock lock(&mu_);
    FW_ASSIGN_OR_RETURN(SqlRows all, db_->Query("SELECT count(*), coalesce(min(seq), 1) FROM audit"));
    if (all.at(0).Int(0) != res.events) {
      res.ok = false;
      res.first_bad_seq = all.at(0).Int(1);
      res.problem = absl::StrCat(all.at(0).Int(0) - res.events, " stored event(s) are outside the chain (sequence ",
                                 all.at(0).Int(1), ")");
      return res;
    }
  }
  res.head_hash = prev;
  // The anchor outside the database: the chain must still hold the event it
  // names (it may be behind the head, never past it).
  if (!options_.audit_anchor.empty()) {
    if (std::FILE* f = std::fopen(options_.audit_anchor.c_str(), "r")) {
      long long seq = 0;
      char hash[80] = {0};
      const bool parsed = std::fscanf(f, "%lld %79s", &seq, hash) == 2;
      std::fclose(f);
      res.anchored = true;
      if (!parsed) {
        res.ok = false;
        res.problem = absl::StrCat("the audit anchor ", options_.audit_anchor, " is unreadable");
      } else if (seq > res.events) {
        res.ok = false;
        res.first_bad_seq = res.events + 1;
        res.problem = absl::StrCat("events ", res.events + 1, "..", seq, " were removed from the end (the anchor ",
                                   options_.audit_anchor, " records event ", seq, ")");
      } else if (seq > 0) {
        FW_ASSIGN_OR_RETURN(std::vector<AuditEvent> at, ReadAuditEvents(seq - 1, 1));
        if (at.empty() || at[0].hash != hash) {
          res.ok = false;
          res.first_bad_seq = seq;
          res.problem = absl::StrCat("event ", seq, " differs from the one the anchor ", options_.audit_anchor,
                                     " recorded (the chain was rewritten)");
        }
      }
    }
  }
  return res;
}

}  // namespace flywheel::catalog
