// Error helpers shared by the item selectors, so that every selector reports
// the same codes with messages that name the selector and the key.
//
// Thread-safety: stateless.
#pragma once

#include <cmath>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "flywheel/base/status.h"
#include "flywheel/replay/selectors/interface.h"

namespace flywheel::replay::internal_selectors {

// `selector` is the selector's Describe() string.
inline Status KeyExistsError(std::string_view selector, ItemKey key) {
  return absl::AlreadyExistsError(
      absl::StrCat(AsAbsl(selector), ": cannot insert key ", key, ": key already present"));
}

// `op` is the operation, e.g. "delete" or "update".
inline Status KeyNotFoundError(std::string_view selector, std::string_view op, ItemKey key) {
  return absl::NotFoundError(
      absl::StrCat(AsAbsl(selector), ": cannot ", AsAbsl(op), " key ", key, ": key not found"));
}

inline Status EmptyError(std::string_view selector) {
  return absl::FailedPreconditionError(
      absl::StrCat(AsAbsl(selector), ": cannot sample: the selector holds no keys"));
}

// OK if `priority` is finite and >= 0, InvalidArgument otherwise. Every
// selector checks, even those that ignore priorities, so that bad input is
// refused whatever selectors a table was configured with.
inline Status CheckPriority(std::string_view selector, ItemKey key, double priority) {
  if (std::isfinite(priority) && priority >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(AsAbsl(selector), ": key ", key, " has priority ",
                                                 priority, "; priorities must be finite and >= 0"));
}

}  // namespace flywheel::replay::internal_selectors
