// The PostgreSQL backend of SqlDb (sql.h), on libpq.
//
// Every statement goes through PQexecParams with its parameters as text and
// unspecified types, so the server infers each parameter's type from where it
// appears, as SQLite's dynamic typing would accept it. Results come back in
// text format, which is what SqlRow holds.
//
// Error codes follow SQLSTATE: 23505 (unique_violation) is AlreadyExists,
// 40001 (serialization_failure) and 40P01 (deadlock_detected) are Aborted and
// retried by InTransaction, other integrity violations (class 23) are
// FailedPrecondition, a lost connection (or class 08) is Unavailable.
#include <libpq-fe.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "flywheel/base/status.h"
#include "flywheel/catalog/sql.h"

namespace flywheel::catalog {

namespace internal_catalog {

namespace {

bool IsIdentChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' ||
         static_cast<unsigned char>(c) >= 0x80;
}

// If sql[i] starts a dollar-quote opening tag ($$ or $tag$), returns the
// tag's length including both dollars; otherwise 0. `$1` (a positional
// parameter) and `a$b` (an identifier) are not tags.
size_t DollarTagLength(std::string_view sql, size_t i) {
  if (i > 0 && IsIdentChar(sql[i - 1])) return 0;
  size_t j = i + 1;
  if (j < sql.size() && absl::ascii_isdigit(static_cast<unsigned char>(sql[j]))) return 0;
  while (j < sql.size() && sql[j] != '$' && IsIdentChar(sql[j])) ++j;
  if (j < sql.size() && sql[j] == '$') return j + 1 - i;
  return 0;
}

}  // namespace

// Copies everything but bare `?` through unchanged. The quoted forms skipped
// are PostgreSQL's: '...' with '' (and, in E'...', backslash escapes),
// "..." with "", $tag$...$tag$, -- to end of line and nested /* */. An
// unterminated one runs to the end of the text; the server reports it.
std::string NumberPlaceholders(std::string_view sql) {
  std::string out;
  out.reserve(sql.size() + 16);
  int next = 1;
  size_t i = 0;
  const size_t n = sql.size();
  // Copies sql[from, to) to out and moves i to `to`.
  auto copy_to = [&](size_t from, size_t to) {
    to = std::min(to, n);
    out.append(sql.substr(from, to - from));
    i = to;
  };
  while (i < n) {
    const char c = sql[i];
    if (c == '?') {
      absl::StrAppend(&out, "$", next++);
      ++i;
    } else if (c == '\'') {
      // E'...' (escape string syntax) lets a backslash quote the next char.
      const bool backslash_escapes =
          i > 0 && (sql[i - 1] == 'E' || sql[i - 1] == 'e') && (i < 2 || !IsIdentChar(sql[i - 2]));
      size_t j = i + 1;
      while (j < n) {
        if (backslash_escapes && sql[j] == '\\') {
          j += 2;
        } else if (sql[j] == '\'') {
          if (j + 1 < n && sql[j + 1] == '\'') {
            j += 2;
          } else {
            ++j;
            break;
          }
        } else {
          ++j;
        }
      }
      copy_to(i, j);
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < n) {
        if (sql[j] == '"') {
          if (j + 1 < n && sql[j + 1] == '"') {
            j += 2;
            continue;
          }
          ++j;
          break;
        }
        ++j;
      }
      copy_to(i, j);
    } else if (c == '-' && i + 1 < n && sql[i + 1] == '-') {
      const size_t eol = sql.find('\n', i);
      copy_to(i, eol == std::string_view::npos ? n : eol + 1);
    } else if (c == '/' && i + 1 < n && sql[i + 1] == '*') {
      // PostgreSQL's block comments nest.
      int depth = 1;
      size_t j = i + 2;
      while (j < n && depth > 0) {
        if (sql[j] == '/' && j + 1 < n && sql[j + 1] == '*') {
          ++depth;
          j += 2;
        } else if (sql[j] == '*' && j + 1 < n && sql[j + 1] == '/') {
          --depth;
          j += 2;
        } else {
          ++j;
        }
      }
      copy_to(i, j);
    } else if (c == '$' && DollarTagLength(sql, i) > 0) {
      const std::string_view tag = sql.substr(i, DollarTagLength(sql, i));
      const size_t close = sql.find(tag, i + tag.size());
      copy_to(i, close == std::string_view::npos ? n : close + tag.size());
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

}  // namespace internal_catalog

namespace {

// The key of the advisory lock kExclusive transactions hold: an arbitrary
// constant ("flywheel" in ASCII, less its top bit) that other users of the
// database are unlikely to pick.
constexpr int64_t kExclusiveLockKey = 0x666c797768656c;

// InTransaction's retry policy for transient conflicts.
constexpr auto kFirstBackoff = std::chrono::milliseconds(1);
constexpr auto kMaxBackoff = std::chrono::milliseconds(100);
constexpr auto kRetryDeadline = std::chrono::seconds(60);

// connect_timeout (seconds) when the connection string names none.
constexpr const char* kDefaultConnectTimeout = "30";

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

std::string Trimmed(const char* msg) {
  if (msg == nullptr) return "";
  return std::string(absl::StripAsciiWhitespace(msg));
}

// `conninfo` with any password left out, for error messages. Parsing can
// fail only for a malformed string, whose text may hold anything; it is then
// not shown at all.
std::string RedactConninfo(const std::string& conninfo) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (err != nullptr) PQfreemem(err);
  if (opts == nullptr) return "<malformed connection string>";
  std::string out;
  for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || std::strcmp(o->keyword, "password") == 0) continue;
    if (!out.empty()) out.push_back(' ');
    absl::StrAppend(&out, o->keyword, "=");
    const std::string_view val = o->val;
    const bool plain = !val.empty() && val.find_first_of(" '\\") == std::string_view::npos;
    if (plain) {
      out.append(val);
    } else {
      out.push_back('\'');
      for (char ch : val) {
        if (ch == '\'' || ch == '\\') out.push_back('\\');
        out.push_back(ch);
      }
      out.push_back('\'');
    }
  }
  PQconninfoFree(opts);
  return out;
}

