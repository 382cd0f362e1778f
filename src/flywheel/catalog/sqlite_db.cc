// The SQLite backend of SqlDb: one connection, WAL journal, busy timeout,
// write transactions with BEGIN IMMEDIATE so concurrent writers queue on the
// database lock instead of failing on upgrade.
#include <sqlite3.h>

#include <charconv>
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "flywheel/catalog/sql.h"

namespace flywheel::catalog {

const std::string& SqlRow::Text(size_t i) const {
  static const std::string kEmpty;
  const auto& c = cells.at(i);
  return c ? *c : kEmpty;
}

int64_t SqlRow::Int(size_t i) const {
  const auto& c = cells.at(i);
  if (!c || c->empty()) return 0;
  return std::strtoll(c->c_str(), nullptr, 10);
}

namespace {

constexpr int kBusyTimeoutMs = 10000;
constexpr auto kRetryDeadline = std::chrono::seconds(60);

Status SqliteError(sqlite3* db, int rc, std::string_view what) {
  std::string msg = absl::StrCat("sqlite: ", AsAbsl(what), ": ", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  int primary = rc & 0xff;
  if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) return absl::AlreadyExistsError(msg);
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return absl::AbortedError(msg);
  if (primary == SQLITE_CONSTRAINT) return absl::FailedPreconditionError(msg);
  if (primary == SQLITE_CANTOPEN || primary == SQLITE_PERM || primary == SQLITE_READONLY)
    return absl::PermissionDeniedError(msg);
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) return absl::DataLossError(msg);
  return absl::InternalError(msg);
}

class SqliteDb final : public SqlDb {
 public:
  explicit SqliteDb(sqlite3* db) : db_(db) {}
  ~SqliteDb() override { sqlite3_close_v2(db_); }

  std::string_view dialect() const override { return "sqlite"; }

  Result<SqlRows> Query(std::string_view sql, const std::vector<SqlValue>& params) override {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
    if (rc != SQLITE_OK) return SqliteError(db_, rc, "preparing statement");
    std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> guard(stmt, sqlite3_finalize);
    if (static_cast<int>(params.size()) != sqlite3_bind_parameter_count(stmt)) {
      return absl::InvalidArgumentError(absl::StrCat("sqlite: statement has ", sqlite3_bind_parameter_count(stmt),
                                                     " placeholders, ", params.size(), " values given"));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      int idx = static_cast<int>(i) + 1;
      const SqlValue& v = params[i];
      if (std::holds_alternative<std::monostate>(v)) rc = sqlite3_bind_null(stmt, idx);
      else if (auto* n = std::get_if<int64_t>(&v)) rc = sqlite3_bind_int64(stmt, idx, *n);
      else if (auto* d = std::get_if<double>(&v)) rc = sqlite3_bind_double(stmt, idx, *d);
      else {
        const auto& s = std::get<std::string>(v);
        rc = sqlite3_bind_text(stmt, idx, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
      }
      if (rc != SQLITE_OK) return SqliteError(db_, rc, "binding a value");
    }
    SqlRows rows;
    const int ncol = sqlite3_column_count(stmt);
    while (true) {
      rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return SqliteError(db_, sqlite3_extended_errcode(db_), "running statement");
      SqlRow row;
      row.cells.resize(ncol);
      for (int c = 0; c < ncol; ++c) {
        const int type = sqlite3_column_type(stmt, c);
        if (type == SQLITE_NULL) continue;
        if (type == SQLITE_FLOAT) {
          // Shortest text that reads back as the same double (SQLite's own
          // text form keeps only 15 digits).
          char num[32];
          auto res = std::to_chars(num, num + sizeof(num), sqlite3_column_double(stmt, c));
          row.cells[c].emplace(num, res.ptr);
          continue;
        }
        const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
        row.cells[c].emplace(text, static_cast<size_t>(sqlite3_column_bytes(stmt, c)));
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }

  Status ExecScript(std::string_view sql) override {
    std::string script(sql);
    char* err = nullptr;
    int rc = sqlite3_exec(db_, script.c_str(), nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
      std::string msg = err ? err : sqlite3_errstr(rc);
      sqlite3_free(err);
      return absl::InternalError(absl::StrCat("sqlite: running script: ", msg));
    }
    return absl::OkStatus();
  }

  Status InTransaction(TxnMode mode, const std::function<Status()>& fn) override {
    if (in_txn_) return absl::FailedPreconditionError("sqlite: InTransaction is not reentrant");
    const auto deadline = std::chrono::steady_clock::now() + kRetryDeadline;
    std::minstd_rand rng(std::random_device{}());
    int backoff_us = 1000;
    while (true) {
      Status s = Exec(mode == TxnMode::kRead ? "BEGIN DEFERRED" : "BEGIN IMMEDIATE");
      if (s.ok()) {
        in_txn_ = true;
        s = fn();
        in_txn_ = false;
        if (s.ok()) s = Exec("COMMIT");
        if (!s.ok()) (void)Exec("ROLLBACK");
      }
      if (s.ok() || !absl::IsAborted(s) || std::chrono::steady_clock::now() > deadline) return s;
      std::this_thread::sleep_for(std::chrono::microseconds(backoff_us / 2 + rng() % (backoff_us / 2 + 1)));
      backoff_us = std::min(backoff_us * 2, 100000);
    }
  }

 private:
  sqlite3* db_;
  bool in_txn_ = false;
};

}  // namespace

Result<std::unique_ptr<SqlDb>> OpenSqlite(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status s = SqliteError(db, rc, absl::StrCat("opening ", path));
    sqlite3_close_v2(db);
    return s;
  }
  auto out = std::make_unique<SqliteDb>(db);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  sqlite3_extended_result_codes(db, 1);
  // WAL: readers never block the writer; NORMAL sync is durable across
  // process crashes (the catalog's failure model) and much faster than FULL.
  FW_RETURN_IF_ERROR_CTX(out->ExecScript("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"),
                         "opening ", path);
  // Reading the schema fails here, not on first use, when the file is not a database.
  FW_RETURN_IF_ERROR_CTX(out->Exec("SELECT count(*) FROM sqlite_master"), "opening ", path);
  return std::unique_ptr<SqlDb>(std::move(out));
}

}  // namespace flywheel::catalog
