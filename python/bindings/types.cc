// Type and schema parsing exposed to Python; the text forms are C++'s
// (format/types.h), so Python and the CLI accept exactly the same types.
#include "types.h"

#include <pybind11/stl.h>

#include "absl/strings/str_cat.h"
#include "status.h"

namespace flywheel::python {
namespace py = pybind11;

using format::DataType;
using format::Field;
using format::Schema;
using format::TypeId;

FieldTuple FieldToTuple(const Field& f) {
  return {f.name, f.type.ToString(), f.nullable, f.default_json};
}

Field FieldFromTuple(const FieldTuple& t) {
  Field f;
  f.name = std::get<0>(t);
  auto type = DataType::Parse(std::get<1>(t));
  if (!type.ok()) {
    throw StatusError(Annotate(type.status(), absl::StrCat("column '", f.name, "'")));
  }
  f.type = *type;
  f.nullable = std::get<2>(t);
  f.default_json = std::get<3>(t);
  return f;
}

std::vector<FieldTuple> SchemaToTuples(const Schema& s) {
  std::vector<FieldTuple> out;
  for (const auto& f : s.fields) out.push_back(FieldToTuple(f));
  return out;
}

Schema SchemaFromTuples(const std::vector<FieldTuple>& fields) {
  Schema s;
  for (const auto& t : fields) s.fields.push_back(FieldFromTuple(t));
  ThrowIfError(s.Validate());
  return s;
}

void RegisterTypes(py::module_& m) {
  m.def(
      "parse_type",
      [](const std::string& text) {
        DataType t = ValueOrThrow(DataType::Parse(text));
        std::string kind = t.is_nested()             ? "nested"
                           : t.id == TypeId::kList     ? "list"
                           : t.id == TypeId::kString ? "string"
                           : t.id == TypeId::kBinary ? "binary"
                                                     : "fixed";
        std::string scalar = kind == "fixed" || kind == "list"
                                 ? std::string(format::TypeIdName(t.value_type()))
                                 : "";
        return py::make_tuple(kind, scalar, py::tuple(py::cast(t.shape)), t.ToString());
      },
      py::arg("text"),
      "Parses a type ('int64', 'float32[16]', 'string', 'list<int32>',\n"
      "'list<struct<role: string, content: string?>>') into (kind, scalar, shape,\n"
      "canonical text); kind is 'fixed', 'string', 'binary', 'list' (of non-null\n"
      "scalars) or 'nested', scalar the numpy dtype name of the values ('' for\n"
      "string/binary/nested).\n"
      "Raises ValueError for an unknown type.");
  m.def(
      "parse_schema",
      [](const std::string& text) { return SchemaToTuples(ValueOrThrow(Schema::Parse(text))); },
      py::arg("text"),
      "Parses 'x:int64, emb:float32[16], name:string?' into a list of\n"
      "(name, type, nullable, default_json) tuples. Raises ValueError.");
}

}  // namespace flywheel::python