// The error of a failed command: `res` is its result, or null when libpq
// could not even send it.
Status PgError(PGconn* conn, const PGresult* res) {
  std::string message = absl::StrCat(
      "postgresql: ", Trimmed(res != nullptr ? PQresultErrorMessage(res) : PQerrorMessage(conn)));
  if (res != nullptr && PQresultErrorMessage(res)[0] == '\0') {
    absl::StrAppend(&message, "unexpected result status ", PQresStatus(PQresultStatus(res)));
  }
  const char* state = res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  const std::string_view sqlstate = state != nullptr ? state : "";
  if (sqlstate == "23505") return absl::AlreadyExistsError(message);
  if (sqlstate == "40001" || sqlstate == "40P01") return absl::AbortedError(message);
  // Other integrity constraints (foreign key, not null, check), as SQLite's
  // backend maps SQLITE_CONSTRAINT.
  if (sqlstate.substr(0, 2) == "23") return absl::FailedPreconditionError(message);
  if (PQstatus(conn) == CONNECTION_BAD || sqlstate.substr(0, 2) == "08") {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

std::string FormatParam(const SqlValue& v) {
  char buf[64];
  if (const int64_t* i = std::get_if<int64_t>(&v)) {
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), *i);
    return std::string(buf, end);
  }
  if (const double* d = std::get_if<double>(&v)) {
    // Shortest text that reads back as the same double; PostgreSQL's float8
    // input accepts the "inf", "-inf" and "nan" this gives for non-finite values.
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), *d);
    return std::string(buf, end);
  }
  return std::get<std::string>(v);
}

class PostgresDb final : public SqlDb {
 public:
  explicit PostgresDb(PGconn* conn) : conn_(conn) {}
  ~PostgresDb() override { PQfinish(conn_); }

  std::string_view dialect() const override { return "postgresql"; }

  Result<SqlRows> Query(std::string_view sql, const std::vector<SqlValue>& params) override {
    const std::string text = internal_catalog::NumberPlaceholders(sql);
    std::vector<std::string> storage(params.size());
    std::vector<const char*> values(params.size(), nullptr);
    for (size_t i = 0; i < params.size(); ++i) {
      if (std::holds_alternative<std::monostate>(params[i])) continue;
      storage[i] = FormatParam(params[i]);
      values[i] = storage[i].c_str();
    }
    PgResult res(PQexecParams(conn_, text.c_str(), static_cast<int>(params.size()),
                              /*paramTypes=*/nullptr, values.data(), /*paramLengths=*/nullptr,
                              /*paramFormats=*/nullptr, /*resultFormat=*/0));
    return Rows(res.get());
  }

  Status ExecScript(std::string_view sql) override {
    const std::string text(sql);
    PgResult res(PQexec(conn_, text.c_str()));
    return Rows(res.get()).status();
  }

