"""Versioned columnar tables (the Python face of src/flywheel/table/table.h).

A :class:`Table` is a handle on one version of a table. Reads see exactly
that version; each write commits a new version and moves the handle to it.
docs/python.md describes the data conventions (dtypes, nulls, list columns,
zero-copy views) and the exceptions raised.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core
from . import catalog as _catalog
from ._convert import batch_from_core, column_to_core, indices_to_core
from .batch import ArrowStream, Batch

__all__ = ["Table"]

SchemaLike = Union[Mapping[str, str], str]
PathLike = Union[str, "os.PathLike[str]"]


def _fields_of(schema: SchemaLike) -> List[Tuple[str, str, bool, str]]:
    """(name, type, nullable, default_json) tuples for a dict or text schema."""
    if isinstance(schema, str):
        return [tuple(f) for f in _core.parse_schema(schema)]
    if not isinstance(schema, Mapping):
        raise TypeError(f"schema must be a dict of name -> type or a text schema, got {type(schema).__name__}")
    fields = []
    for name, type_text in schema.items():
        if not isinstance(name, str) or not isinstance(type_text, str):
            raise TypeError(f"schema entries must be str -> str, got {name!r}: {type_text!r}")
        type_text = type_text.strip()
        nullable = type_text.endswith("?")
        fields.append((name, type_text[:-1].rstrip() if nullable else type_text, nullable, ""))
    return fields


def _props(properties: Optional[Mapping[str, Any]]) -> Dict[str, str]:
    if properties is None:
        return {}
    if not isinstance(properties, Mapping):
        raise TypeError(f"properties must be a dict, got {type(properties).__name__}")
    return {str(k): str(v) for k, v in properties.items()}


def _names(columns: Optional[Iterable[str]]) -> List[str]:
    if columns is None:
        return []
    if isinstance(columns, str):
        return [columns]
    return list(columns)


def _batch(core: "_core.ArrowBatch") -> Batch:
    """A scan or take batch (masked in C++ where the catalog says): the
    columns, and the same buffers' Arrow form."""
    return Batch(batch_from_core(core.to_dict()), core)


def _is_arrow(obj: Any) -> bool:
    """Whether ``obj`` speaks the Arrow PyCapsule interface (and is not a dict of columns)."""
    return not isinstance(obj, (Mapping, str)) and (
        hasattr(obj, "__arrow_c_stream__") or hasattr(obj, "__arrow_c_array__"))


