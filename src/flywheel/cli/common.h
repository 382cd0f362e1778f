// Helpers shared by the `flywheel` command groups.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/base/status.h"
#include "flywheel/catalog/recorder.h"

namespace flywheel::cli {

// Prints "flywheel: error: <message>" to stderr and returns the exit code:
// 2 bad input, 3 not found, 4 conflict (aborted), 1 anything else.
int Fail(const Status& s);

// Durations like 250ms, 30s, 10m, 2h, 7d (a plain number is seconds), in ms.
Result<int64_t> ParseDurationMs(const std::string& text);

// The catalog `--catalog` or FLYWHEEL_CATALOG names, opened on first use;
// nullptr when neither is set (nothing is recorded then).
void SetCatalogSpec(const std::string& spec);
Result<catalog::Catalog*> CliCatalog();

// A table argument: a dataset name when a catalog is configured and knows
// it (or, with `for_create`, a new name placed in the warehouse), else a path.
Result<std::string> TableArgument(const std::string& arg, bool for_create = false);

// Records a finished table write as a catalog run of `job_type`: input the
// version before it (`before` < 1: none), output the table's current version.
// Does nothing without a catalog; a recording failure is a warning, not a
// failed command (the write is committed already).
void RecordTableWrite(const std::string& job_type, const table::Table& after, int64_t before,
                      const std::string& params_json = "{}");

}  // namespace flywheel::cli
