// The one mapping from absl::Status to Python exceptions (CONVENTIONS.md,
// "Errors" and "Python bindings").
//
// Binding code throws StatusError (via ThrowIfError / ValueOrThrow) and never
// builds Python exceptions itself; a translator registered by RegisterStatus
// turns it into the Python type for its code:
//
//   InvalidArgument  -> ValueError
//   NotFound         -> FileNotFoundError (missing table, version, tag, file)
//   OutOfRange       -> IndexError
//   AlreadyExists    -> FileExistsError
//   PermissionDenied -> PermissionError
//   Aborted          -> flywheel.CommitConflict (a RuntimeError subclass)
//   DeadlineExceeded -> TimeoutError (a blocking replay call timed out; the
//                       message holds the table's explanation)
//   Cancelled        -> flywheel.replay.Cancelled (a RuntimeError subclass;
//                       the replay table was closed)
//   anything else    -> RuntimeError
//
// A column name the schema lacks is reported as KeyError by the binding
// before the C++ call (see table.cc, ColumnError), so NotFound from the
// library always means a missing path, version or tag.
//
// StatusError may be thrown while the GIL is released: it carries only C++
// data, and the translator runs after pybind11 has re-acquired the GIL.
//
// Thread-safety: stateless after RegisterStatus.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "flywheel/base/status.h"

namespace flywheel::python {

class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const Status& s)
      : std::runtime_error(std::string(s.message())), code_(s.code()) {}
  absl::StatusCode code() const { return code_; }

 private:
  absl::StatusCode code_;
};

// Defines flywheel._core.CommitConflict and _core.Cancelled and installs the
// translator.
void RegisterStatus(pybind11::module_& m);

inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}

template <typename T>
T ValueOrThrow(Result<T> r) {
  if (!r.ok()) throw StatusError(r.status());
  return std::move(r).value();
}

}  // namespace flywheel::python
