"""flywheel.Loader: deterministic, sharded, resumable batches from tables.

The order of an epoch is a pure function of ``(seed, epoch, position)``; each
global batch is the rank-ordered concatenation of the ranks' batches, so every
row is served exactly once per epoch over all ranks, and the loader's state
is the number of positions consumed. A state saved at one world size or batch
size resumes at another without repeating or skipping a row. Reading runs
ahead of the consumer on C++ threads (the GIL is released while waiting), and
batches are handed over without a copy: fixed-width columns are numpy arrays
over the loader's own batch buffers (writable; they stay alive as long as any
array over them). Design, state format and errors: docs/loader.md.

Example::

    import flywheel
    loader = flywheel.Loader("data/cifar", batch_size=256, seed=0,
                             rank=rank, world_size=world_size)
    for epoch in range(3):
        for batch in loader:            # one epoch; then the loader moves on
            train_step(batch["image"], batch["label"])
        ckpt = loader.state_dict()      # a small JSON-able dict
    loader.load_state_dict(ckpt)        # resume, at any world/batch size
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core
from . import catalog as _catalog
from .batch import Batch
from ._convert import batch_from_core

__all__ = ["Loader"]

TableLike = Union[str, "os.PathLike[str]", Any]  # a path or a flywheel.Table

_FORMATS = ("numpy", "torch")


def _table_ref(t: TableLike, version: Optional[int], tag: Optional[str]):
    """(uri, version, tag) for a path or an open flywheel.Table (pinned to its version)."""
    if hasattr(t, "path") and hasattr(t, "version") and not isinstance(t, (str, bytes, os.PathLike)):
        if version is not None or tag is not None:
            raise ValueError("version= and tag= apply to table paths; an open Table is read at its own version")
        return (_catalog._authorize(str(t.path), "READ", "read"), int(t.version), None)
    if not isinstance(t, (str, os.PathLike)):
        raise TypeError(f"tables: expected a path or a flywheel.Table, got {type(t).__name__}")
    if version is not None and tag is not None:
        raise ValueError("pass at most one of version= and tag=")
    return (_catalog._authorize(t, "READ", "read"), version, tag)


def _table_files(paths: Sequence[str]) -> List[str]:
    """The data files of the latest versions of the tables at ``paths``, as
    their manifests list them (the C++ table layer; no directory walk)."""
    files: List[str] = []
    for p in paths:
        files.extend(_core.Table.open(os.fspath(p)).data_files())
    return files


def _read_files(files: Sequence[str], budget: Optional[int] = None) -> Tuple[int, float]:
    """Sequential read() of ``files`` in 1 MiB reads into one buffer, up to
    ``budget`` bytes (None: all); returns (bytes, seconds)."""
    mv = memoryview(bytearray(1 << 20))
    total, t0 = 0, time.perf_counter()
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            while budget is None or total < budget:
                n = os.readv(fd, [mv])
                if n <= 0:
                    break
                total += n
        finally:
            os.close(fd)
        if budget is not None and total >= budget:
            break
    return total, time.perf_counter() - t0


def _measure_read_bandwidth(paths: Sequence[str], budget: int = 64 << 20) -> float:
    """Sequential read() bandwidth of the tables' data files (up to ``budget``
    bytes; the page cache as it is): the ceiling stats() compares the
    loader's throughput with."""
    total, dt = _read_files(_table_files(paths), budget)
    return total / dt if total and dt > 0 else 0.0


