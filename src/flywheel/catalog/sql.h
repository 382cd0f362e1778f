// A minimal SQL connection interface with two backends: SQLite (the embedded
// default) and PostgreSQL (libpq). The catalog is written once against it, in
// the SQL both dialects share, so both backends have the same schema and
// behaviour (docs/catalog.md).
//
// Statements use `?` placeholders and every value is bound as a parameter:
// no caller ever splices a name or value into SQL text. Results come back as
// text cells (NULL = std::nullopt), which is what both wire formats give.
//
// Thread-safety: one SqlDb is one connection and is not thread-safe; the
// owner (Catalog) serialises calls. Use one SqlDb per thread or process.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::catalog {

// A bound parameter: NULL, an integer, a double or text.
using SqlValue = std::variant<std::monostate, int64_t, double, std::string>;

struct SqlRow {
  std::vector<std::optional<std::string>> cells;

  bool IsNull(size_t i) const { return !cells.at(i).has_value(); }
  // The cell as text ("" when NULL).
  const std::string& Text(size_t i) const;
  // The cell as an integer (0 when NULL). Booleans read as 0/1 in both
  // backends because the schema stores them as integers.
  int64_t Int(size_t i) const;
};
using SqlRows = std::vector<SqlRow>;

enum class TxnMode {
  // Reads only.
  kRead,
  // Writes that may run beside other writers (PostgreSQL: READ COMMITTED).
  kWrite,
  // Writes that must see and extend the latest state exclusively (the audit
  // chain): PostgreSQL takes a transaction-scoped advisory lock; SQLite's
  // write transactions are exclusive already.
  kExclusive,
};

class SqlDb {
 public:
  virtual ~SqlDb() = default;

  // "sqlite" or "postgresql".
  virtual std::string_view dialect() const = 0;

  // Runs one statement with `?` placeholders bound to `params` and returns
  // its rows (none for statements without results). Errors name the backend
  // and carry its message; a violated unique or primary key constraint is
  // AlreadyExists.
  virtual Result<SqlRows> Query(std::string_view sql, const std::vector<SqlValue>& params = {}) = 0;

  Status Exec(std::string_view sql, const std::vector<SqlValue>& params = {}) {
    return Query(sql, params).status();
  }

  // Runs several statements without parameters (schema migrations).
  virtual Status ExecScript(std::string_view sql) = 0;

  // Runs `fn` in a transaction: commits when it returns OK, rolls back
  // otherwise. Transient conflicts (SQLite busy beyond the busy timeout,
  // PostgreSQL serialization failures and deadlocks) roll back and retry `fn`
  // with backoff, up to a deadline of a minute; `fn` must therefore only
  // touch the database and its own locals. Not reentrant.
  virtual Status InTransaction(TxnMode mode, const std::function<Status()>& fn) = 0;
};

// Opens (creating if absent) the SQLite database at `path` in WAL mode with
// a busy timeout, foreign keys on.
Result<std::unique_ptr<SqlDb>> OpenSqlite(const std::string& path);

// Connects to PostgreSQL. `conninfo` is a libpq connection string or URI
// ("postgresql://user@/db?host=/tmp/sock", "host=127.0.0.1 port=5432 ...").
Result<std::unique_ptr<SqlDb>> OpenPostgres(const std::string& conninfo);

namespace internal_catalog {
// Rewrites `?` placeholders as $1, $2, ... for PostgreSQL, leaving `?`
// inside string literals, quoted identifiers and comments alone.
std::string NumberPlaceholders(std::string_view sql);
}  // namespace internal_catalog

}  // namespace flywheel::catalog
