// Helpers shared by the `flywheel` command groups.
#pragma once

#include <cstdint>
#include <string>

#include "flywheel/base/status.h"

namespace flywheel::cli {

// Prints "flywheel: error: <message>" to stderr and returns the exit code:
// 2 bad input, 3 not found, 4 conflict (aborted), 1 anything else.
int Fail(const Status& s);

// Durations like 250ms, 30s, 10m, 2h, 7d (a plain number is seconds), in ms.
Result<int64_t> ParseDurationMs(const std::string& text);

}  // namespace flywheel::cli