  Status InTransaction(TxnMode mode, const std::function<Status()>& fn) override {
    if (in_transaction_) {
      return absl::FailedPreconditionError(
          "postgresql: InTransaction called inside a transaction (it is not reentrant)");
    }
    const auto deadline = std::chrono::steady_clock::now() + kRetryDeadline;
    auto backoff = std::chrono::duration_cast<std::chrono::microseconds>(kFirstBackoff);
    for (int attempt = 1;; ++attempt) {
      in_transaction_ = true;
      Status s = RunTransaction(mode, fn);
      in_transaction_ = false;
      if (s.ok() || !absl::IsAborted(s)) return s;
      // A random sleep in [backoff/2, backoff] keeps colliding writers apart.
      std::uniform_int_distribution<int64_t> jitter(backoff.count() / 2, backoff.count());
      const auto sleep = std::chrono::microseconds(jitter(rng_));
      if (std::chrono::steady_clock::now() + sleep > deadline) {
        return Annotate(s, absl::StrCat("postgresql: transaction still conflicting after ", attempt,
                                        " attempts in ", kRetryDeadline.count(), " s"));
      }
      std::this_thread::sleep_for(sleep);
      backoff = std::min<std::chrono::microseconds>(backoff * 2, kMaxBackoff);
    }
  }

  // Called once after connecting.
  Status Configure() {
    PQsetNoticeProcessor(
        conn_, [](void*, const char*) {}, nullptr);
    if (PQsetClientEncoding(conn_, "UTF8") != 0) return PgError(conn_, nullptr);
    return ExecScript("SET client_min_messages = warning");
  }

 private:
  // The rows of a finished command, or its error.
  Result<SqlRows> Rows(const PGresult* res) {
    if (res == nullptr) return PgError(conn_, nullptr);
    switch (PQresultStatus(res)) {
      case PGRES_COMMAND_OK:
      case PGRES_EMPTY_QUERY:
        return SqlRows{};
      case PGRES_TUPLES_OK:
        break;
      default:
        return PgError(conn_, res);
    }
    const int nrows = PQntuples(res);
    const int ncols = PQnfields(res);
    SqlRows rows(static_cast<size_t>(nrows));
    for (int r = 0; r < nrows; ++r) {
      std::vector<std::optional<std::string>>& cells = rows[r].cells;
      cells.resize(static_cast<size_t>(ncols));
      for (int c = 0; c < ncols; ++c) {
        if (PQgetisnull(res, r, c)) continue;
        cells[c].emplace(PQgetvalue(res, r, c), static_cast<size_t>(PQgetlength(res, r, c)));
      }
    }
    return rows;
  }

  // One attempt: BEGIN, fn, COMMIT; rolls back whatever fails.
  Status RunTransaction(TxnMode mode, const std::function<Status()>& fn) {
    // kRead uses a plain BEGIN, not READ ONLY, as SQLite's deferred
    // transactions do not refuse writes either: both backends behave alike.
    FW_RETURN_IF_ERROR(ExecScript("BEGIN"));
    Status s;
    if (mode == TxnMode::kExclusive) {
      s = Exec(absl::StrCat("SELECT pg_advisory_xact_lock(", kExclusiveLockKey, ")"));
    }
    if (s.ok()) s = fn();
    if (s.ok() && PQtransactionStatus(conn_) == PQTRANS_INERROR) {
      // fn returned OK after a statement failed: the server has aborted the
      // transaction and COMMIT would quietly roll it back.
      s = absl::FailedPreconditionError(
          "postgresql: the transaction function returned OK after a statement in it failed");
    }
    if (s.ok()) {
      PgResult res(PQexec(conn_, "COMMIT"));
      s = Rows(res.get()).status();
      if (s.ok() && std::string_view(PQcmdStatus(res.get())) != "COMMIT") {
        s = absl::InternalError(
            absl::StrCat("postgresql: COMMIT ended as ", PQcmdStatus(res.get())));
      }
      if (s.ok()) return s;
    }
    // A failed COMMIT has ended the transaction already.
    const PGTransactionStatusType ts = PQtransactionStatus(conn_);
    if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR) {
      Status rollback = ExecScript("ROLLBACK");
      if (!rollback.ok()) {
        return Annotate(s, absl::StrCat("(and ROLLBACK failed: ", rollback.message(), ")"));
      }
    }
    return s;
  }

  PGconn* const conn_;
  bool in_transaction_ = false;
  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace

Result<std::unique_ptr<SqlDb>> OpenPostgres(const std::string& conninfo) {
  // The connection string is expanded in place of `dbname`; what it sets
  // overrides the defaults listed before it.
  const char* const keywords[] = {"connect_timeout", "dbname", nullptr};
  const char* const values[] = {kDefaultConnectTimeout, conninfo.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
  if (conn == nullptr) {
    return absl::ResourceExhaustedError("postgresql: out of memory allocating a connection");
  }
  auto db = std::make_unique<PostgresDb>(conn);
  if (PQstatus(conn) != CONNECTION_OK) {
    return absl::UnavailableError(absl::StrCat("postgresql: connecting to \"",
                                               RedactConninfo(conninfo),
                                               "\": ", Trimmed(PQerrorMessage(conn))));
  }
  FW_RETURN_IF_ERROR(db->Configure());
  return std::unique_ptr<SqlDb>(std::move(db));
}

}  // namespace flywheel::catalog
