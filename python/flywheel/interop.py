"""Ingest and Parquet: bring files into tables, read Parquet into numpy.

    import flywheel
    flywheel.ingest(["data/*.parquet"], "/tables/train")        # one commit, provenance recorded
    cols = flywheel.read_parquet("part-0.parquet", columns=["id", "text"])

Parquet is read by flywheel's own reader (every physical type, encoding and
codec of the format; lists, structs, maps). Columns come back in the forms of
``Table.scan`` (docs/python.md): numpy arrays (masked where a value is null),
lists of ``str``/``bytes`` for strings and binary, ``ListArray`` for lists of
numbers; structs are flattened to ``"struct.field"`` columns and other
nested values are JSON text — the same mapping ``ingest`` uses (docs/ingest.md).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _core
from .table import _is_arrow
from . import catalog as _catalog
from ._convert import batch_from_core

__all__ = ["read_parquet", "parquet_schema", "ingest"]


def _strs(x: Optional[Union[str, Sequence[str]]]) -> List[str]:
    if x is None:
        return []
    if isinstance(x, str):
        return [x]
    return [str(s) for s in x]


def read_parquet(path: str, columns: Optional[Sequence[str]] = None, threads: int = 0) -> Dict[str, Any]:
    """The file's columns as ``{name: data}``; ``columns`` picks top-level
    fields (nested ones as lists of Python objects: structs as dicts, lists as
    lists, maps as dicts, None for nulls). Row groups are read in
    parallel on ``threads`` threads (0: one per CPU).

    Raises FileNotFoundError for a missing file, KeyError for an unknown
    column, ValueError for a file that is not valid Parquet (the message names
    the row group, column and page).
    """
    try:
        return batch_from_core(_core.read_parquet(str(path), _strs(columns), int(threads)))
    except FileNotFoundError as e:
        if "has no column" in str(e):
            raise KeyError(str(e)) from None
        raise


def parquet_schema(path: str) -> Dict[str, Any]:
    """``{"fields": [(name, parquet type, nullable)], "table_schema": text,
    "num_rows": n, "row_groups": k}`` without reading any data;
    ``table_schema`` is the schema ``ingest`` would create."""
    fields, schema, rows, groups = _core.parquet_schema(str(path))
    return {"fields": [tuple(f) for f in fields], "table_schema": schema, "num_rows": rows, "row_groups": groups}


def ingest(sources: Union[str, Sequence[str]], table: str, *, format: str = "auto",
           columns: Optional[Sequence[str]] = None, threads: int = 0, on_error: str = "fail",
           commit_every: int = 0, schema: Optional[str] = None, types: Optional[Mapping[str, str]] = None,
           delimiter: str = ",", header: bool = True,
           progress: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """Reads ``sources`` (paths, directories or glob patterns) into ``table``
    (created with the first source's schema when absent) as one commit, or
    one per ``commit_every`` sources.

    ``sources`` may also be an Arrow object (``__arrow_c_stream__`` or
    ``__arrow_c_array__``: a pyarrow Table or RecordBatchReader, a Polars
    DataFrame, a DuckDB result): its batches are appended as one commit
    without a Python row loop (the table is created with its schema when
    absent); the file options below do not apply. Each source's path, size, XXH3-64
    checksum and row count are recorded in the commit's properties
    (``ingest.sources``).

    format: "auto" (from the file name), "parquet", "jsonl", "csv", "wds"
      (WebDataset tar shards, .tar/.tar.gz) or "files" (a directory: rows of
      path and bytes).
    on_error: "fail" (default: the first bad source raises and nothing is
      committed), "skip" (bad sources are left out and listed in the result
      and the commit), "quarantine" (as skip, and copied to TABLE/_quarantine/).
    schema / types / delimiter / header: JSONL and CSV: a schema text
      ("a:int64, b:string?") instead of inference, per-field type overrides,
      the CSV delimiter and whether the first row is a header.
    progress: called about twice a second with {"files_done", "files_total",
      "files_failed", "rows", "bytes_done", "bytes_total", "seconds"}.

    Returns {"rows", "versions", "seconds", "files_failed", "sources": [...]}.
    Ctrl-C (KeyboardInterrupt) stops the ingest; the table stays at its last
    commit.
    """
    if _is_arrow(sources):
        return _ingest_arrow(sources, table)
    where = _catalog._authorize(table, "WRITE", "ingest", create=True)
    result = _core.ingest(_strs(sources), where, format=format, columns=_strs(columns), threads=int(threads),
                          on_error=on_error, commit_every=int(commit_every), schema=schema or "",
                          overrides=dict(types or {}), delimiter=delimiter, header=bool(header), progress=progress)
    inputs, detail = [], {}
    for src in result.get("sources", []):
        if not src.get("error"):
            node = "file:" + src["path"]
            inputs.append(node)
            # The keys `flywheel ingest` records too.
            detail[node] = {"format": src.get("format"), "size_bytes": src.get("size"), "rows": src.get("rows"),
                            "xxh3_64": src.get("checksum")}
    _catalog._record_op("ingest", f"ingest:{table}", inputs, [(where, v) for v in result.get("versions", [])],
                        {"format": format, "on_error": on_error}, detail)
    return result


def _ingest_arrow(data: Any, table: str) -> Dict[str, Any]:
    """ingest() of an Arrow object: one commit, lineage from ``arrow:<type>``."""
    import time as _time
    from .table import Table
    start = _time.monotonic()
    where = _catalog._authorize(table, "WRITE", "ingest", create=True)
    try:
        t = Table.open(where)
    except FileNotFoundError:
        t = None
    if t is not None:
        before, rows_before = t.version, t.num_rows
        t.append(data)
    else:
        t = Table.create(where, data)
        before, rows_before = 0, 0
    versions = list(range(before + 1, t.version + 1))
    rows = t.num_rows - rows_before
    source = f"arrow:{type(data).__module__}.{type(data).__name__}"
    _catalog._record_op("ingest", f"ingest:{table}", [source], [(where, v) for v in versions],
                        {"format": "arrow"}, {source: {"rows": rows}})
    return {"rows": rows, "versions": versions, "seconds": _time.monotonic() - start, "files_failed": 0,
            "sources": [{"path": source, "format": "arrow", "rows": rows}]}
