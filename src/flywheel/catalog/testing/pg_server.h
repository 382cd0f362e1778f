// A throwaway PostgreSQL server for tests and benchmarks: a fresh cluster in
// a temporary directory, listening only on a unix socket in that directory
// (no TCP port), stopped and deleted by the destructor.
//
// PostgreSQL refuses to run as root: when the process is root the cluster is
// created and run as the `postgres` account the Debian package creates (the
// directory is handed to it); otherwise as the current user. The binaries
// come from Debian's postgresql package (/usr/lib/postgresql/<v>/bin, or
// FLYWHEEL_PG_BIN).
//
// Thread-safety: not thread-safe; one per test binary.
#pragma once

#include <memory>
#include <string>

#include "flywheel/base/status.h"

namespace flywheel::catalog::testing {

class PgServer {
 public:
  // initdb + pg_ctl start; waits until the server accepts connections
  // (timeout 60 s). Errors name the step that failed and its output.
  static Result<std::unique_ptr<PgServer>> Start();
  ~PgServer();  // pg_ctl stop -m immediate, then removes the directory

  // A libpq connection string for a new, empty database named `db` (created
  // on first use), e.g. "host=/tmp/flywheel-pg-XXXX port=5432 dbname=db user=postgres".
  Result<std::string> CreateDatabase(const std::string& db);

  const std::string& socket_dir() const { return dir_; }

 private:
  PgServer() = default;
  std::string dir_;
  std::string bin_;
  std::string user_;
  int port_ = 5432;
};

// One server for the whole process, started on first use and stopped when
// the process exits; nullptr when it cannot start (the reason in *error).
PgServer* SharedPgServer(std::string* error = nullptr);

// Where a test's catalog lives for `backend`: "sqlite" → `<dir>/root` (a
// directory catalog); "postgresql" → "pg:<conninfo>" of a new database
// (named <db_prefix>_<pid>_<n>) on the shared server.
Result<std::string> CatalogSpecForTest(const std::string& backend, const std::string& dir,
                                       const std::string& db_prefix);

// A fresh directory under the system temp dir, "flywheel-<tag>-XXXXXX".
std::string MakeTempDir(const std::string& tag);

}  // namespace flywheel::catalog::testing
