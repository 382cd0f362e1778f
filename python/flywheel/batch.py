"""Batches that Arrow readers take directly (docs/arrow.md).

:class:`Batch` is the ``dict`` of columns that :meth:`flywheel.Table.take` and
:class:`flywheel.Loader` return, plus the Arrow PyCapsule interface
(``__arrow_c_array__``, ``__arrow_c_stream__``, ``__arrow_c_schema__``) over
the same buffers, so ``pyarrow.record_batch(b)``, ``pyarrow.table(b)``,
``polars.DataFrame(b)`` and DuckDB read it without a copy of fixed-width
columns. The export is of the batch as flywheel produced it: entries the
caller adds or replaces in the dict are not part of it.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

__all__ = ["Batch", "ArrowStream"]


class Batch(dict):
    """``{column: data}`` (see :meth:`flywheel.Table.scan` for the forms) that
    also exports itself through the Arrow C data interface."""

    __slots__ = ("_arrow", "_why_not")

    def __init__(self, columns: Mapping[str, Any], arrow: Any = None, why_not: Optional[str] = None):
        super().__init__(columns)
        self._arrow = arrow
        self._why_not = why_not

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
        return (dict, (dict(self),))


class ArrowStream:
    """An object offering ``__arrow_c_stream__`` from a function making the
    capsule (each call starts a new stream)."""

    __slots__ = ("_make", "_schema")

    def __init__(self, make, schema=None):
        self._make = make
        self._schema = schema

    def __arrow_c_stream__(self, requested_schema: Any = None):
        return self._make()

    def __arrow_c_schema__(self):
        if self._schema is None:
            raise TypeError("no schema for this stream")
        return self._schema()
