// The error model used at every flywheel C++ boundary.
//
// flywheel returns absl::Status / absl::StatusOr<T> everywhere a call can fail
// (see CONVENTIONS.md, "Errors"). The macros below propagate errors and can
// add context, so the message a user finally sees reads like a path through the
// code: "opening table /d/x at version 7: manifest 7: checksum mismatch".
//
// Thread-safety: everything here is stateless.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace flywheel {

// absl::Status, marked [[nodiscard]]: a call whose Status is dropped does
// not compile (our code builds with -Werror). absl::Status is final, so this
// holds one; it converts both ways, implicitly, and forwards absl::Status's
// members. Drop one on purpose with `.IgnoreError()`.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(const absl::Status& s) : s_(s) {}        // NOLINT(google-explicit-constructor)
  Status(absl::Status&& s) : s_(std::move(s)) {}  // NOLINT(google-explicit-constructor)
  Status(absl::StatusCode code, absl::string_view msg) : s_(code, msg) {}
  operator const absl::Status&() const& { return s_; }  // NOLINT(google-explicit-constructor)
  operator absl::Status() && { return std::move(s_); }  // NOLINT(google-explicit-constructor)

  bool ok() const { return s_.ok(); }
  absl::StatusCode code() const { return s_.code(); }
  int raw_code() const { return s_.raw_code(); }
  absl::string_view message() const { return s_.message(); }
  std::string ToString() const { return s_.ToString(); }
  void IgnoreError() const {}
  void Update(const Status& other) { s_.Update(other.s_); }
  const absl::Status& absl() const { return s_; }

  friend bool operator==(const Status& a, const Status& b) { return a.s_ == b.s_; }
  friend bool operator==(const Status& a, const absl::Status& b) { return a.s_ == b; }
  friend std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.s_; }
  template <typename Sink>
  friend void AbslStringify(Sink& sink, const Status& s) { sink.Append(s.s_.ToString()); }

 private:
  absl::Status s_;
};
// absl::StatusOr<T>, marked [[nodiscard]] as Status is: a call whose Result
// is dropped does not compile. It is an absl::StatusOr (every member and
// constructor), converts from one and from a flywheel::Status, and binds
// where an absl::StatusOr is taken.
template <typename T>
class [[nodiscard]] Result : public absl::StatusOr<T> {
  using Base = absl::StatusOr<T>;

 public:
  using Base::Base;
  Result() = default;
  Result(const Base& r) : Base(r) {}                     // NOLINT(google-explicit-constructor)
  Result(Base&& r) : Base(std::move(r)) {}               // NOLINT(google-explicit-constructor)
  Result(const Status& s) : Base(s.absl()) {}            // NOLINT(google-explicit-constructor)
  Result(Status&& s) : Base(absl::Status(std::move(s))) {}  // NOLINT(google-explicit-constructor)
  // Drops the value or error on purpose.
  void IgnoreError() const {}
};

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
