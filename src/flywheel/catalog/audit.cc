// The audit log: an append-only chain where each event's hash covers the
// previous event's hash and its own fields, so editing, removing, inserting
// or reordering any event breaks the chain from there on. docs/catalog.md,
// "Audit".
#include <openssl/evp.h>

#include "absl/strings/str_cat.h"
#include "flywheel/catalog/catalog.h"
#include "flywheel/catalog/internal/common.h"
#include "flywheel/catalog/sql.h"

namespace flywheel::catalog {
namespace {

using internal_catalog::NowMs;

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

}  // namespace

Status Catalog::Audit(const std::string& action, const std::string& object, const std::string& detail_json) {
  std::lock_guard<std::mutex> lock(mu_->mu);
  // Exclusive: the next event must extend the latest one.
  return db_->InTransaction(TxnMode::kExclusive, [&]() -> Status {
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
    return db_->Exec(absl::StrCat("INSERT INTO audit (", kColumns, ") VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
                     {e.seq, e.time_ms, e.principal, e.action, e.object, e.detail_json, e.prev_hash, e.hash});
  });
}

Result<std::vector<AuditEvent>> Catalog::AuditEvents(int64_t after_seq, int64_t limit) {
  std::lock_guard<std::mutex> lock(mu_->mu);
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
    FW_ASSIGN_OR_RETURN(std::vector<AuditEvent> page, AuditEvents(expect - 1, 10000));
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
    std::lock_guard<std::mutex> lock(mu_->mu);
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
  return res;
}

}  // namespace flywheel::catalog
