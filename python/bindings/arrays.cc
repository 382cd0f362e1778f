// Column <-> numpy / list conversions; the protocol is in arrays.h.
#include "arrays.h"

#include <Python.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

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

Column ColumnFromPython(const Field& f, py::handle data) {
  if (!PyTuple_Check(data.ptr()) || PyTuple_GET_SIZE(data.ptr()) != 3) {
    TypeError(f, "internal: expected a (values, offsets, mask) tuple");
  }
  auto t = py::reinterpret_borrow<py::tuple>(data);
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
