// The error model used at every flywheel C++ boundary.
//
// flywheel returns absl::Status / absl::StatusOr<T> everywhere a call can fail
// (see CONVENTIONS.md, "Errors"). The macros below propagate errors and can
// add context, so the message a user finally sees reads like a path through the
// code: "opening table /d/x at version 7: manifest 7: checksum mismatch".
//
// Thread-safety: everything here is stateless.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace flywheel {

using Status = absl::Status;
template <typename T>
using Result = absl::StatusOr<T>;

// Debian's Abseil has its own string_view type; this converts std's.
inline absl::string_view AsAbsl(std::string_view s) { return {s.data(), s.size()}; }

// Returns `s` with `context + ": "` prepended to its message; OK stays OK.
inline Status Annotate(const Status& s, std::string_view context) {
  if (s.ok() || context.empty()) return s;
  return Status(s.code(), absl::StrCat(AsAbsl(context), ": ", s.message()));
}

}  // namespace flywheel

#define FW_STATUS_CONCAT_INNER_(a, b) a##b
#define FW_STATUS_CONCAT_(a, b) FW_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define FW_RETURN_IF_ERROR(expr)                        \
  do {                                                  \
    ::absl::Status fw_status_ = (expr);                 \
    if (!fw_status_.ok()) return fw_status_;            \
  } while (0)

// Like FW_RETURN_IF_ERROR, prefixing the message with `ctx` (anything
// absl::StrCat accepts, evaluated only on error).
#define FW_RETURN_IF_ERROR_CTX(expr, ...)                                              \
  do {                                                                                 \
    ::absl::Status fw_status_ = (expr);                                                \
    if (!fw_status_.ok())                                                              \
      return ::flywheel::Annotate(fw_status_, ::absl::StrCat(__VA_ARGS__));            \
  } while (0)

// `FW_ASSIGN_OR_RETURN(auto x, Foo());` assigns the value or returns the error.
#define FW_ASSIGN_OR_RETURN(lhs, expr) \
  FW_ASSIGN_OR_RETURN_IMPL_(FW_STATUS_CONCAT_(fw_statusor_, __LINE__), lhs, expr, )

// Like FW_ASSIGN_OR_RETURN, prefixing the error message with the context.
#define FW_ASSIGN_OR_RETURN_CTX(lhs, expr, ...) \
  FW_ASSIGN_OR_RETURN_IMPL_(FW_STATUS_CONCAT_(fw_statusor_, __LINE__), lhs, expr, __VA_ARGS__)

#define FW_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr, ...)                                  \
  auto tmp = (expr);                                                                    \
  if (!tmp.ok()) {                                                                      \
    return ::flywheel::Annotate(tmp.status(), ::absl::StrCat(__VA_ARGS__));             \
  }                                                                                     \
  lhs = std::move(tmp).value()
