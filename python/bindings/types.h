// Schema and type helpers shared by the binding files.
//
// Thread-safety: stateless; the Python-facing functions need the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <tuple>
#include <vector>

#include "flywheel/format/types.h"

namespace flywheel::python {

// (name, type text, nullable, default JSON or "") — how fields cross to Python.
using FieldTuple = std::tuple<std::string, std::string, bool, std::string>;

FieldTuple FieldToTuple(const format::Field& f);
// Throws ValueError (via StatusError) naming the field when the type is bad.
format::Field FieldFromTuple(const FieldTuple& t);
std::vector<FieldTuple> SchemaToTuples(const format::Schema& s);
format::Schema SchemaFromTuples(const std::vector<FieldTuple>& fields);

// Defines _core.parse_type and _core.parse_schema.
void RegisterTypes(pybind11::module_& m);

}  // namespace flywheel::python
