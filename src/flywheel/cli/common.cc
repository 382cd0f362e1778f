#include "flywheel/cli/common.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace flywheel::cli {

int Fail(const Status& s) {
  std::fprintf(stderr, "flywheel: error: %s\n", std::string(s.message()).c_str());
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: return 2;
    case absl::StatusCode::kNotFound: return 3;
    case absl::StatusCode::kAborted: return 4;
    default: return 1;
  }
}

Result<int64_t> ParseDurationMs(const std::string& text) {
  if (text.empty()) return absl::InvalidArgumentError("empty duration");
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(v) || v > 1e15) {
    return absl::InvalidArgumentError(absl::StrCat("bad duration '", text, "' (use e.g. 30s, 10m, 2h, 7d)"));
  }
  const std::string unit(end);
  double mult = 1000;
  if (unit == "ms") mult = 1;
  else if (unit == "" || unit == "s") mult = 1000;
  else if (unit == "m") mult = 60e3;
  else if (unit == "h") mult = 3600e3;
  else if (unit == "d") mult = 86400e3;
  else return absl::InvalidArgumentError(absl::StrCat("bad duration '", text, "' (use e.g. 30s, 10m, 2h, 7d)"));
  if (v < 0) return absl::InvalidArgumentError(absl::StrCat("negative duration '", text, "'"));
  return static_cast<int64_t>(v * mult);
}

}  // namespace flywheel::cli
