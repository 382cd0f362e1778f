// Conversions between format::Column and the Python objects _core exchanges
// with the pure-Python layer (python/flywheel/_convert.py).
//
// Every column crosses as a "column tuple" (values, offsets, mask):
//   fixed-width   values: ndarray (n, *shape) of the exact dtype; offsets None
//   string/binary values: list of str/bytes, None for null; offsets None
//   list<T>       values: 1-d ndarray of T; offsets: int64 ndarray (n + 1)
//                 starting at 0
//   mask: None, or a bool ndarray (n,) with True = null (fixed and list only;
//   strings carry their nulls as None).
//
// Outputs are views, not copies: a fixed-width or list values array points
// into the Column's Buffer and owns a capsule holding the Buffer's owner
// (shared_ptr), so a page of a memory-mapped shard stays mapped for as long
// as any array over it lives. Output arrays are read-only (unless asked).
//
// Inputs are views too: a Column built from an ndarray keeps a reference to
// the array (released under the GIL), so appending does not copy the data.
//
// Thread-safety: all functions need the GIL.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "flywheel/format/column.h"
#include "flywheel/format/types.h"

namespace flywheel::python {

// Column of `field` from a column tuple. Throws TypeError (wrong Python
// kind or dtype) or ValueError (shape, length, nulls in a non-nullable
// field, bad offsets), each naming the column.
format::Column ColumnFromPython(const format::Field& field, pybind11::handle data);

// Column tuple (values, offsets, mask) over the column's buffers. The arrays
// are read-only unless `writable` (for buffers nothing else reads, such as a
// loader batch handed to its consumer).
pybind11::tuple ColumnToPython(const format::Column& c, bool writable = false);

// numpy dtype of a scalar type ("int64", "float16", "bool", ...).
pybind11::dtype DTypeOf(format::TypeId id);

// Defines _core._mapped_file (a test helper; see _core.pyi).
void RegisterArrays(pybind11::module_& m);

}  // namespace flywheel::python
