// Helpers shared by the `flywheel` command groups.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/catalog/recorder.h"

namespace flywheel::catalog {
class ReadGuard;
}  // namespace flywheel::catalog

namespace flywheel::cli {

// Prints "flywheel: error: <message>" to stderr and returns the exit code:
// 2 bad input, 3 not found, 4 conflict (aborted), 6 permission denied (5 is
// `audit verify` finding a tampered log), 1 anything else.
int Fail(const Status& s);

// Durations like 250ms, 30s, 10m, 2h, 7d (a plain number is seconds), in ms.
Result<int64_t> ParseDurationMs(const std::string& text);

// The catalog `--catalog` or FLYWHEEL_CATALOG names, opened on first use;
// nullptr when neither is set (nothing is recorded then).
void SetCatalogSpec(const std::string& spec);
Result<catalog::Catalog*> CliCatalog();

// A table argument (a dataset name when a catalog is configured and knows it,
// or with `for_create` a new name placed in the warehouse; else a path),
// checked for `p`, audited as `action`.
Result<std::string> AuthorizedTable(const std::string& arg, catalog::Privilege p, const std::string& action,
                                    bool for_create = false);

// The catalog's column rules for the principal reading `t`
// (catalog/read_policy.h): reads mask or refuse with it as the Python API
// and the Loader do; exports refuse. Without a catalog: an empty guard.
Result<std::shared_ptr<const catalog::ReadGuard>> ReadGuardFor(const table::Table& t);

void RecordTableWrite(const std::string& job_type, const table::Table& after, int64_t before,
                      const std::string& params_json = "{}");

// The interpreter `flywheel run` starts the learner with by default: the
// python3 beside this executable (a pip-installed CLI in an environment's
// bin/), else the interpreter the build was configured for (FLYWHEEL_PYTHON).
std::string DefaultPython();

}  // namespace flywheel::cli
