"""Batches that Arrow readers take directly (docs/arrow.md).

:class:`Batch` is the mapping of columns that :meth:`flywheel.Table.take` and
:class:`flywheel.Loader` return, plus the Arrow PyCapsule interface
(``__arrow_c_array__``, ``__arrow_c_stream__``, ``__arrow_c_schema__``) over
the same buffers, so ``pyarrow.record_batch(b)``, ``pyarrow.table(b)``,
``polars.DataFrame(b)`` and DuckDB read it without a copy of fixed-width
columns. The export is of the batch as flywheel produced it: entries the
caller adds or replaces in the dict are not part of it.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Iterator, Mapping, Optional

__all__ = ["Batch", "ArrowStream", "column_to_pylist"]


def column_to_pylist(col: Any) -> list:
    """One column of a batch (any form :meth:`flywheel.Table.scan` gives) as a
    list of Python values, None for nulls."""
    import numpy as np
    if isinstance(col, list):
        return col
    if hasattr(col, "to_list"):  # ListArray
        return col.to_list()
    if isinstance(col, np.ma.MaskedArray):
        data = np.ma.getdata(col).tolist()
        mask = np.ma.getmaskarray(col)
        if mask.ndim > 1:
            mask = mask.reshape(mask.shape[0], -1).any(axis=1)
        return [None if m else v for v, m in zip(data, mask.tolist())]
    return np.asarray(col).tolist()


class Batch(MutableMapping):
    """``{column: data}`` (see :meth:`flywheel.Table.scan` for the forms) that
    also exports itself through the Arrow C data interface.

    A mutable mapping rather than a ``dict`` subclass: Arrow readers
    (``pyarrow.table``, ``pyarrow.record_batch``, DuckDB) treat a ``dict`` as
    columns to convert and would never ask for the capsule. ``dict(batch)``
    gives a plain dict.
    """

    __slots__ = ("_cols", "_arrow", "_why_not")

    def __init__(self, columns: Mapping[str, Any], arrow: Any = None, why_not: Optional[str] = None):
        self._cols = dict(columns)
        self._arrow = arrow
        self._why_not = why_not

    def __getitem__(self, key: str) -> Any:
        return self._cols[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._cols[key] = value

    def __delitem__(self, key: str) -> None:
        del self._cols[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def __len__(self) -> int:
        return len(self._cols)

    def __contains__(self, key: object) -> bool:
        return key in self._cols

    def keys(self):
        return self._cols.keys()

    def to_pylist(self) -> list:
        """The rows as a list of ``{column: value}`` dicts of plain Python
        values: nested columns as dicts, lists and None; tensors as nested
        lists; masked (null) values as None."""
        names = list(self._cols)
        cols = [column_to_pylist(self._cols[n]) for n in names]
        return [dict(zip(names, row)) for row in zip(*cols)]

    def items(self):
        return self._cols.items()

    def values(self):
        return self._cols.values()

    def __repr__(self) -> str:
        return f"Batch({self._cols!r})"

    def _core(self):
        if self._arrow is None:
            raise TypeError(self._why_not or "this batch has no Arrow form")
        return self._arrow

    @property
    def num_rows(self) -> int:
        """Rows in the batch."""
        return self._core().num_rows

    def __arrow_c_schema__(self):
        return self._core().__arrow_c_schema__()

    def __arrow_c_array__(self, requested_schema: Any = None):
        return self._core().__arrow_c_array__(requested_schema)

    def __arrow_c_stream__(self, requested_schema: Any = None):
        return self._core().__arrow_c_stream__(requested_schema)

    def to_arrow(self):
        """This batch as a ``pyarrow.RecordBatch`` (zero-copy where the layouts agree)."""
        import pyarrow as pa
        return pa.record_batch(self)

    def __reduce__(self):
        # Pickles (and copies) as a plain dict: the Arrow view does not travel.
        return (dict, (dict(self._cols),))


class ArrowStream:
    """An object offering ``__arrow_c_stream__`` from a function making the
    capsule (each call starts a new stream; ``first``, when given, is handed
    out on the first call)."""

    __slots__ = ("_make", "_schema", "_first")

    def __init__(self, make, schema=None, first=None):
        self._make = make
        self._schema = schema
        self._first = first

    def __arrow_c_stream__(self, requested_schema: Any = None):
        first, self._first = self._first, None
        return first if first is not None else self._make()

    def __arrow_c_schema__(self):
        if self._schema is None:
            raise TypeError("no schema for this stream")
        return self._schema()