def _remove_new(path: str, before: Optional[set]) -> None:
    """Removes what a failed create left at ``path`` (entries that were not there before)."""
    if before is None:
        shutil.rmtree(path, ignore_errors=True)
        return
    for name in set(os.listdir(path)) - before if os.path.isdir(path) else ():
        full = os.path.join(path, name)
        if os.path.isdir(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            os.unlink(full)


class Table:
    """A handle on one version of a flywheel table.

    Create one with :meth:`create` or :meth:`open`. Handles are cheap and safe
    to share between threads (calls on one handle are serialized where the
    C++ library requires it); every call that touches storage releases the
    GIL.
    """

    __slots__ = ("_t", "_policy")

    def __init__(self, core: "_core.Table"):
        """Internal: wraps a ``_core.Table``. Use :meth:`create` or :meth:`open`."""
        if not isinstance(core, _core.Table):
            raise TypeError("use flywheel.Table.create() or flywheel.Table.open()")
        self._t = core
        self._policy: Any = False  # the catalog's masking for this reader; False = not looked up yet

    # ------------------------------------------------------------------ open

    @classmethod
    def create(cls, path: PathLike, schema: Any, *, codec: str = "none",
               page_size: Optional[int] = None,
               properties: Optional[Mapping[str, Any]] = None) -> "Table":
        """Creates an empty table (version 1) at ``path``, or, given Arrow
        data instead of a schema, a table with that data's schema (version 1)
        and rows (version 2, one commit however many batches).

        Args:
          path: table directory; must not hold a table yet (FileExistsError).
          schema: an Arrow object (anything with ``__arrow_c_stream__`` or
            ``__arrow_c_array__``: a pyarrow Table, RecordBatch or
            RecordBatchReader, a Polars DataFrame, a DuckDB result), read
            without a Python row loop; its types map as docs/arrow.md says,
            an unsupported type raises ValueError naming the column, and a
            failure leaves no table behind. Or a schema:
            ``{"x": "int64", "emb": "float32[16]", "name": "string?"}``
            or the text form ``"x:int64, emb:float32[16], name:string?"``. A
            trailing ``?`` makes a column nullable. Types: bool, int8..int64,
            uint8..uint64, float16, float32, float64, tensors such as
            ``uint8[32,32,3]``, string, binary, and nested types at any depth:
            ``list<int32>``, ``list<string?>``, ``map<string, float64>``,
            ``list<struct<role: string, content: string?>>`` (``?`` inside
            marks that value nullable; docs/format/types.md).
          codec: page codec for data written later: "none" (pages are mapped
            zero-copy), "lz4" or "zstd".
          page_size: target uncompressed bytes per page (1 KiB..64 MiB);
            default 256 KiB.
          properties: str -> str recorded with the commit (values are str()-ed).

        The codec and page size become the table's :attr:`config`, which
        every later writer follows.

        Raises:
          ValueError: bad schema, type, codec or page size.
          FileExistsError: a table exists at ``path``.
        """
        where = _catalog._authorize(path, "WRITE", "create", create=True)
        if _is_arrow(schema):
            before = set(os.listdir(where)) if os.path.isdir(where) else None
            try:
                core = _core.Table.create_arrow(where, schema, codec, page_size, _props(properties))
            except BaseException:
                _remove_new(where, before)
                raise
            t = cls(core)
            t._written("create", None)
            return t
        core = _core.Table.create(where, _fields_of(schema), codec, page_size, _props(properties))
        t = cls(core)
        t._written("create", None)
        return t

    @classmethod
    def from_pylist(cls, path: PathLike, rows: Sequence[Mapping[str, Any]], schema: Any = None, *,
                    codec: str = "none", page_size: Optional[int] = None,
                    properties: Optional[Mapping[str, Any]] = None) -> "Table":
        """Creates a table at ``path`` from a list of row dicts of Python
        values (nested columns as dicts, lists and None), the inverse of
        :meth:`to_pylist`: ``Table.from_pylist(p, rows, s).to_pylist() == rows``
        for rows that hold every column.

        ``schema`` as :meth:`create` takes it (a key a row lacks reads null);
        None infers one with ``pyarrow.Table.from_pylist`` (every column and
        nested value nullable). A failure (a key outside the schema, a value
        of the wrong type: KeyError/TypeError/ValueError naming the row and
        path) leaves no table behind.
        """
        rows = list(rows)
        for i, r in enumerate(rows):
            if not isinstance(r, Mapping):
                raise TypeError(f"row {i} is a {type(r).__name__}, need a dict of column -> value")
        if schema is None:
            import pyarrow as pa
            return cls.create(path, pa.Table.from_pylist(rows), codec=codec, page_size=page_size,
                              properties=properties)
        t = cls.create(path, schema, codec=codec, page_size=page_size, properties=properties)
        try:
            names = list(t.schema)
            for i, r in enumerate(rows):
                for k in r:
                    if k not in t.schema:
                        raise KeyError(f"row {i}: no column '{k}' in the schema ({', '.join(names)})")
            if rows:
                t.append({n: [r.get(n) for r in rows] for n in names}, properties)
        except BaseException:
            shutil.rmtree(t.path, ignore_errors=True)
            raise
        return t

    def leaf_stats(self, column: str) -> Dict[str, Dict[str, Any]]:
        """Statistics per leaf of nested column ``column``, merged over this
        version's data files from their footers (no data read):
        ``{"messages[].role": {"values": n, "nulls": k, "min": ..., "max": ...}}``.
        Paths: ``.field`` for struct fields, ``[]`` for list elements,
        ``[key]`` / ``[value]`` for maps. ``values`` counts the slots that
        exist (not those under a null parent), nulls included; ``min``/``max``
        are floats for numbers and bytes for strings and binary (absent when
        every value is null; strings over 64 bytes set ``bounds_incomplete``).
        Deleted rows still count (file statistics are bounds). Raises KeyError
        for an unknown column, ValueError for a flat one."""
        try:
            return self._t.leaf_stats(column)
        except FileNotFoundError as e:
            raise KeyError(str(e)) from None

    def to_pylist(self, columns: Optional[Sequence[str]] = None) -> list:
        """This version's rows as a list of ``{column: value}`` dicts of plain
        Python values (nested columns as dicts, lists and None; maps as
        dicts; tensors as nested lists; nulls as None)."""
        return self.to_dict(columns).to_pylist()

    @classmethod
    def open(cls, path: PathLike, version: Optional[int] = None, tag: Optional[str] = None) -> "Table":
        """Opens the latest version, or ``version``, or the version ``tag`` names.

        New data written through the handle follows the table's config
        (codec and page size chosen at :meth:`create`; see :attr:`config`).

        Raises:
          FileNotFoundError: no table at ``path``, no such version (the
            message lists the retained range) or no such tag.
          ValueError: both ``version`` and ``tag`` given.
        """
        return cls(_core.Table.open(_catalog._authorize(path, "READ", "open"), version, tag))

    # ------------------------------------------------------------ properties

    @property
    def path(self) -> str:
        """The table directory."""
        return self._t.path

    @property
    def version(self) -> int:
        """The version this handle reads (and last committed)."""
        return self._t.version

    @property
    def num_rows(self) -> int:
        """Live rows of this version."""
        return self._t.num_rows

    def __len__(self) -> int:
        return self._t.num_rows

    @property
    def schema(self) -> Dict[str, str]:
        """Column name -> type text, with a trailing ``?`` for nullable columns."""
        return {name: type_text + ("?" if nullable else "") for name, type_text, nullable, _ in self._t.fields()}

    @property
    def config(self) -> Dict[str, str]:
        """Table settings every writer follows, fixed at create:
        ``{"codec": ..., "page_size": ..., "zstd_level": ...}``."""
        return dict(self._t.config())

    @property
    def defaults(self) -> Dict[str, Any]:
        """Column name -> the value rows written before the column existed read
        (columns added with a default only)."""
        return {name: bool(json.loads(d)) if type_text == "bool" else json.loads(d)
                for name, type_text, _, d in self._t.fields() if d}

    def __repr__(self) -> str:
        return f"flywheel.Table({self.path!r}, version={self.version}, num_rows={self.num_rows})"

    # -------------------------------------------------------------- versions

    def versions(self) -> List[Dict[str, Any]]:
        """Retained versions, oldest first, as dicts with keys version,
        timestamp_ms, operation (create, append, overwrite, delete,
        add_column, compact), writer, properties, details, num_rows and
        num_fragments."""
        return self._t.versions()

    def checkout(self, version: int) -> "Table":
        """A new handle on ``version`` of this table (FileNotFoundError if it
        is not retained). Shares this handle's open files."""
        return Table(self._t.checkout(version))

    def latest(self) -> "Table":
        """A new handle on the newest committed version."""
        return Table(self._t.checkout_latest())

    def latest_version(self) -> int:
        """The newest committed version number (may be newer than :attr:`version`)."""
        return self._t.latest_version()

    # ----------------------------------------------------------------- reads

    def scan(self, columns: Optional[Sequence[str]] = None,
             batch_rows: Optional[int] = None) -> Iterator[Dict[str, Any]]:
        """Iterates over this version in batches of ``{column: data}``.

        With ``batch_rows`` None, batches follow page boundaries and
        uncompressed fixed-width columns are zero-copy read-only views of the
        memory-mapped data files; otherwise batches have exactly
        ``batch_rows`` rows (the last may be shorter).

        Per column: fixed-width -> ndarray ``(n,)`` or ``(n, *shape)``
        (``numpy.ma.MaskedArray`` when it has nulls, mask True = null);
        string/binary -> list of str/bytes (None = null); ``list<T>`` ->
        :class:`~flywheel.ListArray`, a tuple ``(offsets, values)`` with
        ``n + 1`` int64 offsets starting at 0 and a ``mask`` attribute.

        Raises KeyError for an unknown column (at the call, not on iteration).
        """
        guard = self._read_check(columns)
        it = self._t.scan(_names(columns), int(batch_rows or 0), guard)
        _catalog._note_read(self.path, self.version)
        return (_batch(b) for b in it)

    def take(self, indices: Union[Sequence[int], np.ndarray],
             columns: Optional[Sequence[str]] = None) -> Batch:
        """Rows at ``indices`` (live-row numbers of this version, any order,
        repeats allowed) as ``{column: data}`` (same forms as :meth:`scan`),
        a :class:`~flywheel.Batch` that Arrow readers also take directly.

        Raises IndexError for an index outside ``[0, num_rows)`` (negative
        indices are not wrapped), KeyError for an unknown column.
        """
        guard = self._read_check(columns)
        core = self._t.take(indices_to_core(indices), _names(columns), guard)
        _catalog._note_read(self.path, self.version)
        return _batch(core)

    def _read_check(self, columns: Optional[Sequence[str]]):
        """With a catalog: READ checked and audited, and the column rules this
        reader gets (a ``_core.ReadGuard``; None: none), which the C++ read
        applies. Refused columns raise PermissionError (audited)."""
        if _catalog.default_catalog() is None:
            return None
        _catalog._authorize(self.path, "READ", "read")
        guard = self._guard()
        if guard is not None:
            guard.check_read(_names(columns))
        return guard

    def _guard(self):
        """The catalog's column rules for this reader (a ``_core.ReadGuard``, or
        None), looked up once per handle and shared by reads, exports and
        predicates."""
        if self._policy is False:
            self._policy = _catalog._policy_for([self.path])
        return self._policy

    def to_dict(self, columns: Optional[Sequence[str]] = None) -> Dict[str, Any]:
        """The whole version as one ``{column: data}`` batch (copies)."""
        n = self.num_rows
        if n == 0:
            return self.take([], columns)
        for batch in self.scan(columns, batch_rows=n):
            return batch
        return self.take([], columns)  # rows vanished: cannot happen for one version

    # ------------------------------------------------------------------ Arrow

    def _export_check(self, columns: Optional[Sequence[str]]) -> None:
        """With a catalog: READ checked and audited as an export; a file
        export refuses every uncleared tagged column it would write, whatever
        the mode (files leave the catalog's reach, so they are never masked)."""
        if _catalog.default_catalog() is None:
            return
        _catalog._authorize(self.path, "READ", "export")
        guard = self._guard()
        if guard is not None:
            guard.check_export(_names(columns) or list(self.schema), self.path)

    def _arrow_stream(self, columns: Optional[Sequence[str]] = None, where: Optional[str] = None,
                      batch_rows: Optional[int] = None) -> ArrowStream:
        # An Arrow stream is a read: masked as scan is (file exports refuse).
        guard = self._read_check(columns)
        self._predicate_check(where, "read")
        names = _names(columns)
        rows = int(batch_rows or 0)
        # Made now, so errors (KeyError, ValueError) come from this call; the
        # first reader takes this stream, later ones get new ones.
        first = self._t.arrow_stream(names, where, rows, guard)
        _catalog._note_read(self.path, self.version)
        return ArrowStream(lambda: self._t.arrow_stream(names, where, rows, guard), self._t.arrow_schema, first)

    def __arrow_c_stream__(self, requested_schema: Any = None):
        """Arrow PyCapsule interface: this version as a stream of record
        batches (page-sized; fixed-width uncompressed pages zero-copy)."""
        return self._arrow_stream().__arrow_c_stream__()

    def __arrow_c_schema__(self):
        """Arrow PyCapsule interface: this table's schema as an Arrow struct."""
        return self._t.arrow_schema()

    def to_arrow_reader(self, columns: Optional[Sequence[str]] = None, *, where: Optional[str] = None,
                        batch_rows: Optional[int] = None):
        """A ``pyarrow.RecordBatchReader`` over this version (streamed: one
        page-sized batch at a time, or ``batch_rows`` rows). ``where`` keeps
        the rows matching ``"column OP value"`` (as :meth:`delete` takes it)."""
        import pyarrow as pa
        return pa.RecordBatchReader.from_stream(self._arrow_stream(columns, where, batch_rows))

    def to_arrow(self, columns: Optional[Sequence[str]] = None, *, version: Optional[int] = None,
                 where: Optional[str] = None):
        """This version (or ``version``) as a ``pyarrow.Table``.

        Uncompressed fixed-width pages are not copied: the Arrow buffers point
        into the memory-mapped shard files, which stay mapped as long as any
        Arrow object refers to them (the Table handle may go first). Types map
        as docs/arrow.md says (tensors become ``arrow.fixed_shape_tensor``).

        Raises KeyError for an unknown column, ValueError for a malformed
        ``where``, FileNotFoundError for a version that is not retained.
        """
        t = self if version is None else self.checkout(version)
        return t.to_arrow_reader(columns, where=where).read_all()

    def to_parquet(self, path: str, columns: Optional[Sequence[str]] = None, codec: str = "zstd",
                   row_group_rows: int = 122880) -> int:
        """Writes this version as one Parquet file (which must not exist) that
        DuckDB, Arrow, Spark and pandas read; returns the rows written.
        Columns ingested from Parquet dates, timestamps and decimals get those
        types back (docs/ingest.md, "Export"). codec: none, snappy, gzip,
        brotli, zstd or lz4_raw."""
        self._export_check(columns)
        n = _core.export_parquet(self.path, self.version, str(path), _names(columns), codec, int(row_group_rows))
        out = "file:" + os.path.abspath(str(path))
        _catalog._record_op("export", f"export:{self.path}", [(self.path, self.version)], [out],
                            {"codec": codec}, {out: {"rows": n}})
        return n

    # ---------------------------------------------------------------- writes

    def _core_columns(self, data: Mapping[str, Any], fields) -> Dict[str, tuple]:
        if not isinstance(data, Mapping):
            raise TypeError(f"data must be a dict of column -> values, got {type(data).__name__}")
        by_name = {f[0]: f for f in fields}
        out = {}
        for name, values in data.items():
            f = by_name.get(name)
            if f is None:
                cols = ", ".join(f"{n}:{t}{'?' if nl else ''}" for n, t, nl, _ in fields)
                raise KeyError(f"no column '{name}' in table {self.path} (columns: {cols})")
            out[name] = column_to_core(name, f[1], f[2], values)
        return out

    def append(self, data: Any, properties: Optional[Mapping[str, Any]] = None) -> int:
        """Appends rows and commits a version; returns the new version.

        ``data`` may be an Arrow object (``__arrow_c_stream__`` or
        ``__arrow_c_array__``: pyarrow, Polars, DuckDB, ...): every batch is
        written and committed as one version, or nothing is when any batch
        fails (unknown column, type mismatch, nulls in a non-nullable column,
        an unsupported type: ValueError/KeyError naming the column). A stream
        of no rows commits nothing. Otherwise:

        ``data`` maps column names to values, all with the same row count:
        numpy arrays (or sequences) for fixed-width columns, shape ``(n,)``
        or ``(n, *shape)`` for tensors; lists of str (string) or bytes
        (binary); for ``list<T>`` a list of sequences or a ListArray. None
        entries or a masked array give nulls (nullable columns only).
        Omitted columns read null or their default (else ValueError).

        numpy arrays must have the column's dtype or one that casts to it
        safely (``np.can_cast(src, dst, "safe")``, e.g. int32 -> int64), else
        TypeError; Python sequences are converted by value (ints must fit,
        floats may round into float16/float32, floats are refused for integer
        columns).

        Raises:
          KeyError: a column the schema lacks.
          TypeError / ValueError: values of the wrong kind, dtype, shape or
            length, or nulls in a non-nullable column.
          flywheel.CommitConflict: a concurrent overwrite won.
        """
        self._write_check()
        before = self.version
        if _is_arrow(data):
            self._t.append_arrow(data, _props(properties))
        else:
            self._t.append(self._core_columns(data, self._t.fields()), _props(properties))
        if self.version != before:
            self._written("append", before)
        return self.version

    def overwrite(self, data: Mapping[str, Any], *, schema: Optional[SchemaLike] = None,
                  properties: Optional[Mapping[str, Any]] = None) -> int:
        """Replaces all rows (and, with ``schema``, the schema) in one commit;
        returns the new version. Every non-nullable column must be given;
        omitted nullable ones read null. Older versions keep their rows."""
        fields = _fields_of(schema) if schema is not None else self._t.fields()
        self._write_check()
        cols = self._core_columns(data, fields)
        before = self.version
        self._t.overwrite(cols, None if schema is None else fields, _props(properties))
        self._written("overwrite", before)
        return self.version

    def delete(self, indices: Union[Sequence[int], np.ndarray, None] = None, *,
               where: Optional[str] = None, properties: Optional[Mapping[str, Any]] = None) -> int:
        """Deletes rows by live-row index of this version, or those matching
        ``where`` (``"column OP value"``, OP one of == != < <= > >=, e.g.
        ``"x >= 10"`` or ``'name == "a"'``). Returns the number of rows deleted.

        Raises IndexError for an index out of range, KeyError for an unknown
        column in ``where``, ValueError for a malformed predicate, and
        flywheel.CommitConflict when a concurrent compaction or delete of the
        same rows won.
        """
        if (indices is None) == (where is None):
            raise ValueError("give indices or where=..., not both")
        self._write_check()
        self._predicate_check(where, "delete")
        before = self.version
        if where is not None:
            n = self._t.delete_where(where, _props(properties))
        else:
            n = self._t.delete(indices_to_core(indices), _props(properties))
        if self.version != before:
            self._written("delete", before)
        return n

    def add_column(self, name: str, type: str, nullable: bool = False, default: Any = None,
                   properties: Optional[Mapping[str, Any]] = None) -> int:
        """Adds a column; existing rows read ``default`` (a number, bool or
        str; stored as JSON) or null. ``type`` may end in ``?`` for nullable.
        Returns the new version.

        Raises ValueError when a non-nullable column has no default,
        FileExistsError when the column exists.
        """
        type_text = type.strip()
        if type_text.endswith("?"):
            nullable, type_text = True, type_text[:-1].rstrip()
        if isinstance(default, np.generic):
            default = default.item()
        if default is None:
            default_json = ""
        elif isinstance(default, bool):
            # As 1/0: the C++ default filler reads JSON true/false as a number
            # and throws (reported); 1/0 means the same for every numeric type.
            default_json = "1" if default else "0"
        else:
            default_json = json.dumps(default)
        self._write_check()
        before = self.version
        self._t.add_column(name, type_text, bool(nullable), default_json, _props(properties))
        self._written("add_column", before)
        return self.version

    def compact(self, target_rows: Optional[int] = None, *, max_deleted_fraction: Optional[float] = None,
                properties: Optional[Mapping[str, Any]] = None) -> int:
        """Rewrites fragments with fewer than ``target_rows`` live rows
        (default 1M) or at least ``max_deleted_fraction`` deleted (default
        0.1); returns the number of fragments rewritten (0: nothing to do,
        no commit)."""
        self._write_check()
        before = self.version
        n = self._t.compact(target_rows, max_deleted_fraction, _props(properties))
        if self.version != before:
            self._written("compact", before)
        return n

    def _write_check(self) -> None:
        if _catalog.default_catalog() is not None:
            _catalog._authorize(self.path, "WRITE", "write")

    def _predicate_check(self, where: Optional[str], action: str) -> None:
        """With a catalog: a predicate reads its column, so one on a tagged
        column the principal is not cleared for is refused (and audited) as
        reading that column is; otherwise which rows match would leak."""
        if where is None or _catalog.default_catalog() is None:
            return
        guard = self._guard()
        if guard is not None:
            guard.check_predicate(_core.predicate_column(where), self.path, action)

    def _written(self, op: str, before: Optional[int]) -> None:
        """Lineage of a write: an output of the active flywheel.run, or a run
        of its own when a catalog is configured (docs/catalog.md)."""
        run = _catalog.current_run()
        cat = run.catalog if run is not None and run.id is not None else _catalog.default_catalog()
        if cat is not None:
            # recorder.h RecordTableWrite: the commit audited, the version an
            # output of the active run or of a run of its own.
            cat._c.record_table_write(run.id if run is not None and run.id else "", op, self.path,
                                      int(before or 0), self.version)

    # ------------------------------------------------------ version management

    def tag(self, name: str, version: Optional[int] = None) -> None:
        """Names ``version`` (default: this handle's). Tagged versions are
        never expired. FileExistsError if the tag exists, ValueError for a bad
        name (letters, digits, - _ .)."""
        self._write_check()
        self._t.tag(name, version)

    def untag(self, name: str) -> None:
        """Removes a tag (FileNotFoundError if there is none)."""
        self._write_check()
        self._t.untag(name)

    def tags(self) -> Dict[str, int]:
        """Tag name -> version."""
        return dict(self._t.tags())

    def expire(self, keep_last: int = 1, older_than_seconds: Optional[float] = None) -> List[int]:
        """Drops old versions' manifests: all but the newest ``keep_last``
        (and, with ``older_than_seconds``, only those older than that);
        tagged versions and the latest are always kept. Returns the versions
        expired. Their data files stay until :meth:`vacuum`."""
        self._write_check()
        older_than_ms = None
        if older_than_seconds is not None:
            older_than_ms = int(time.time() * 1000 - float(older_than_seconds) * 1000)
        return list(self._t.expire(int(keep_last), older_than_ms))

    def vacuum(self, grace_seconds: float = 3600, dry_run: bool = False) -> List[str]:
        """Deletes data and deletion files no retained version references and
        that are older than ``grace_seconds`` (so files of writers still
        running are kept). Returns their paths relative to the table (those
        that would be deleted, with ``dry_run``)."""
        self._write_check()
        deleted, _ = self._t.vacuum(int(float(grace_seconds) * 1000), bool(dry_run))
        return list(deleted)
