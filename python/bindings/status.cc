// absl::Status -> Python exceptions; the table is in status.h.
#include "status.h"

#include <Python.h>

namespace flywheel::python {
namespace py = pybind11;

namespace {

// Owned by the module object (added as an attribute), so it lives as long as
// any code that can raise it.
PyObject* commit_conflict = nullptr;
PyObject* cancelled = nullptr;

PyObject* ExceptionFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
      return PyExc_ValueError;
    case absl::StatusCode::kNotFound:
      return PyExc_FileNotFoundError;
    case absl::StatusCode::kOutOfRange:
      return PyExc_IndexError;
    case absl::StatusCode::kAlreadyExists:
      return PyExc_FileExistsError;
    case absl::StatusCode::kPermissionDenied:
      return PyExc_PermissionError;
    case absl::StatusCode::kAborted:
      return commit_conflict;
    case absl::StatusCode::kDeadlineExceeded:
      return PyExc_TimeoutError;
    case absl::StatusCode::kCancelled:
      return cancelled;
    default:
      return PyExc_RuntimeError;
  }
}

}  // namespace

void RegisterStatus(py::module_& m) {
  commit_conflict = PyErr_NewExceptionWithDoc(
      "flywheel.CommitConflict",
      "A commit lost a race with an incompatible commit by another writer\n"
      "(e.g. a delete racing a compaction of the same rows). The message names\n"
      "both operations; re-open the table and retry if that is still wanted.",
      PyExc_RuntimeError, nullptr);
  if (commit_conflict == nullptr) throw py::error_already_set();
  m.add_object("CommitConflict", py::handle(commit_conflict));
  cancelled = PyErr_NewExceptionWithDoc(
      "flywheel.replay.Cancelled",
      "A blocking call was cancelled before it could proceed: the replay table\n"
      "was closed (Table.close(), from any thread). Later calls on a closed\n"
      "table raise it too.",
      PyExc_RuntimeError, nullptr);
  if (cancelled == nullptr) throw py::error_already_set();
  m.add_object("Cancelled", py::handle(cancelled));

  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyErr_SetString(ExceptionFor(e.code()), e.what());
    }
  });
}

}  // namespace flywheel::python
