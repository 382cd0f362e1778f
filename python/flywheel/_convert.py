"""Conversions between user data and the column tuples of ``flywheel._core``.

Every column crosses the C++ boundary as a tuple ``(values, offsets, mask)``
(python/bindings/arrays.h):

* fixed-width: ``values`` is a C-contiguous ndarray ``(n, *shape)`` of exactly
  the column's dtype, ``offsets`` is None;
* string/binary: ``values`` is a list of str/bytes with None for nulls;
* ``list<T>``: ``values`` is a 1-d ndarray of T and ``offsets`` an int64
  ndarray of n + 1 entries starting at 0;
* ``mask`` is None or a bool ndarray ``(n,)``, True = null.

This module turns what users pass (numpy arrays, masked arrays, lists with
None) into that form with the casting rules documented in docs/python.md, and
turns tuples from C++ into what users get back (arrays, masked arrays, lists,
:class:`ListArray`).
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _core

__all__ = ["ListArray", "column_to_core", "column_from_core", "indices_to_core"]


class ListArray(tuple):
    """A ``list<T>`` column: the 2-tuple ``(offsets, values)`` plus ``mask``.

    ``offsets`` is an int64 array of ``n + 1`` entries with ``offsets[0] == 0``;
    row ``i`` is ``values[offsets[i]:offsets[i + 1]]``. ``values`` is a 1-d
    array of the element type. ``mask`` is None when no row is null, else a
    bool array of ``n`` entries (True = null; null rows are empty ranges).

    Being a tuple, it unpacks as ``offsets, values = column``; note that
    ``len()`` is therefore 2, use :attr:`num_rows` for the row count. It is
    also accepted as input for ``list<T>`` columns (offsets need not start
    at 0 there).
    """

    def __new__(cls, offsets: np.ndarray, values: np.ndarray, mask: Optional[np.ndarray] = None):
        self = super().__new__(cls, (offsets, values))
        self.mask = mask
        return self

    def __getnewargs__(self):
        return (self[0], self[1], self.mask)

    @property
    def offsets(self) -> np.ndarray:
        return self[0]

    @property
    def values(self) -> np.ndarray:
        return self[1]

    @property
    def num_rows(self) -> int:
        return len(self[0]) - 1

    def row(self, i: int) -> Optional[np.ndarray]:
        """Row ``i`` as an array (a view), or None when it is null."""
        if self.mask is not None and self.mask[i]:
            return None
        return self[1][self[0][i]:self[0][i + 1]]

    def to_list(self) -> list:
        """Rows as Python lists (None for null rows)."""
        return [None if r is None else r.tolist() for r in map(self.row, range(self.num_rows))]

    def __repr__(self) -> str:
        return f"ListArray(offsets={self[0]!r}, values={self[1]!r}, mask={self.mask!r})"


@functools.lru_cache(maxsize=256)
def _parse_type(type_text: str):
    kind, scalar, shape, canonical = _core.parse_type(type_text)
    return kind, (np.dtype(scalar) if scalar else None), tuple(shape), canonical


def _where(name: str, type_text: str) -> str:
    return f"column '{name}' ({type_text})"


def _cast(where: str, data: Any, dtype: np.dtype) -> np.ndarray:
    """``data`` as an ndarray of ``dtype`` (rules in docs/python.md)."""
    if isinstance(data, np.ndarray):
        if data.dtype == dtype:
            return data
        if np.can_cast(data.dtype, dtype, "safe"):
            return data.astype(dtype)
        raise TypeError(f"{where}: cannot safely cast dtype {data.dtype} to {dtype}; "
                        f"convert explicitly, e.g. .astype(np.{dtype.name})")
    raw = np.asarray(data)
    if raw.dtype == dtype:
        return raw
    if raw.size == 0:
        return np.empty(raw.shape, dtype)
    kind = raw.dtype.kind
    if kind == "b" or (kind in "iu" and dtype.kind == "f"):
        return raw.astype(dtype)
    if kind in "iu" and dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = raw.min(), raw.max()
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise ValueError(f"{where}: value {bad} is out of range for {dtype}")
        return raw.astype(dtype)
    if kind in "iu" and dtype.kind == "b":
        if not np.isin(raw, (0, 1)).all():
            raise ValueError(f"{where}: integers other than 0 and 1 given for a bool column")
        return raw.astype(dtype)
    if kind == "f" and dtype.kind == "f":
        return raw.astype(dtype)  # rounding Python floats into float16/32 is expected
    raise TypeError(f"{where}: cannot convert values of dtype {raw.dtype} to {dtype}")


def _null_mask(where: str, mask: Optional[np.ndarray], nullable: bool) -> Optional[np.ndarray]:
    if mask is None or not mask.any():
        return None
    if not nullable:
        row = int(np.flatnonzero(mask)[0])
        raise ValueError(f"{where}: row {row} is null but the column is not nullable")
    return np.ascontiguousarray(mask, dtype=np.bool_)


def _fixed(where: str, dtype: np.dtype, shape: Tuple[int, ...], nullable: bool, data: Any):
    mask = None
    if isinstance(data, np.ma.MaskedArray):
        m = np.ma.getmaskarray(data)
        if m.ndim > 1:  # a row of a tensor column is null if any element is masked
            m = m.reshape(m.shape[0], -1).any(axis=1)
        mask = m
        data = np.ma.getdata(data)
    elif not isinstance(data, np.ndarray):
        if isinstance(data, (str, bytes)):
            raise TypeError(f"{where}: need an array or a sequence of numbers, got {type(data).__name__}")
        if not isinstance(data, Sequence) and not hasattr(data, "__array__") and hasattr(data, "__iter__"):
            data = list(data)  # generators and other iterables
        if isinstance(data, Sequence) and any(x is None for x in data):
            mask = np.fromiter((x is None for x in data), dtype=np.bool_, count=len(data))
            fill = np.zeros(shape, dtype)
            data = [fill if x is None else x for x in data]
    arr = _cast(where, data, dtype)
    if arr.ndim == 0 or arr.shape[1:] != shape:
        want = "(n" + "".join(f", {d}" for d in shape) + (",)" if not shape else ")")
        raise ValueError(f"{where}: values have shape {arr.shape}, need {want}")
    return (np.ascontiguousarray(arr), None, _null_mask(where, mask, nullable))


def _bytes(where: str, kind: str, data: Any):
    if isinstance(data, (str, bytes)):
        raise TypeError(f"{where}: need a list of {'str' if kind == 'string' else 'bytes'}, "
                        f"got a single {type(data).__name__}")
    if isinstance(data, np.ma.MaskedArray):
        m = np.ma.getmaskarray(data)
        data = [None if null else v for v, null in zip(np.ma.getdata(data).tolist(), m.tolist())]
    elif isinstance(data, np.ndarray):
        data = data.tolist()
    elif not isinstance(data, list):
        data = list(data)
    return (data, None, None)


def _list(where: str, dtype: np.dtype, nullable: bool, data: Any):
    if isinstance(data, ListArray):
        offsets = np.asarray(data.offsets, dtype=np.int64)
        values = _cast(where, np.asarray(data.values), dtype)
        mask = data.mask
        if len(offsets) and offsets[0] != 0:
            values = values[offsets[0]:offsets[-1]]
            offsets = offsets - offsets[0]
        return (np.ascontiguousarray(values), np.ascontiguousarray(offsets),
                _null_mask(where, None if mask is None else np.asarray(mask, dtype=np.bool_), nullable))
    if isinstance(data, (str, bytes)):
        raise TypeError(f"{where}: need a list of sequences, got a single {type(data).__name__}")
    rows = list(data)
    n = len(rows)
    lengths = np.zeros(n, dtype=np.int64)
    mask = np.zeros(n, dtype=np.bool_)
    parts = []
    for i, row in enumerate(rows):
        if row is None:
            mask[i] = True
            continue
        a = _cast(f"{where} row {i}", row, dtype)
        if a.ndim != 1:
            raise ValueError(f"{where}: row {i} has shape {a.shape}, need a 1-d sequence")
        parts.append(a)
        lengths[i] = len(a)
    values = np.concatenate(parts) if parts else np.empty(0, dtype)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return (np.ascontiguousarray(values, dtype=dtype), offsets, _null_mask(where, mask, nullable))


def column_to_core(name: str, type_text: str, nullable: bool, data: Any):
    """The column tuple for ``data`` of column ``name``; raises TypeError or
    ValueError naming the column."""
    kind, dtype, shape, _ = _parse_type(type_text)
    where = _where(name, type_text)
    if kind == "fixed":
        return _fixed(where, dtype, shape, nullable, data)
    if kind in ("string", "binary"):
        return _bytes(where, kind, data)
    if kind == "nested":
        # Python objects (dicts, lists, None), converted in C++ (docs/python.md).
        if isinstance(data, (str, bytes)) or not hasattr(data, "__iter__"):
            raise TypeError(f"{where}: need a list of values, one per row, got {type(data).__name__}")
        return (data if isinstance(data, list) else list(data), None, None)
    return _list(where, dtype, nullable, data)


def column_from_core(col) -> Any:
    """What users get for a column tuple from C++ (see docs/python.md)."""
    values, offsets, mask = col
    if offsets is not None:
        return ListArray(offsets, values, mask)
    if mask is None or isinstance(values, list):
        return values
    m = mask.reshape(mask.shape + (1,) * (values.ndim - 1))
    return np.ma.MaskedArray(values, mask=np.broadcast_to(m, values.shape).copy())


def batch_from_core(batch: dict) -> dict:
    return {name: column_from_core(col) for name, col in batch.items()}


def indices_to_core(indices: Any) -> np.ndarray:
    """Row indices as a contiguous int64 array; TypeError for non-integers."""
    a = np.asarray(indices)
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    if a.ndim != 1:
        raise ValueError(f"indices must be 1-d, got shape {a.shape}")
    if a.dtype.kind not in "iu":
        raise TypeError(f"indices must be integers, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int64)
