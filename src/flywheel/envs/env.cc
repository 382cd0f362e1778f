#include "flywheel/envs/env.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace flywheel::envs {

double KwargReader::Get(const std::string& name, double default_value, bool positive) {
  absl::StrAppend(&known_, known_.empty() ? "" : ", ", name);
  auto it = kwargs_.find(name);
  if (it == kwargs_.end()) return default_value;
  ++used_;
  const double v = it->second;
  if (error_.empty() && (!std::isfinite(v) || (positive && !(v > 0)))) {
    error_ = absl::StrCat(name, " must be ", positive ? "finite and > 0" : "finite", ", got ", v);
  }
  return v;
}

Status KwargReader::Finish() const {
  if (!error_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(AsAbsl(env_id_), ": ", error_));
  }
  if (used_ == kwargs_.size()) return absl::OkStatus();
  for (const auto& [name, value] : kwargs_) {
    if (absl::StrCat(", ", known_, ",").find(absl::StrCat(", ", name, ",")) == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(AsAbsl(env_id_), ": unknown argument '", name, "' (",
                       known_.empty() ? "it takes none" : absl::StrCat("known: ", known_), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace flywheel::envs
