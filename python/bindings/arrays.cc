// Column <-> numpy / list conversions; the protocol is in arrays.h.
#include "arrays.h"

#include <Python.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flywheel/base/half.h"
#include "flywheel/format/internal/json_column.h"
#include "flywheel/format/json_column.h"

namespace flywheel::python {
namespace py = pybind11;

using format::Buffer;
using format::Column;
using format::DataType;
using format::Field;
using format::TypeId;

namespace {

std::string Where(const Field& f) { return "column '" + f.name + "' (" + f.type.ToString() + ")"; }

[[noreturn]] void TypeError(const Field& f, const std::string& msg) {
  throw py::type_error(Where(f) + ": " + msg);
}
[[noreturn]] void ValueError(const Field& f, const std::string& msg) {
  throw py::value_error(Where(f) + ": " + msg);
}

// A Buffer owner that keeps a Python object alive. The last reference may be
// dropped on any thread, with or without the GIL, so the deleter takes it.
std::shared_ptr<const void> KeepAlive(py::object o) {
  return std::shared_ptr<const void>(new py::object(std::move(o)), [](const py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

std::string ShapeText(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(a.shape(i));
  }
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// `obj` as a C-contiguous ndarray of exactly `dtype`, else TypeError.
py::array ExactArray(const Field& f, py::handle obj, const py::dtype& dtype, const char* what) {
  if (!py::isinstance<py::array>(obj)) {
    TypeError(f, std::string(what) + " must be a numpy array, got " +
                     std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  auto a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().equal(dtype)) {
    TypeError(f, std::string(what) + " has dtype " +
                     std::string(py::str(static_cast<py::handle>(a.dtype()))) + ", need " +
                     std::string(py::str(static_cast<py::handle>(dtype))));
  }
  if (!(a.flags() & py::array::c_style)) {
    ValueError(f, std::string(what) + " must be C-contiguous");
  }
  return a;
}

// Validity bitmap from a bool mask (True = null); sets null_count.
void ApplyMask(const Field& f, py::handle mask_obj, Column* c) {
  if (mask_obj.is_none()) return;
  static const py::dtype kBool("bool");
  py::array mask = ExactArray(f, mask_obj, kBool, "mask");
  if (mask.ndim() != 1 || mask.shape(0) != c->length) {
    ValueError(f,
               "mask has shape " + ShapeText(mask) + ", need (" + std::to_string(c->length) + ",)");
  }
  const auto* m = static_cast<const uint8_t*>(mask.data());
  std::vector<uint8_t> bits(static_cast<size_t>((c->length + 7) / 8), 0);
  int64_t nulls = 0;
  for (int64_t i = 0; i < c->length; ++i) {
    if (m[i]) {
      if (!f.nullable)
        ValueError(f, "row " + std::to_string(i) + " is null but the column is not nullable");
      ++nulls;
    } else {
      bits[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
    }
  }
  if (nulls == 0) return;
  c->null_count = nulls;
  c->validity = Buffer::FromVector(std::move(bits));
}

Column FixedFromPython(const Field& f, py::handle values_obj, py::handle mask_obj) {
  const py::dtype dtype = DTypeOf(f.type.id);
  py::array a = ExactArray(f, values_obj, dtype, "values");
  const auto& shape = f.type.shape;
  bool ok = a.ndim() == static_cast<py::ssize_t>(shape.size()) + 1;
  for (size_t i = 0; ok && i < shape.size(); ++i)
    ok = a.shape(static_cast<py::ssize_t>(i) + 1) == shape[i];
  if (!ok) {
    std::string want = "(n";
    for (int64_t d : shape) want += ", " + std::to_string(d);
    ValueError(
        f, "values have shape " + ShapeText(a) + ", need " + want + (shape.empty() ? ",)" : ")"));
  }
  Column c;
  c.type = f.type;
  c.length = a.shape(0);
  c.values =
      Buffer{static_cast<const uint8_t*>(a.data()), static_cast<size_t>(a.nbytes()), KeepAlive(a)};
  ApplyMask(f, mask_obj, &c);
  return c;
}

Column BytesFromPython(const Field& f, py::handle values_obj) {
  const bool is_string = f.type.id == TypeId::kString;
  if (!PyList_Check(values_obj.ptr())) {
    TypeError(f, std::string("values must be a list of ") + (is_string ? "str" : "bytes") +
                     ", got " + std::string(py::str(py::type::handle_of(values_obj).attr("__name__"))));
  }
  PyObject* list = values_obj.ptr();
  const Py_ssize_t n = PyList_GET_SIZE(list);
  std::string data;
  std::vector<int64_t> offsets(static_cast<size_t>(n) + 1, 0);
  std::vector<uint8_t> bits(static_cast<size_t>((n + 7) / 8), 0);
  int64_t nulls = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyList_GET_ITEM(list, i);
    if (item == Py_None) {
      if (!f.nullable)
        ValueError(f, "row " + std::to_string(i) + " is None but the column is not nullable");
      ++nulls;
    } else if (is_string && PyUnicode_Check(item)) {
      Py_ssize_t len = 0;
      const char* s = PyUnicode_AsUTF8AndSize(item, &len);
      if (s == nullptr) throw py::error_already_set();
      data.append(s, static_cast<size_t>(len));
      bits[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
    } else if (!is_string && PyBytes_Check(item)) {
      data.append(PyBytes_AS_STRING(item), static_cast<size_t>(PyBytes_GET_SIZE(item)));
      bits[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
    } else if (!is_string && PyByteArray_Check(item)) {
      data.append(PyByteArray_AS_STRING(item), static_cast<size_t>(PyByteArray_GET_SIZE(item)));
      bits[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
    } else {
      TypeError(f, "row " + std::to_string(i) + " is " +
                       std::string(py::str(py::type::handle_of(py::handle(item)).attr("__name__"))) +
                       ", need " + (is_string ? "str" : "bytes") + (f.nullable ? " or None" : ""));
    }
    offsets[static_cast<size_t>(i) + 1] = static_cast<int64_t>(data.size());
  }
  Column c;
  c.type = f.type;
  c.length = n;
  c.values = Buffer::FromString(std::move(data));
  c.offsets = Buffer::FromVector(std::move(offsets));
  if (nulls > 0) {
    c.null_count = nulls;
    c.validity = Buffer::FromVector(std::move(bits));
  }
  return c;
}

Column ListFromPython(const Field& f, py::handle values_obj, py::handle offsets_obj,
                      py::handle mask_obj) {
  static const py::dtype kInt64("int64");
  py::array values = ExactArray(f, values_obj, DTypeOf(f.type.elem), "values");
  py::array offsets = ExactArray(f, offsets_obj, kInt64, "offsets");
  if (values.ndim() != 1) ValueError(f, "values must be 1-d, got shape " + ShapeText(values));
  if (offsets.ndim() != 1 || offsets.shape(0) < 1) {
    ValueError(f, "offsets must be 1-d with n + 1 entries, got shape " + ShapeText(offsets));
  }
  const int64_t n = offsets.shape(0) - 1;
  const auto* o = static_cast<const int64_t*>(offsets.data());
  if (o[0] != 0) ValueError(f, "offsets must start at 0");
  for (int64_t i = 0; i < n; ++i) {
    if (o[i + 1] < o[i]) ValueError(f, "offsets decrease at row " + std::to_string(i));
  }
  if (o[n] != values.shape(0)) {
    ValueError(f, "offsets end at " + std::to_string(o[n]) + " but there are " +
                      std::to_string(values.shape(0)) + " values");
  }
  Column c;
  c.type = f.type;
  c.length = n;
  c.values = Buffer{static_cast<const uint8_t*>(values.data()),
                    static_cast<size_t>(values.nbytes()), KeepAlive(values)};
  c.offsets = Buffer{static_cast<const uint8_t*>(offsets.data()),
                     static_cast<size_t>(offsets.nbytes()), KeepAlive(offsets)};
  ApplyMask(f, mask_obj, &c);
  return c;
}

// An ndarray over `data` (inside `buf`) that keeps `buf.owner` alive;
// read-only unless `writable`.
py::array View(const Buffer& buf, const uint8_t* data, const py::dtype& dtype,
               std::vector<py::ssize_t> shape, bool writable) {
  py::ssize_t count = 1;
  for (py::ssize_t d : shape) count *= d;
  py::array a;
  if (count == 0 || data == nullptr) {
    a = py::array(dtype, shape);
  } else if (!buf.owner) {
    // Nothing keeps the bytes alive: copy (no known producer does this).
    a = py::array(dtype, shape);
    std::memcpy(a.mutable_data(), data,
                static_cast<size_t>(count) * static_cast<size_t>(dtype.itemsize()));
  } else {
    auto* holder = new std::shared_ptr<const void>(buf.owner);
    py::capsule base(holder, "flywheel.Buffer", [](PyObject* cap) {
      delete static_cast<std::shared_ptr<const void>*>(
          PyCapsule_GetPointer(cap, "flywheel.Buffer"));
    });
    a = py::array(dtype, shape, {}, data, base);
  }
  if (!writable) a.attr("setflags")(py::arg("write") = false);
  return a;
}

py::object MaskOf(const Column& c) {
  if (c.validity.empty() || c.length == 0) return py::none();
  py::array_t<bool> mask(c.length);
  bool* m = mask.mutable_data();
  bool any = false;
  for (int64_t i = 0; i < c.length; ++i) {
    m[i] = !c.IsValid(i);
    any |= m[i];
  }
  if (!any) return py::none();
  return mask;
}

}  // namespace

py::dtype DTypeOf(TypeId id) {
  if (!format::IsScalar(id)) {
    throw std::logic_error("DTypeOf: not a scalar type");
  }
  return py::dtype(std::string(format::TypeIdName(id)));
}

// A Python value as JSON for the nested-column builder (json_column.h):
// dicts with str keys are objects, other dicts arrays of [key, value] pairs
// (maps with non-string keys), bytes {"hex": ...}, numpy values by value.
nlohmann::ordered_json ToJson(py::handle v, int depth) {
  using J = nlohmann::ordered_json;
  if (depth > 64) throw py::value_error("value nests too deeply");
  if (v.is_none()) return nullptr;
  if (PyBool_Check(v.ptr())) return v.ptr() == Py_True;
  if (PyLong_Check(v.ptr())) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow == 0) return static_cast<int64_t>(x);
    const unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      throw py::value_error("integer " + py::str(v).cast<std::string>() + " does not fit 64 bits");
    }
    return static_cast<uint64_t>(u);
  }
  if (PyFloat_Check(v.ptr())) return PyFloat_AS_DOUBLE(v.ptr());
  if (PyUnicode_Check(v.ptr())) return v.cast<std::string>();
  if (PyBytes_Check(v.ptr()) || PyByteArray_Check(v.ptr()) || PyMemoryView_Check(v.ptr())) {
    const std::string b = py::bytes(py::reinterpret_borrow<py::object>(v)).cast<std::string>();
    static const char* kHex = "0123456789abcdef";
    std::string hex;
    hex.reserve(b.size() * 2);
    for (unsigned char c : b) {
      hex += kHex[c >> 4];
      hex += kHex[c & 15];
    }
    return J{{"hex", hex}};
  }
  if (PyDict_Check(v.ptr())) {
    auto d = py::reinterpret_borrow<py::dict>(v);
    bool str_keys = true;
    for (auto kv : d) str_keys = str_keys && PyUnicode_Check(kv.first.ptr());
    if (str_keys) {
      J obj = J::object();
      for (auto kv : d) obj[kv.first.cast<std::string>()] = ToJson(kv.second, depth + 1);
      return obj;
    }
    J arr = J::array();
    for (auto kv : d) arr.push_back(J::array({ToJson(kv.first, depth + 1), ToJson(kv.second, depth + 1)}));
    return arr;
  }
  if (py::isinstance<py::array>(v) || py::hasattr(v, "item") || py::hasattr(v, "tolist")) {
    if (py::hasattr(v, "tolist")) return ToJson(v.attr("tolist")(), depth + 1);
  }
  if (PyList_Check(v.ptr()) || PyTuple_Check(v.ptr())) {
    J arr = J::array();
    for (auto e : v) arr.push_back(ToJson(e, depth + 1));
    return arr;
  }
  throw py::type_error(std::string("cannot store a ") + Py_TYPE(v.ptr())->tp_name + " in a nested column");
}

Column NestedFromPython(const Field& f, py::handle values_obj) {
  if (PyUnicode_Check(values_obj.ptr()) || PyBytes_Check(values_obj.ptr())) {
    TypeError(f, "need a list of values, one per row");
  }
  format::JsonColumnBuilder b(f);
  int64_t row = 0;
  for (auto v : values_obj) {
    nlohmann::ordered_json j;
    try {
      j = ToJson(v, 0);
    } catch (const py::error_already_set&) {
      throw;
    } catch (const std::exception& e) {
      ValueError(f, "row " + std::to_string(row) + ": " + e.what());
    }
    Status s = internal_format::AppendJson(b, &j);
    if (!s.ok()) ValueError(f, "row " + std::to_string(row) + ": " + std::string(s.message()));
    row++;
  }
  return b.Finish();
}

py::object ScalarToPython(TypeId id, const uint8_t* p) {
  auto get = [&](auto x) { std::memcpy(&x, p, sizeof x); return x; };
  switch (id) {
    case TypeId::kBool: return py::bool_(get(uint8_t{}) != 0);
    case TypeId::kInt8: return py::int_(get(int8_t{}));
    case TypeId::kInt16: return py::int_(get(int16_t{}));
    case TypeId::kInt32: return py::int_(get(int32_t{}));
    case TypeId::kInt64: return py::int_(get(int64_t{}));
    case TypeId::kUInt8: return py::int_(get(uint8_t{}));
    case TypeId::kUInt16: return py::int_(get(uint16_t{}));
    case TypeId::kUInt32: return py::int_(get(uint32_t{}));
    case TypeId::kUInt64: return py::int_(get(uint64_t{}));
    case TypeId::kFloat16: return py::float_(HalfToDouble(get(uint16_t{})));
    case TypeId::kFloat32: return py::float_(get(float{}));
    case TypeId::kFloat64: return py::float_(get(double{}));
    default: return py::none();
  }
}

// Row `row` of a column as Python objects: struct -> dict, list -> list,
// map -> dict, tensors -> nested lists, string -> str, binary -> bytes.
py::object ValueToPython(const Column& c, int64_t row) {
  if (!c.IsValid(row)) return py::none();
  const DataType& t = c.type;
  if (t.id == TypeId::kStruct) {
    py::dict d;
    for (size_t i = 0; i < c.children.size(); ++i) d[py::str(t.children[i].name)] = ValueToPython(c.children[i], row);
    return d;
  }
  if (t.is_nested()) {
    const int64_t* o = c.offsets_data();
    if (t.id == TypeId::kList) {
      py::list l;
      for (int64_t i = o[row]; i < o[row + 1]; ++i) l.append(ValueToPython(c.children[0], i));
      return l;
    }
    py::dict d;
    for (int64_t i = o[row]; i < o[row + 1]; ++i) d[ValueToPython(c.children[0], i)] = ValueToPython(c.children[1], i);
    return d;
  }
  if (t.is_fixed_width()) {
    const uint8_t* p = c.FixedRow(row);
    if (t.shape.empty()) return ScalarToPython(t.id, p);
    // Row-major nested lists of the tensor's shape.
    const size_t es = format::ScalarSize(t.id);
    std::function<py::object(size_t, int64_t)> dim = [&](size_t d, int64_t base) -> py::object {
      py::list l;
      int64_t stride = 1;
      for (size_t k = d + 1; k < t.shape.size(); ++k) stride *= t.shape[k];
      for (int64_t i = 0; i < t.shape[d]; ++i) {
        if (d + 1 == t.shape.size()) l.append(ScalarToPython(t.id, p + (base + i) * es));
        else l.append(dim(d + 1, base + i * stride));
      }
      return l;
    };
    return dim(0, 0);
  }
  const int64_t* o = c.offsets_data();
  if (t.id == TypeId::kList) {
    const size_t es = format::ScalarSize(t.elem);
    py::list l;
    for (int64_t i = o[row]; i < o[row + 1]; ++i) l.append(ScalarToPython(t.elem, c.values.data + i * es));
    return l;
  }
  const char* s = reinterpret_cast<const char*>(c.values.data) + o[row];
  const Py_ssize_t len = static_cast<Py_ssize_t>(o[row + 1] - o[row]);
  if (t.id == TypeId::kString) {
    PyObject* u = PyUnicode_DecodeUTF8(s, len, "strict");
    if (u == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(u);
  }
  return py::bytes(s, static_cast<size_t>(len));
}

Column ColumnFromPython(const Field& f, py::handle data) {
  if (!PyTuple_Check(data.ptr()) || PyTuple_GET_SIZE(data.ptr()) != 3) {
    TypeError(f, "internal: expected a (values, offsets, mask) tuple");
  }
  auto t = py::reinterpret_borrow<py::tuple>(data);
  if (f.type.is_nested()) return NestedFromPython(f, t[0]);
  switch (f.type.id) {
    case TypeId::kString:
    case TypeId::kBinary:
      return BytesFromPython(f, t[0]);
    case TypeId::kList:
      return ListFromPython(f, t[0], t[1], t[2]);
    default:
      return FixedFromPython(f, t[0], t[2]);
  }
}

py::tuple ColumnToPython(const Column& c, bool writable) {
  const DataType& type = c.type;
  const int64_t n = c.length;
  if (type.is_fixed_width()) {
    std::vector<py::ssize_t> shape{n};
    for (int64_t d : type.shape) shape.push_back(d);
    return py::make_tuple(View(c.values, c.values.data, DTypeOf(type.id), shape, writable), py::none(),
                          MaskOf(c));
  }
  if (type.is_nested()) {
    py::list out(n);
    for (int64_t i = 0; i < n; ++i) {
      py::object v = ValueToPython(c, i);
      PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), v.release().ptr());
    }
    return py::make_tuple(std::move(out), py::none(), py::none());
  }
  const int64_t* o = c.offsets_data();
  if (type.id == TypeId::kString || type.id == TypeId::kBinary) {
    const bool is_string = type.id == TypeId::kString;
    py::list out(n);
    for (int64_t i = 0; i < n; ++i) {
      PyObject* item;
      if (!c.IsValid(i)) {
        Py_INCREF(Py_None);
        item = Py_None;
      } else {
        const char* s = reinterpret_cast<const char*>(c.values.data) + o[i];
        const Py_ssize_t len = static_cast<Py_ssize_t>(o[i + 1] - o[i]);
        item =
            is_string ? PyUnicode_DecodeUTF8(s, len, "strict") : PyBytes_FromStringAndSize(s, len);
        if (item == nullptr) throw py::error_already_set();
      }
      PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), item);
    }
    return py::make_tuple(std::move(out), py::none(), py::none());
  }
  // list<T>: offsets rebased to start at 0, values sliced to match.
  static const py::dtype kInt64("int64");
  const int64_t first = n == 0 || o == nullptr ? 0 : o[0];
  const int64_t last = n == 0 || o == nullptr ? 0 : o[n];
  py::array offsets;
  if (first == 0 && o != nullptr) {
    offsets = View(c.offsets, c.offsets.data, kInt64, {n + 1}, writable);
  } else {
    py::array_t<int64_t> rebased(n + 1);
    int64_t* r = rebased.mutable_data();
    for (int64_t i = 0; i <= n; ++i) r[i] = o == nullptr ? 0 : o[i] - first;
    rebased.attr("setflags")(py::arg("write") = false);
    offsets = std::move(rebased);
  }
  const py::dtype elem = DTypeOf(type.elem);
  const uint8_t* vdata =
      c.values.data == nullptr ? nullptr : c.values.data + first * elem.itemsize();
  py::array values = View(c.values, vdata, elem, {last - first}, writable);
  return py::make_tuple(std::move(values), std::move(offsets), MaskOf(c));
}

void RegisterArrays(py::module_& m) {
  m.def(
      "_mapped_file",
      [](const py::array& a) -> py::object {
        // /proc/self/maps: "start-end perms offset dev inode path".
        const auto addr = reinterpret_cast<uintptr_t>(a.data());
        std::ifstream maps("/proc/self/maps");
        std::string line;
        while (std::getline(maps, line)) {
          unsigned long long lo = 0, hi = 0, inode = 0;
          int path_at = -1;
          char perms[8], offset[32], dev[32];
          if (std::sscanf(line.c_str(), "%llx-%llx %7s %31s %31s %llu %n", &lo, &hi, perms, offset,
                          dev, &inode, &path_at) < 6) {
            continue;
          }
          if (addr < lo || addr >= hi) continue;
          if (inode == 0 || path_at < 0 || static_cast<size_t>(path_at) >= line.size())
            return py::none();
          return py::str(line.substr(static_cast<size_t>(path_at)));
        }
        return py::none();
      },
      py::arg("array"),
      "Test helper: the file whose memory mapping holds `array`'s first byte, or\n"
      "None (heap memory). Reads /proc/self/maps, so Linux only.");
}

}  // namespace flywheel::python
