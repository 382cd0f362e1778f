// The Arrow PyCapsule interface (arrow.h; docs/arrow.md).
#include "arrow.h"

#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "arrays.h"
#include "status.h"
#include "types.h"

namespace flywheel::python {
namespace py = pybind11;

namespace {

constexpr const char* kSchemaName = "arrow_schema";
constexpr const char* kArrayName = "arrow_array";
constexpr const char* kStreamName = "arrow_array_stream";

template <typename T>
void ReleaseCapsule(PyObject* cap, const char* name) {
  auto* p = static_cast<T*>(PyCapsule_GetPointer(cap, name));
  if (p == nullptr) {
    PyErr_Clear();
    return;
  }
  if (p->release != nullptr) p->release(p);
  delete p;
}

template <typename T>
py::capsule MakeCapsule(T* p, const char* name, void (*destructor)(PyObject*)) {
  PyObject* cap = PyCapsule_New(p, name, destructor);
  if (cap == nullptr) {
    if (p->release != nullptr) p->release(p);
    delete p;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

// The struct inside a capsule of the producer's, moved out (the capsule's
// destructor then finds it released).
template <typename T>
T TakeFromCapsule(py::handle cap, const char* name) {
  auto* p = static_cast<T*>(PyCapsule_GetPointer(cap.ptr(), name));
  if (p == nullptr) throw py::error_already_set();
  if (p->release == nullptr) throw py::value_error(absl::StrCat("the ", name, " capsule was already consumed"));
  T out = *p;
  p->release = nullptr;
  return out;
}

}  // namespace

py::capsule SchemaCapsule(const format::Schema& schema, const format::LogicalTypes* logical) {
  auto* s = new ArrowSchema{};
  if (Status st = format::ExportSchema(schema, s, logical); !st.ok()) {
    delete s;
    ThrowIfError(st);
  }
  return MakeCapsule(s, kSchemaName, [](PyObject* c) { ReleaseCapsule<ArrowSchema>(c, kSchemaName); });
}

py::capsule ArrayCapsule(const format::RecordBatch& batch) {
  auto* a = new ArrowArray{};
  if (Status st = format::ExportBatch(batch, a); !st.ok()) {
    delete a;
    ThrowIfError(st);
  }
  return MakeCapsule(a, kArrayName, [](PyObject* c) { ReleaseCapsule<ArrowArray>(c, kArrayName); });
}

py::capsule StreamCapsule(format::Schema schema, format::BatchSource next, format::LogicalTypes logical) {
  auto* s = new ArrowArrayStream{};
  format::ExportStream(std::move(schema), std::move(next), s, std::move(logical));
  return MakeCapsule(s, kStreamName, [](PyObject* c) { ReleaseCapsule<ArrowArrayStream>(c, kStreamName); });
}

py::object WrapBatch(format::RecordBatch batch, format::LogicalTypes logical) {
  return py::cast(ArrowBatch{std::move(batch), std::move(logical)});
}


ArrowInput::~ArrowInput() {
  if (stream.release != nullptr) stream.release(&stream);
  if (array.release != nullptr) array.release(&array);
  if (schema.release != nullptr) schema.release(&schema);
}

std::unique_ptr<ArrowInput> OpenArrow(py::handle obj) {
  auto in = std::make_unique<ArrowInput>();
  if (py::hasattr(obj, "__arrow_c_stream__")) {
    py::object cap = obj.attr("__arrow_c_stream__")();
    in->stream = TakeFromCapsule<ArrowArrayStream>(cap, kStreamName);
    return in;
  }
  if (!py::hasattr(obj, "__arrow_c_array__")) {
    throw py::type_error(absl::StrCat("expected an Arrow object (with __arrow_c_stream__ or __arrow_c_array__), got ",
                                      std::string(py::str(py::type::handle_of(obj).attr("__name__")))));
  }
  py::tuple caps = obj.attr("__arrow_c_array__")();
  if (caps.size() != 2) throw py::value_error("__arrow_c_array__ must return (schema capsule, array capsule)");
  in->schema = TakeFromCapsule<ArrowSchema>(caps[0], kSchemaName);
  in->array = TakeFromCapsule<ArrowArray>(caps[1], kArrayName);
  return in;
}

Status ReadArrow(ArrowInput& in,
                 const std::function<Status(const format::Schema&, const format::LogicalTypes&)>& on_schema,
                 const std::function<Status(format::RecordBatch)>& sink) {
  if (in.stream.release != nullptr) return format::ImportStream(&in.stream, on_schema, sink);
  format::LogicalTypes logical;
  FW_ASSIGN_OR_RETURN(format::Schema fw, format::ImportSchema(in.schema, &logical));
  FW_RETURN_IF_ERROR(on_schema(fw, logical));
  FW_ASSIGN_OR_RETURN(format::RecordBatch b, format::ImportBatch(&in.array, in.schema));
  return sink(std::move(b));
}



void RegisterArrow(py::module_& m) {
  py::class_<ArrowBatch>(m, "ArrowBatch")
      .def_property_readonly("num_rows", [](const ArrowBatch& b) { return b.batch.num_rows; })
      .def("fields", [](const ArrowBatch& b) { return SchemaToTuples(b.batch.schema); })
      .def("to_dict",
           [](const ArrowBatch& b) {
             py::dict out;
             for (size_t i = 0; i < b.batch.columns.size(); ++i) {
               out[py::str(b.batch.schema.fields[i].name)] = ColumnToPython(b.batch.columns[i]);
             }
             return out;
           })
      .def("__arrow_c_schema__", [](const ArrowBatch& b) { return SchemaCapsule(b.batch.schema, &b.logical); })
      .def(
          "__arrow_c_array__",
          [](const ArrowBatch& b, py::object requested_schema) {
            (void)requested_schema;  // flywheel's own mapping is the only one offered
            return py::make_tuple(SchemaCapsule(b.batch.schema, &b.logical), ArrayCapsule(b.batch));
          },
          py::arg("requested_schema") = py::none())
      .def(
          "__arrow_c_stream__",
          [](const ArrowBatch& b, py::object requested_schema) {
            (void)requested_schema;
            auto sent = std::make_shared<bool>(false);
            format::RecordBatch batch = b.batch;
            return StreamCapsule(
                batch.schema,
                [sent, batch]() -> Result<std::optional<format::RecordBatch>> {
                  if (*sent) return std::optional<format::RecordBatch>();
                  *sent = true;
                  return std::optional<format::RecordBatch>(batch);
                },
                b.logical);
          },
          py::arg("requested_schema") = py::none());
  m.def(
      "arrow_schema",
      [](const std::vector<FieldTuple>& fields) { return SchemaCapsule(SchemaFromTuples(fields)); },
      py::arg("fields"), "An arrow_schema capsule for (name, type, nullable, default) tuples.");
}

}  // namespace flywheel::python