class Loader:
    """Batches of one table or a weighted mixture of tables, for one rank.

    Args:
      tables: a table path or ``flywheel.Table``, or a list of them (a
        mixture; see ``mixture_weights``).
      version, tag: which version of the table(s) given by path (default:
        the latest at open). An open ``Table`` is read at its own version.
      columns: columns to load, in order (default: all of the first table).
      batch_size: rows per rank per batch.
      shuffle: False serves rows in table order.
      seed, epoch: the order's seed and the epoch to start at.
      rank, world_size: this process's rank and the number of ranks.
      num_threads: C++ threads reading ahead (results never depend on it).
      prefetch_bytes: memory the read-ahead may use (batches + page cache).
      drop_last: end each epoch at its last full global batch; otherwise
        the tail is split between ranks (some may get short batches).
      transforms: a list of C++ transforms and Python callables.
        ``flywheel.transforms.DecodeImage(column, ...)`` decodes a JPEG
        column on the loader's threads (whatever its place in the list);
        callables are then applied in order to each batch dict of already
        batched arrays, e.g. ``lambda b: {**b, "x": b["x"] / 255}`` or
        ``flywheel.transforms.PackTokens("tokens", 2048)``; a dict
        ``{column: fn}`` applies ``fn`` to one column.
      on_error: "fail" (default: a row a transform cannot process, e.g. an
        undecodable image, raises naming table, row and column) or "skip"
        (the row is left out of its batch and counted in
        ``stats()["skipped_rows"]``).
      mixture_weights: one weight per table (default: proportional to rows).
      samples_per_epoch: mixtures: positions per epoch (default: all rows).
      format: "numpy" (default) or "torch" (zero-copy ``torch.from_numpy``).
      shuffle_mode: "row" (every row placed independently) or "block"
        (I/O-aware: blocks of ``block_rows`` consecutive rows are shuffled,
        then rows within windows of ``window_blocks`` blocks).
      timeout: seconds a batch may take before ``TimeoutError`` (None: no limit).
      use_io_uring: read compressed pages (and pages of files that are not
        memory-mapped) in one io_uring batch per batch and column (default;
        falls back to pread where io_uring is unavailable, reported in
        ``stats()["uring_unavailable"]``). False: pread page by page.
      consumer_spin_us: when a batch is not ready, the iterator polls
        (yielding the CPU) this many microseconds before sleeping, so the
        worker finishing the batch need not wake a sleeping thread (costly on
        virtual machines; docs/loader.md, "Waiting"). 0: sleep at once; -1
        (default): 200 when ``num_threads`` leaves a CPU free, else 0.
      return_indices: add ``"__index__"`` (row index in its table) and, for
        mixtures, ``"__table__"`` to each batch.
    """

    def __init__(self, tables: Union[TableLike, Sequence[TableLike]], *, batch_size: int,
                 version: Optional[int] = None, tag: Optional[str] = None,
                 columns: Optional[Iterable[str]] = None, shuffle: bool = True, seed: int = 0, epoch: int = 0,
                 rank: int = 0, world_size: int = 1, num_threads: int = 2, prefetch_bytes: int = 256 << 20,
                 drop_last: bool = False,
                 transforms: Optional[Union[Callable, Sequence[Callable], Mapping[str, Callable]]] = None,
                 mixture_weights: Optional[Sequence[float]] = None, samples_per_epoch: int = 0,
                 format: str = "numpy", shuffle_mode: str = "row", block_rows: int = 0, window_blocks: int = 16,
                 timeout: Optional[float] = None, return_indices: bool = False, on_error: str = "fail",
                 use_io_uring: bool = True, consumer_spin_us: int = -1):
        if isinstance(tables, (list, tuple)):
            refs = [_table_ref(t, version, tag) for t in tables]
        else:
            refs = [_table_ref(tables, version, tag)]
        if not refs:
            raise ValueError("tables: need at least one table")
        if format not in _FORMATS:
            raise ValueError(f"format={format!r}: expected one of {_FORMATS}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
            raise TypeError(f"batch_size must be an int, got {type(batch_size).__name__}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout}")
        self._format = format
        self._timeout = timeout
        self._return_indices = return_indices
        from .transforms import DecodeImage
        if isinstance(transforms, (list, tuple)):
            images = [t for t in transforms if isinstance(t, DecodeImage)]
            transforms = [t for t in transforms if not isinstance(t, DecodeImage)]
        elif isinstance(transforms, DecodeImage):
            images, transforms = [transforms], None
        else:
            images = []
        self._transforms = self._normalize_transforms(transforms)
        self._paths = [r[0] for r in refs]
        # The catalog's column rules for this reader (docs/catalog.md), applied
        # by the C++ loader: refused columns fail the open, masked ones are
        # replaced in every batch before it reaches Python.
        self._policy = _catalog._policy_for(self._paths)
        try:
            self._core = _core.Loader.open(
                tables=refs, columns=list(columns) if columns is not None else [], batch_size=int(batch_size),
                shuffle=bool(shuffle), shuffle_mode=str(shuffle_mode), block_rows=int(block_rows),
                window_blocks=int(window_blocks), seed=int(seed), epoch=int(epoch), rank=int(rank),
                world_size=int(world_size), drop_last=bool(drop_last), num_threads=int(num_threads),
                prefetch_bytes=int(prefetch_bytes), mixture_weights=[float(w) for w in (mixture_weights or [])],
                samples_per_epoch=int(samples_per_epoch), images=[(im.column, im.options) for im in images],
                on_error=str(on_error), use_io_uring=bool(use_io_uring),
                consumer_spin_us=int(consumer_spin_us), guard=self._policy)
        except FileNotFoundError as e:
            if "has no column" in str(e):  # as flywheel.Table: an unknown column is a KeyError
                raise KeyError(str(e)) from None
            raise
        self.rank, self.world_size, self.batch_size = int(rank), int(world_size), int(batch_size)
        self._torch = None
        if format == "torch":
            import torch  # noqa: F401  (fail at construction, not at the first batch)
            self._torch = torch
        self._started: Optional[float] = None
        self._num_tables = len(refs)
        self._raw_bps: Optional[float] = None

    @staticmethod
    def _normalize_transforms(transforms) -> List[Callable[[Dict[str, Any]], Dict[str, Any]]]:
        if transforms is None:
            return []
        if isinstance(transforms, Mapping):
            out = []
            for name, fn in transforms.items():
                if not callable(fn):
                    raise TypeError(f"transforms[{name!r}] is not callable")

                def one(batch, name=name, fn=fn):
                    if name not in batch:
                        raise KeyError(f"transform for column {name!r}: the batch has no such column "
                                       f"(columns: {sorted(batch)})")
                    batch[name] = fn(batch[name])
                    return batch
                out.append(one)
            return out
        if callable(transforms):
            return [transforms]
        out = list(transforms)
        for i, fn in enumerate(out):
            if not callable(fn):
                raise TypeError(f"transforms[{i}] is not callable")
        return out

    # ------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[Dict[str, Any]]:
        """Batches until the end of the current epoch (the loader then stands
        at the start of the next one; iterate again for it)."""
        while True:
            batch = self.next()
            if batch is None:
                return
            yield batch

    def next(self) -> Optional[Dict[str, Any]]:
        """This rank's next batch, or None at the end of the epoch."""
        if self._started is None:
            self._started = time.monotonic()
        # Lineage: the active flywheel.run (if any) records this loader's
        # samples from the first batch it hands out inside the run.
        _catalog._note_loader(self)
        out = self._core.next(self._timeout)
        if out is None:
            return None
        _epoch, _position, columns, indices, tables, arrow = out
        batch = Batch(batch_from_core(columns), arrow)
        if self._return_indices:
            batch["__index__"] = indices
            if self.num_tables > 1:
                batch["__table__"] = tables
        if self._transforms:
            batch = dict(batch)  # Python transforms change it: no Arrow form (it would not match)
        for fn in self._transforms:
            batch = fn(batch)
            if not isinstance(batch, dict):
                raise TypeError(f"a transform returned {type(batch).__name__}, expected the batch dict")
        if self._torch is not None:
            converted = {k: self._to_torch(v) for k, v in batch.items()}
            batch = Batch(converted, batch._arrow, batch._why_not) if isinstance(batch, Batch) else converted
        return batch

    def _to_torch(self, v: Any) -> Any:
        if isinstance(v, np.ndarray) and not isinstance(v, np.ma.MaskedArray):
            return self._torch.from_numpy(v) if v.flags.writeable else self._torch.from_numpy(v.copy())
        return v

    def __len__(self) -> int:
        """Batches this rank yields per epoch."""
        return int(self._core.batches_per_epoch())

    @property
    def epoch_size(self) -> int:
        """Positions (rows) per epoch over all ranks."""
        return int(self._core.epoch_size())

    @property
    def num_tables(self) -> int:
        return self._num_tables

    @property
    def schema(self) -> Dict[str, str]:
        """Column name -> type text of the batches' columns ('?' marks nullable)."""
        return {name: type_text + ("?" if nullable else "") for name, type_text, nullable in self._core.schema()}

    # ---------------------------------------------------------------- state
    def state_dict(self) -> Dict[str, Any]:
        """The position after the batches handed out so far: a small JSON-able
        dict (seed, epoch, positions consumed over all ranks, the tables'
        identities, mixture state). The same on every rank that has taken the
        same number of batches; save rank 0's."""
        return json.loads(self._core.state())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at ``state``'s epoch and position. It must come from a loader
        over the same tables, seed and order settings; world size and batch
        size may differ. ValueError names what does not match."""
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        self._core.restore(json.dumps(dict(state)))

    def set_epoch(self, epoch: int) -> None:
        """Move to the start of ``epoch``."""
        self._core.set_epoch(int(epoch))

    def close(self) -> None:
        """Stop reading ahead; a later next() raises Cancelled (a RuntimeError)."""
        self._core.cancel()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- stats
    def stats(self) -> Dict[str, Any]:
        """Where the time goes: the C++ counters (seconds summed over worker
        threads: io, decode (compressed pages), transform (images),
        assemble; consumer_wait: time Next waited for a batch; idle:
        read-ahead full; skipped_rows: rows on_error="skip" left out) plus
        ``wall_seconds`` since the first batch, ``rows_per_second`` /
        ``bytes_per_second`` handed out, ``raw_read_bytes_per_second`` (a
        sequential read() of up to 64 MiB of the tables' files, measured on
        the first call) and ``fraction_of_raw_read`` (bytes_per_second over
        it). The same counters are in the process's metrics
        (``flywheel.metrics_text()``, ``flywheel_loader_*``)."""
        s = dict(self._core.stats())
        wall = time.monotonic() - self._started if self._started is not None else 0.0
        s["wall_seconds"] = wall
        s["rows_per_second"] = s["rows"] / wall if wall > 0 else 0.0
        s["bytes_per_second"] = s["bytes"] / wall if wall > 0 else 0.0
        if self._raw_bps is None:
            self._raw_bps = _measure_read_bandwidth(self._paths)
        s["raw_read_bytes_per_second"] = self._raw_bps
        s["fraction_of_raw_read"] = s["bytes_per_second"] / self._raw_bps if self._raw_bps else 0.0
        return s
