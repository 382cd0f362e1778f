// The Arrow PyCapsule interface for flywheel._core (arrow_c_stream,
// arrow_c_array, arrow_c_schema) over format/arrow.h, and reading any object
// that offers it.
//
// Capsules are named as the interface requires ("arrow_schema",
// "arrow_array", "arrow_array_stream"); their destructors release a struct
// the consumer did not take. Exported arrays hold the columns' buffers (and so
// the mapped shard files) until the consumer releases them.
//
// _core.ArrowBatch: one record batch (a take() result, a loader batch) with
// __arrow_c_schema__ / __arrow_c_array__ / __arrow_c_stream__ and to_dict().
//
// Thread-safety: functions need the GIL unless stated.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>

#include "flywheel/format/arrow.h"

namespace flywheel::python {

pybind11::capsule SchemaCapsule(const format::Schema& schema, const format::LogicalTypes* logical = nullptr);
pybind11::capsule ArrayCapsule(const format::RecordBatch& batch);
pybind11::capsule StreamCapsule(format::Schema schema, format::BatchSource next, format::LogicalTypes logical = {});

// A held record batch (python type _core.ArrowBatch).
struct ArrowBatch {
  format::RecordBatch batch;
  format::LogicalTypes logical;  // temporal columns (their table's logical types)
};
pybind11::object WrapBatch(format::RecordBatch batch, format::LogicalTypes logical = {});

// An Arrow source taken from a Python object: its stream, or its one
// (schema, array) pair. Releases what it still holds when destroyed.
struct ArrowInput {
  ArrowArrayStream stream{};
  ArrowSchema schema{};
  ArrowArray array{};
  ArrowInput() = default;
  ArrowInput(const ArrowInput&) = delete;
  ArrowInput& operator=(const ArrowInput&) = delete;
  ~ArrowInput();
};

// Takes `obj`'s data (__arrow_c_stream__, else __arrow_c_array__ as one
// batch). Throws TypeError when it offers neither. Needs the GIL.
std::unique_ptr<ArrowInput> OpenArrow(pybind11::handle obj);

// Reads an opened source: on_schema gets the schema first, then sink each
// batch in order; stops at the first error. Needs no GIL (call it without).
Status ReadArrow(ArrowInput& in,
                 const std::function<Status(const format::Schema&, const format::LogicalTypes&)>& on_schema,
                 const std::function<Status(format::RecordBatch)>& sink);

// Defines _core.ArrowBatch and _core.arrow_schema(fields).
void RegisterArrow(pybind11::module_& m);

}  // namespace flywheel::python
