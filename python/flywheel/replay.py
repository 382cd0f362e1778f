"""Experience replay (the Python face of src/flywheel/replay/): in process,
and over gRPC (:class:`Server`, :class:`Client`; see the end of this docstring).

A :class:`Table` holds items that a :class:`Writer` inserts and a
:class:`Sampler` samples, under a :class:`RateLimiter`; selectors
(:class:`Uniform`, :class:`Prioritized`, :class:`Fifo`, :class:`Lifo`,
:class:`MinHeap`, :class:`MaxHeap`) decide what to sample and what to evict.
The semantics are DeepMind Reverb's (docs/replay.md)::

    import numpy as np
    from flywheel import replay

    table = replay.Table("transitions", sampler=replay.Prioritized(0.6),
                         rate_limiter=replay.RateLimiter.min_size(100),
                         signature={"obs": "float32[4]", "action": "int64"})
    with replay.Writer([table]) as w:            # the episode ends on exit
        for t in range(1000):
            w.append({"obs": np.zeros(4, np.float32), "action": t % 2})
            w.create_item("transitions", priority=1.0, trajectory={"obs": 1, "action": 1})
    s = replay.Sampler(table).sample(32, timeout=5)
    s.data["obs"].shape                          # (32, 1, 4): (batch, time, *step)

Blocking calls (``Writer.create_item``, ``Sampler.sample``) release the GIL
and take a ``timeout`` in seconds (None = wait forever). They raise
``TimeoutError`` when it passes (the message explains the rate limiter's
state) and :class:`Cancelled` when the table is closed, by
:meth:`Table.close` from any thread. On the main thread a wait can also be
interrupted with Ctrl-C (KeyboardInterrupt); elsewhere, give a timeout or close
the table to get a blocked thread back.

The same tables can be served to other processes: a :class:`Server` serves
in-process tables on loopback (with optional checkpoints), and a
:class:`Client` over one or several servers samples them and makes
:class:`RemoteWriter` objects, with the calls and results above::

    with replay.Server([table], port=0) as server, replay.Client(server.address) as client:
        with client.writer() as w:               # the episode ends and the writer flushes on exit
            w.append({"obs": np.zeros(4, np.float32), "action": 1})
            w.create_item("transitions", priority=1.0, trajectory={"obs": 1, "action": 1})
        s = client.sample("transitions", 32, timeout=5)
"""

from __future__ import annotations

import math
import os
import queue as _queue
import sys
import threading
import time
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core
from ._convert import _cast, _parse_type

__all__ = [
    "RateLimiter", "Selector", "Uniform", "Prioritized", "Fifo", "Lifo", "MinHeap", "MaxHeap",
    "Table", "Writer", "Sampler", "Sample", "Cancelled", "Server", "Client", "RemoteWriter",
]

Cancelled = _core.Cancelled

_DBL_MAX = sys.float_info.max
_STEP_DTYPES = frozenset(["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                          "float16", "float32", "float64"])


def _seconds(timeout: Optional[float]) -> Optional[float]:
    if timeout is None:
        return None
    t = float(timeout)
    if math.isnan(t) or t < 0:
        raise ValueError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    return t


# --------------------------------------------------------------------------- rate limiter


class RateLimiter:
    """When inserts and samples may proceed (Reverb's rules; docs/replay.md).

    ``RateLimiter(samples_per_insert, min_size_to_sample, min_diff, max_diff)``:
    a sample waits until the table holds ``min_size_to_sample`` items and
    while ``inserts * samples_per_insert - samples - 1 < min_diff``; an insert
    waits (once the table holds ``min_size_to_sample`` items) while
    ``(inserts + 1) * samples_per_insert - samples > max_diff``. The
    presets below cover the usual cases. Invalid values, and limits that can
    deadlock (both sides blocked at once), raise ``ValueError`` naming the
    field. Instances are immutable.
    """

    __slots__ = ("_options", "_repr")

    def __init__(self, samples_per_insert: float, min_size_to_sample: int, min_diff: float, max_diff: float):
        if isinstance(min_size_to_sample, float) or not isinstance(min_size_to_sample, (int, np.integer)):
            raise TypeError(f"min_size_to_sample must be an int, got {min_size_to_sample!r}")
        options = (float(samples_per_insert), int(min_size_to_sample), float(min_diff), float(max_diff))
        _core.rate_limiter_validate(options)
        self._options = options
        self._repr = (f"RateLimiter(samples_per_insert={options[0]!r}, min_size_to_sample={options[1]!r}, "
                      f"min_diff={options[2]!r}, max_diff={options[3]!r})")

    @classmethod
    def _preset(cls, text: str, kind: str, spi: float = 1.0, n: int = 1, error_buffer: float = 0.0) -> "RateLimiter":
        if isinstance(n, float) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"{text}: the size must be an int, got {n!r}")
        r = cls(*_core.rate_limiter_preset(kind, float(spi), int(n), float(error_buffer)))
        r._repr = text
        return r

    @classmethod
    def min_size(cls, n: int) -> "RateLimiter":
        """Samples wait until ``n`` items are in the table; inserts never wait."""
        return cls._preset(f"RateLimiter.min_size({n!r})", "min_size", n=n)

    @classmethod
    def sample_to_insert_ratio(cls, samples_per_insert: float, min_size_to_sample: int,
                               error_buffer: float) -> "RateLimiter":
        """Keeps samples / inserts near ``samples_per_insert`` once
        ``min_size_to_sample`` items were inserted, allowing ``error_buffer``
        samples of slack either way (inserts or samples wait beyond it)."""
        return cls._preset(f"RateLimiter.sample_to_insert_ratio({samples_per_insert!r}, {min_size_to_sample!r}, "
                           f"{error_buffer!r})", "sample_to_insert_ratio", samples_per_insert, min_size_to_sample,
                           error_buffer)

    @classmethod
    def queue(cls, n: int) -> "RateLimiter":
        """A FIFO queue of capacity ``n``: inserts wait when ``n`` items are
        unread, samples when none are. Pair with ``Fifo()`` as sampler and
        ``max_times_sampled=1`` (:meth:`Table.queue` does)."""
        return cls._preset(f"RateLimiter.queue({n!r})", "queue", n=n)

    @classmethod
    def stack(cls, n: int) -> "RateLimiter":
        """A LIFO stack of capacity ``n``; pair with ``Lifo()`` and
        ``max_times_sampled=1`` (:meth:`Table.stack` does)."""
        return cls._preset(f"RateLimiter.stack({n!r})", "stack", n=n)

    @classmethod
    def _from_options(cls, options: Tuple[float, int, float, float], prefer_stack: bool = False) -> "RateLimiter":
        """The limiter with these options (a table's ``info()["rate_limiter"]``),
        shown as the preset it equals, if any (tables restored from a checkpoint)."""
        spi, n, lo, hi = float(options[0]), int(options[1]), float(options[2]), float(options[3])
        r = cls(spi, n, lo, hi)
        candidates = [cls.min_size(n)]
        if hi.is_integer() and 1 <= hi < 2**62:
            candidates.insert(0, cls.stack(int(hi)) if prefer_stack else cls.queue(int(hi)))
        if math.isfinite(lo) and math.isfinite(hi) and hi >= lo:
            try:
                candidates.append(cls.sample_to_insert_ratio(spi, n, (hi - lo) / 2))
            except ValueError:
                pass
        for c in candidates:
            if c == r:
                return c
        return r

    @property
    def samples_per_insert(self) -> float:
        return self._options[0]

    @property
    def min_size_to_sample(self) -> int:
        return self._options[1]

    @property
    def min_diff(self) -> float:
        return self._options[2]

    @property
    def max_diff(self) -> float:
        return self._options[3]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RateLimiter) and self._options == other._options

    def __hash__(self) -> int:
        return hash(self._options)

    def __repr__(self) -> str:
        return self._repr


# --------------------------------------------------------------------------- selectors


class Selector:
    """How a table picks the item to sample (its ``sampler``) or to evict when
    full (its ``remover``). A configuration only: each table builds its own
    C++ selector from it, so one instance may configure many tables."""

    __slots__ = ()
    _kind = ""

    def _spec(self) -> Tuple[str, float, int]:
        return (self._kind, 0.0, 0)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._spec() == self._spec()

    def __hash__(self) -> int:
        return hash(self._spec())

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Uniform(Selector):
    """Every item equally likely (probability 1/size). ``seed`` fixes the
    random sequence (the same inserts then give the same samples)."""

    __slots__ = ("_seed",)
    _kind = "uniform"

    def __init__(self, seed: int = 0):
        self._seed = int(seed)

    def _spec(self) -> Tuple[str, float, int]:
        return (self._kind, 0.0, self._seed)

    def __repr__(self) -> str:
        return f"Uniform(seed={self._seed})" if self._seed else "Uniform()"


class Prioritized(Selector):
    """Item i with probability ``p_i**priority_exponent / sum_j p_j**priority_exponent``
    (a sum tree; O(log n)). Exponent 0 is uniform; all-zero priorities sample
    uniformly. ``priority_exponent`` must be finite and >= 0."""

    __slots__ = ("_exponent", "_seed")
    _kind = "prioritized"

    def __init__(self, priority_exponent: float, seed: int = 0):
        e = float(priority_exponent)
        if not math.isfinite(e) or e < 0:
            raise ValueError(f"priority_exponent must be finite and >= 0, got {priority_exponent!r}")
        self._exponent = e
        self._seed = int(seed)

    @property
    def priority_exponent(self) -> float:
        return self._exponent

    def _spec(self) -> Tuple[str, float, int]:
        return (self._kind, self._exponent, self._seed)

    def __repr__(self) -> str:
        seed = f", seed={self._seed}" if self._seed else ""
        return f"Prioritized({self._exponent!r}{seed})"


class Fifo(Selector):
    """Oldest inserted first (probability 1)."""

    __slots__ = ()
    _kind = "fifo"


class Lifo(Selector):
    """Newest inserted first (probability 1)."""

    __slots__ = ()
    _kind = "lifo"


class MinHeap(Selector):
    """Smallest priority first; ties oldest first (probability 1)."""

    __slots__ = ()
    _kind = "min_heap"


class MaxHeap(Selector):
    """Largest priority first; ties oldest first (probability 1)."""

    __slots__ = ()
    _kind = "max_heap"


def _selector_from_description(text: str, seed: int = 0) -> Selector:
    """The selector a C++ ``Describe()`` text names (``info()["sampler"]``):
    ``Uniform``, ``Prioritized(priority_exponent=X)``, ``Fifo``, ``Lifo``,
    ``MinHeap``, ``MaxHeap``. ``seed``: the seed the table's selector was made
    with (descriptions carry none)."""
    simple = {"Uniform": lambda: Uniform(seed), "Fifo": Fifo, "Lifo": Lifo, "MinHeap": MinHeap, "MaxHeap": MaxHeap}
    if text in simple:
        return simple[text]()
    prefix = "Prioritized(priority_exponent="
    if text.startswith(prefix) and text.endswith(")"):
        return Prioritized(float(text[len(prefix):-1]), seed)
    raise ValueError(f"unknown selector description {text!r}")


# --------------------------------------------------------------------------- table


def _step_type(where: str, type_text: str) -> Tuple[np.dtype, Tuple[int, ...], str]:
    """(dtype, step shape, canonical text) of a fixed-width per-step type."""
    if not isinstance(type_text, str):
        raise TypeError(f"{where}: type must be a str like 'float32[4]', got {type_text!r}")
    try:
        kind, dtype, shape, canonical = _parse_type(type_text)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if kind != "fixed":
        raise ValueError(f"{where}: a step must be a fixed-width type (scalar or tensor), got {canonical}")
    return dtype, shape, canonical


def _mutations(updates: Optional[Mapping[int, float]],
               deletes: Optional[Sequence[int]]) -> Tuple[list, list]:
    ups = [] if updates is None else [(int(k), float(p)) for k, p in dict(updates).items()]
    dels = [] if deletes is None else [int(k) for k in np.asarray(deletes, dtype=np.uint64).reshape(-1)]
    return ups, dels


class Table:
    """A replay table: items (key, priority, trajectory) in memory, sampled
    and evicted by selectors under a rate limiter.

    Args:
      name: the table's name (``Writer.create_item`` refers to it).
      sampler: picks items to sample (default :class:`Uniform`).
      remover: picks the item to evict when an insert finds the table full
        (default :class:`Fifo`).
      max_size: items the table holds at most.
      max_times_sampled: an item is deleted after this many samples
        (0 = never).
      rate_limiter: when inserts and samples may proceed (default
        ``RateLimiter.min_size(1)``).
      signature: optional ``{column: per-step type}``, e.g.
        ``{"obs": "float32[4]", "action": "int32"}``. Items must then hold
        exactly these columns with these types (``ValueError`` naming the
        column otherwise), and a :class:`Writer` writing to this table uses
        these types for the columns.
      watchdog: seconds after which a blocked call logs :meth:`explain` (and
        again every as many seconds); 0 = never.

    Every method is thread-safe. Invalid options raise ``ValueError``.
    """

    __slots__ = ("_t", "_sampler", "_remover", "_rate_limiter", "_signature", "_step_types", "__weakref__")

    def __init__(self, name: str, sampler: Selector = Uniform(), remover: Selector = Fifo(),
                 max_size: int = 1_000_000, max_times_sampled: int = 0,
                 rate_limiter: RateLimiter = RateLimiter.min_size(1),
                 signature: Optional[Mapping[str, str]] = None, *, watchdog: float = 10.0):
        if not isinstance(name, str):
            raise TypeError(f"table name must be a str, got {name!r}")
        for role, sel in (("sampler", sampler), ("remover", remover)):
            if not isinstance(sel, Selector):
                raise TypeError(f"table '{name}': {role} must be a flywheel.replay selector (Uniform(), Fifo(), ...), "
                                f"got {sel!r}")
        if not isinstance(rate_limiter, RateLimiter):
            raise TypeError(f"table '{name}': rate_limiter must be a flywheel.replay.RateLimiter, got {rate_limiter!r}")
        sig_list = None
        self._step_types: Dict[str, Tuple[np.dtype, Tuple[int, ...], str]] = {}
        if signature is not None:
            if not isinstance(signature, Mapping):
                raise TypeError(f"table '{name}': signature must be a dict of column -> type, got "
                                f"{type(signature).__name__}")
            sig_list = []
            for col, type_text in signature.items():
                spec = _step_type(f"table '{name}' signature: column '{col}'", type_text)
                self._step_types[col] = spec
                sig_list.append((col, spec[2]))
        self._t = _core.ReplayTable(name, sampler._spec(), remover._spec(), int(max_size), int(max_times_sampled),
                                    rate_limiter._options, sig_list, float(watchdog))
        self._sampler = sampler
        self._remover = remover
        self._rate_limiter = rate_limiter
        self._signature = None if sig_list is None else dict(sig_list)

    @classmethod
    def queue(cls, name: str, max_size: int, signature: Optional[Mapping[str, str]] = None) -> "Table":
        """A FIFO queue: each item sampled exactly once, oldest first; inserts
        wait while ``max_size`` items are unread (Reverb's ``Table.queue``)."""
        return cls(name, sampler=Fifo(), remover=Fifo(), max_size=max_size, max_times_sampled=1,
                   rate_limiter=RateLimiter.queue(max_size), signature=signature)

    @classmethod
    def stack(cls, name: str, max_size: int, signature: Optional[Mapping[str, str]] = None) -> "Table":
        """A LIFO stack: each item sampled exactly once, newest first."""
        return cls(name, sampler=Lifo(), remover=Lifo(), max_size=max_size, max_times_sampled=1,
                   rate_limiter=RateLimiter.stack(max_size), signature=signature)

    @classmethod
    def _from_core(cls, core: "_core.ReplayTable", seed: int = 0) -> "Table":
        """A Table over an existing ``_core.ReplayTable`` (e.g. one a
        :class:`Server` restored from a checkpoint): selectors, rate limiter
        and signature are read back from the C++ table. ``seed``: its
        selectors' seed."""
        info = core.info()
        t = cls.__new__(cls)
        t._t = core
        t._sampler = _selector_from_description(info["sampler"], seed)
        t._remover = _selector_from_description(info["remover"], seed)
        t._rate_limiter = RateLimiter._from_options(info["rate_limiter"], prefer_stack=info["sampler"] == "Lifo")
        sig = core.signature
        t._step_types = {}
        t._signature = None
        if sig is not None:
            for col, type_text in sig:
                t._step_types[col] = _step_type(f"table '{core.name}' signature: column '{col}'", type_text)
            t._signature = {col: t._step_types[col][2] for col, _ in sig}
        return t

    @property
    def name(self) -> str:
        return self._t.name

    @property
    def sampler(self) -> Selector:
        return self._sampler

    @property
    def remover(self) -> Selector:
        return self._remover

    @property
    def rate_limiter(self) -> RateLimiter:
        return self._rate_limiter

    @property
    def signature(self) -> Optional[Dict[str, str]]:
        """``{column: canonical type}``, or None when the table has none."""
        return None if self._signature is None else dict(self._signature)

    def info(self) -> Dict[str, Any]:
        """The table's state: ``size``, ``max_size``, ``max_times_sampled``,
        the rate limiter's counters ``inserts``, ``deletes``, ``samples``,
        the callers waiting (``blocked_inserts``, ``blocked_samples``),
        ``sampler`` and ``remover`` (described), ``num_evicted`` (by the
        remover), ``num_deleted`` (all deletions), ``name`` and
        ``rate_limiter`` (samples_per_insert, min_size_to_sample, min_diff,
        max_diff)."""
        return self._t.info()

    def explain(self) -> str:
        """The table's state in words: size, selectors, and for inserts and
        samples whether they may proceed, by which rule, what would unblock
        them and how many callers wait."""
        return self._t.explain()

    def mutate_priorities(self, updates: Optional[Mapping[int, float]] = None,
                          deletes: Optional[Sequence[int]] = None) -> int:
        """Sets priorities (``{key: priority}``) and deletes items by key.
        Keys the table no longer holds (evicted, deleted after
        ``max_times_sampled``) are skipped and counted: returns how many.
        Priorities must be finite and >= 0 (``ValueError``)."""
        return self._t.mutate_priorities(*_mutations(updates, deletes))

    def reset(self) -> None:
        """Removes every item and zeroes the rate limiter's counters."""
        self._t.reset()

    def close(self) -> None:
        """Closes the table: calls blocked on it (in any thread) and all later
        inserts and samples raise :class:`Cancelled`. Idempotent."""
        self._t.close()

    def __enter__(self) -> "Table":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        """Items in the table now."""
        return self._t.size()

    def __repr__(self) -> str:
        return (f"flywheel.replay.Table({self.name!r}, sampler={self._sampler!r}, remover={self._remover!r}, "
                f"rate_limiter={self._rate_limiter!r}, size={len(self)})")


# --------------------------------------------------------------------------- writer


def _infer_step_type(name: str, value: Any) -> Tuple[np.dtype, Tuple[int, ...], str]:
    """The per-step type of a column's first value (the rule in Writer)."""
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)
    elif isinstance(value, bool):
        a = np.asarray(value, dtype=np.bool_)
    elif isinstance(value, int):
        a = np.asarray(value, dtype=np.int64)
    elif isinstance(value, float):
        a = np.asarray(value, dtype=np.float64)
    elif isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"column '{name}': a step value must be a number or a numpy array, "
                        f"got {type(value).__name__}")
    else:
        a = np.asarray(value)
    dtype_name = a.dtype.name
    if dtype_name not in _STEP_DTYPES:
        raise TypeError(f"column '{name}': cannot store values of dtype {a.dtype} (supported: bool, "
                        f"int8..int64, uint8..uint64, float16, float32, float64)")
    text = dtype_name + ("[" + ",".join(str(d) for d in a.shape) + "]" if a.ndim else "")
    return _step_type(f"column '{name}'", text)


def _trajectory(trajectory: Mapping[str, int]) -> list:
    """``{column: n}`` as the ``[(column, n)]`` the C++ writers take."""
    if not isinstance(trajectory, Mapping):
        raise TypeError(f"create_item: trajectory must be a dict of column -> number of steps, "
                        f"got {type(trajectory).__name__}")
    traj = []
    for col, n in trajectory.items():
        if isinstance(n, (bool, float)) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"create_item: column '{col}': number of steps must be an int, got {n!r}")
        traj.append((col, int(n)))
    return traj


class _StepWriter:
    """What :class:`Writer` and :class:`RemoteWriter` share: column types
    and the conversion of step values (the rules in Writer's docstring).
    Subclasses set ``_w`` (a _core writer), ``_types`` and
    ``_signature_types``."""

    _w: Any
    _types: Dict[str, Tuple[np.dtype, Tuple[int, ...], str]]
    _signature_types: Dict[str, Tuple[np.dtype, Tuple[int, ...], str]]

    @property
    def column_types(self) -> Dict[str, str]:
        """``{column: per-step type}`` of the columns fixed so far."""
        return {name: spec[2] for name, spec in self._types.items()}

    @property
    def episode_steps(self) -> int:
        """Steps appended in the current episode."""
        return self._w.episode_steps

    def _column(self, name: str, value: Any) -> np.ndarray:
        spec = self._types.get(name)
        if spec is None:
            if not isinstance(name, str):
                raise TypeError(f"column names must be str, got {name!r}")
            spec = self._signature_types.get(name) or _infer_step_type(name, value)
            self._w.define_column(name, spec[2])
            self._types[name] = spec
        dtype, shape, text = spec
        if type(value) is np.ndarray and value.dtype == dtype and value.shape == shape:
            return value if value.flags.c_contiguous else np.ascontiguousarray(value)
        where = f"column '{name}' ({text})"
        a = _cast(where, np.asarray(value) if isinstance(value, np.generic) else value, dtype)
        if a.shape != shape:
            raise ValueError(f"{where}: a step has shape {a.shape}, need {shape}")
        return np.ascontiguousarray(a)

    def append(self, step: Mapping[str, Any]) -> None:
        """Appends one step: ``{column: value}``, a value being a numpy array
        (the step's tensor), a numpy scalar or a Python number. See the class
        docstring for how a column's type is chosen and values converted."""
        if not isinstance(step, Mapping):
            raise TypeError(f"append takes a dict of column -> value, got {type(step).__name__}")
        self._w.append({name: self._column(name, value) for name, value in step.items()})

    def extend(self, steps: Mapping[str, Any]) -> None:
        """Appends several steps at once: ``{column: values}``, each value an
        array (or nested list) of shape ``(n, *step_shape)`` with the same
        ``n >= 1`` for every column. The same as ``n`` calls of
        :meth:`append` with row ``i`` of every column, converted by the same
        rules, in one call (much faster for long episodes)."""
        if not isinstance(steps, Mapping):
            raise TypeError(f"extend takes a dict of column -> array of steps, got {type(steps).__name__}")
        cols = {}
        for name, value in steps.items():
            spec = self._types.get(name)
            if spec is None:
                first = np.asarray(value)
                if first.ndim < 1 or len(first) == 0:
                    raise ValueError(f"extend: column '{name}': needs an array of at least one step")
                self._column(name, first[0])  # fixes the column's type as append would
                spec = self._types[name]
            dtype, shape, text = spec
            where = f"column '{name}' ({text})"
            if type(value) is np.ndarray and value.dtype == dtype:
                a = value
            else:
                a = _cast(where, np.asarray(value) if isinstance(value, np.generic) else value, dtype)
            if a.ndim < 1 or a.shape[1:] != shape:
                raise ValueError(f"extend: {where}: steps have shape {a.shape}, need (steps, {', '.join(map(str, shape))})"
                                 if shape else f"extend: {where}: steps have shape {a.shape}, need (steps,)")
            cols[name] = np.ascontiguousarray(a)
        self._w.extend(cols)


class Writer(_StepWriter):
    """Turns a stream of steps into chunks and items (Reverb's TrajectoryWriter).

    ``append(step)`` adds one step, a value per column; every
    ``chunk_length`` steps of a column become one compressed chunk.
    ``create_item(table, priority, {column: k})`` inserts into ``table`` an
    item made of the last ``k`` steps of each listed column; items share
    chunks instead of copying steps, so overlapping items (n-step returns,
    sequence windows) are cheap. ``end_episode()`` ends the episode: later
    items cannot reach back into it. Used as a context manager, the episode
    ends on exit.

    Args:
      tables: the tables items may go to: a list of :class:`Table` (referred
        to by their names) or a dict ``{name: Table}``.
      chunk_length: steps per chunk (>= 1). Larger chunks compress better;
        an item keeps its chunks alive, so large chunks with short items hold
        more memory.
      codec: chunk compression, ``"lz4"``, ``"zstd"`` or ``"none"``.
      max_history: steps of a column that stay referenceable
        (>= chunk_length); older ones are dropped (``IndexError`` if an item
        reaches for them).

    **Column types.** Each column has one per-step type (a scalar or a fixed
    tensor shape) for the writer's whole life, across episodes: if a table
    given to the writer has the column in its signature, that type;
    otherwise the type of the column's first value: a numpy array or scalar
    gives its dtype and shape, a Python ``bool`` gives ``bool``, ``int``
    ``int64``, ``float`` ``float64``, and a nested list whatever
    ``np.asarray`` makes of it. Later values are converted to that type by
    the rules of ``flywheel.Table.append`` (docs/python.md): numpy values only
    by safe casts (int32 -> int64, float32 -> float64; else ``TypeError``),
    Python numbers by value (ints must fit, floats may round into float32,
    floats are refused for int columns). A value of the wrong shape raises
    ``ValueError``. Both name the column.

    **Steps.** The first step of an episode fixes its columns; every later
    step must give a value for each of them (``ValueError`` otherwise).

    A writer is meant for one thread (calls from several threads are safe
    but interleave their steps). It keeps its tables alive.
    """

    def __init__(self, tables: Union[Sequence[Table], Mapping[str, Table], Table], chunk_length: int = 16,
                 codec: str = "lz4", max_history: int = 10000):
        if isinstance(tables, Table):
            tables = [tables]
        if isinstance(tables, Mapping):
            named = dict(tables)
        else:
            named = {}
            for t in tables:
                if not isinstance(t, Table):
                    raise TypeError(f"writer tables must be flywheel.replay.Table objects, got {t!r}")
                if t.name in named:
                    raise ValueError(f"writer: two tables are named '{t.name}'")
                named[t.name] = t
        if not named:
            raise ValueError("writer: needs at least one table")
        for key, t in named.items():
            if not isinstance(t, Table):
                raise TypeError(f"writer table '{key}' must be a flywheel.replay.Table, got {t!r}")
        # Column types from the tables' signatures; tables must agree.
        self._signature_types: Dict[str, Tuple[np.dtype, Tuple[int, ...], str]] = {}
        owner: Dict[str, str] = {}
        for key, t in named.items():
            for col, spec in t._step_types.items():
                if col in self._signature_types and self._signature_types[col][2] != spec[2]:
                    raise ValueError(f"writer: column '{col}' is {self._signature_types[col][2]} in the signature "
                                     f"of table '{owner[col]}' but {spec[2]} in table '{key}'")
                self._signature_types[col] = spec
                owner[col] = key
        self._tables = named
        self._types: Dict[str, Tuple[np.dtype, Tuple[int, ...], str]] = {}
        self._w = _core.ReplayWriter({k: t._t for k, t in named.items()}, int(chunk_length), str(codec),
                                     int(max_history))

    @property
    def tables(self) -> Dict[str, Table]:
        return dict(self._tables)

    def create_item(self, table: Union[str, Table], priority: float, trajectory: Mapping[str, int],
                    timeout: Optional[float] = None) -> int:
        """Inserts into ``table`` (a name or a :class:`Table` of this writer)
        an item of the last ``n`` steps of each column in ``trajectory``
        (``{column: n}``) with ``priority`` (finite, >= 0), waiting up to
        ``timeout`` seconds (None = forever) for the rate limiter. Returns
        the item's key.

        Raises ``KeyError`` for a table the writer does not have or a column
        with no steps this episode, ``ValueError`` for ``n`` outside ``1..``
        steps this episode or a trajectory that does not match the table's
        signature, ``IndexError`` when steps are older than ``max_history``,
        ``TimeoutError`` and :class:`Cancelled`.
        """
        if isinstance(table, Table):
            matches = [k for k, t in self._tables.items() if t is table]
            if not matches:
                raise KeyError(f"create_item: table '{table.name}' is not one of this writer's tables")
            table = matches[0]
        return self._w.create_item(table, float(priority), _trajectory(trajectory), _seconds(timeout))

    def end_episode(self) -> None:
        """Ends the episode: pending steps are chunked, and later items can
        only use steps appended after this call. Column types stay fixed."""
        self._w.end_episode()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end_episode()


# --------------------------------------------------------------------------- sampler


_STOP_POLL = 0.1  # seconds: how often a prefetch thread checks that it should stop


def _iterate(sample, batch_size: int, timeout: Optional[float], flexible: bool, prefetch: int) -> Iterator["Sample"]:
    """Batches from ``sample(batch_size, timeout, flexible)`` until the table is
    closed or a wait exceeds ``timeout``. With ``prefetch`` > 0 a background
    thread keeps up to that many batches sampled ahead (the waits release the
    GIL, so sampling overlaps the consumer's work)."""
    if not isinstance(prefetch, int) or prefetch < 0:
        raise ValueError(f"prefetch must be an int >= 0, got {prefetch!r}")
    if prefetch == 0:
        return _plain(sample, batch_size, timeout, flexible)
    return _prefetched(sample, batch_size, timeout, flexible, prefetch)


def _plain(sample, batch_size: int, timeout: Optional[float], flexible: bool) -> Iterator["Sample"]:
    while True:
        try:
            s = sample(batch_size, timeout, flexible)
        except (Cancelled, TimeoutError):
            return
        yield s


def _prefetched(sample, batch_size: int, timeout: Optional[float], flexible: bool,
                prefetch: int) -> Iterator["Sample"]:
    ready: "_queue.Queue[Any]" = _queue.Queue(maxsize=prefetch)
    stop = threading.Event()
    end = object()

    def worker() -> None:
        # Waits in short slices so that a consumer that stops iterating stops
        # this thread promptly; `timeout` still bounds each batch's total wait.
        while not stop.is_set():
            started = time.monotonic()
            while True:
                left = None if timeout is None else timeout - (time.monotonic() - started)
                slice_s = _STOP_POLL if left is None else max(0.0, min(_STOP_POLL, left))
                try:
                    item: Any = sample(batch_size, slice_s, flexible)
                    break
                except TimeoutError:
                    if stop.is_set():
                        return
                    if left is not None and left <= _STOP_POLL:
                        item = end  # the whole timeout passed: the iteration ends
                        break
                except Cancelled:
                    item = end
                    break
                except BaseException as e:  # delivered to the consumer
                    item = e
                    break
            while not stop.is_set():
                try:
                    ready.put(item, timeout=_STOP_POLL)
                    break
                except _queue.Full:
                    pass
            if item is end or isinstance(item, BaseException):
                return

    thread = threading.Thread(target=worker, name="flywheel-replay-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()



class Sample:
    """A batch of sampled items.

    Attributes:
      data: ``{column: ndarray}`` of shape ``(batch, time, *step_shape)`` and
        the column's dtype (a fresh, writable array).
      keys: uint64 ``(batch,)``, the items' keys (for
        :meth:`Table.mutate_priorities`).
      priorities: float64 ``(batch,)``, the items' priorities when sampled.
      probabilities: float64 ``(batch,)``, the probability each item was
        selected with (1/size for Uniform, p^a / sum p^a for Prioritized, 1
        for the deterministic selectors) — for importance weights.
      table_size: int64 ``(batch,)``, the table's size at each selection.
      times_sampled: int32 ``(batch,)``, each item's samples including this one.
    """

    __slots__ = ("data", "keys", "priorities", "probabilities", "table_size", "times_sampled")

    def __init__(self, d: Dict[str, Any]):
        self.data: Dict[str, np.ndarray] = d["data"]
        self.keys: np.ndarray = d["keys"]
        self.priorities: np.ndarray = d["priorities"]
        self.probabilities: np.ndarray = d["probabilities"]
        self.table_size: np.ndarray = d["table_size"]
        self.times_sampled: np.ndarray = d["times_sampled"]

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        cols = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.data.items())
        return f"Sample(batch={len(self)}, {{{cols}}})"


class Sampler:
    """Samples batches from one :class:`Table`. Thread-safe; several samplers
    (or threads sharing one) may sample one table concurrently."""

    __slots__ = ("_table",)

    def __init__(self, table: Table):
        if not isinstance(table, Table):
            raise TypeError(f"Sampler takes a flywheel.replay.Table, got {table!r}")
        self._table = table

    @property
    def table(self) -> Table:
        return self._table

    def sample(self, batch_size: int = 1, timeout: Optional[float] = None, flexible: bool = False) -> Sample:
        """Samples ``batch_size`` items, waiting up to ``timeout`` seconds
        (None = forever) for the rate limiter. With ``flexible``, waits only
        for the first item and returns between 1 and ``batch_size`` items
        (as many as may proceed without waiting again).

        Items of one batch must hold the same columns with equal lengths
        and types; otherwise ``ValueError`` naming the column (the items
        still count as sampled). Raises ``TimeoutError`` (the message holds
        the table's explanation) and :class:`Cancelled` (table closed).
        """
        if isinstance(batch_size, (bool, float)) or not isinstance(batch_size, (int, np.integer)):
            raise TypeError(f"batch_size must be an int, got {batch_size!r}")
        return Sample(self._table._t.sample(int(batch_size), _seconds(timeout), bool(flexible)))

    def iter(self, batch_size: int = 1, timeout: Optional[float] = None, flexible: bool = False,
             prefetch: int = 0) -> Iterator[Sample]:
        """Yields batches as :meth:`sample` returns them until the table is
        closed or a wait exceeds ``timeout`` (as Reverb's datasets end on
        their rate limiter timeout); other errors propagate. ``prefetch`` > 0
        keeps that many batches sampled ahead on a background thread; those
        items count as sampled when they are taken (rate limiter,
        ``max_times_sampled``), and batches still queued when the iteration
        stops are dropped."""
        return _iterate(self.sample, batch_size, timeout, flexible, prefetch)

    def __iter__(self) -> Iterator[Sample]:
        return self.iter()


# --------------------------------------------------------------------------- replay over gRPC

_DEFAULT_MAX_MESSAGE_BYTES = 64 << 20


def _require_service(what: str) -> None:
    if not getattr(_core, "replay_service_available", False):
        raise NotImplementedError(f"flywheel.replay.{what}: this flywheel build has no gRPC replay service "
                                  f"(it was built with FLYWHEEL_BUILD_GRPC=OFF)")


def _table_name(table: Union[str, Table]) -> str:
    if isinstance(table, Table):
        return table.name
    if not isinstance(table, str):
        raise TypeError(f"table must be a name (str) or a flywheel.replay.Table, got {table!r}")
    return table


class Server:
    """A replay server: serves in-process :class:`Table` objects over gRPC
    (docs/replay.md, "Service and protocol") to :class:`Client` objects in
    this or other processes on the same machine. The tables stay usable in
    process (writers, samplers, ``info()``) while served.

    Args:
      tables: the tables to serve (names must be unique).
      port: TCP port; 0 picks a free one (see :attr:`port`).
      host: loopback only: ``"127.0.0.1"`` (default), ``"::1"`` or
        ``"localhost"``; anything else raises ``ValueError``.
      checkpoint_dir: where checkpoints go (docs/replay.md, "Checkpoints");
        None = no checkpoints.
      checkpoint_interval: seconds between automatic checkpoints (None or
        0 = only when :meth:`checkpoint` or a client asks). Needs
        ``checkpoint_dir``.
      keep_last: complete checkpoints kept (0 keeps all).
      restore: on start, serve the tables of the newest complete checkpoint
        in ``checkpoint_dir``, if there is one. A restored table replaces the
        given table of the same name (contents, options and rate limiter
        counters as checkpointed; the given one stays in process but is not
        served); restored tables not given are served too; given tables the
        checkpoint lacks start empty. :attr:`tables` holds what is served.
      max_message_bytes: largest gRPC message sent or accepted.
      restore_seed: seed of restored Uniform and Prioritized samplers.
      weights: also serve a weight store on the same port
        (:class:`flywheel.rl.WeightClient`; docs/rl.md, "Weights").

    Used as a context manager, the server stops on exit. Thread-safe.
    """

    __slots__ = ("_s", "_tables", "_restore_seed")

    def __init__(self, tables: Union[Sequence[Table], Table] = (), port: int = 0, host: str = "127.0.0.1",
                 checkpoint_dir: Optional[str] = None, checkpoint_interval: Optional[float] = None,
                 keep_last: int = 3, restore: bool = True, max_message_bytes: int = _DEFAULT_MAX_MESSAGE_BYTES,
                 *, restore_seed: int = 0, weights: bool = False):
        _require_service("Server")
        if isinstance(tables, Table):
            tables = [tables]
        tables = list(tables)
        for t in tables:
            if not isinstance(t, Table):
                raise TypeError(f"Server tables must be flywheel.replay.Table objects, got {t!r}")
        if isinstance(port, bool) or not isinstance(port, (int, np.integer)) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int in [0, 65535], got {port!r}")
        if not isinstance(host, str) or not host:
            raise ValueError(f"host must be a loopback host name or address, got {host!r}")
        address = f"[{host}]:{int(port)}" if ":" in host and not host.startswith("[") else f"{host}:{int(port)}"
        if checkpoint_dir is not None:
            checkpoint_dir = os.fspath(checkpoint_dir)
        self._s = _core.ReplayServer([t._t for t in tables], address, int(max_message_bytes),
                                     checkpoint_dir or "", _seconds(checkpoint_interval), int(keep_last),
                                     bool(restore), int(restore_seed), bool(weights))
        self._restore_seed = int(restore_seed)
        given = {id(t._t): t for t in tables}
        self._tables: Dict[str, Table] = {}
        for core in self._s.tables():
            t = given.get(id(core))
            self._tables[core.name] = t if t is not None else Table._from_core(core, self._restore_seed)

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return self._s.port

    @property
    def address(self) -> str:
        """``"127.0.0.1:<port>"``: what a :class:`Client` connects to."""
        return self._s.address

    @property
    def tables(self) -> Dict[str, Table]:
        """``{name: Table}`` of the tables served: the given ones, or those
        restored from ``checkpoint_dir`` in their place."""
        return dict(self._tables)

    @property
    def restored_checkpoint(self) -> Optional[int]:
        """The id of the checkpoint restored on start, or None."""
        return self._s.restored_checkpoint

    def stats(self) -> Dict[str, int]:
        """Counters: ``chunks_received``, ``chunk_bytes_received``,
        ``items_inserted``, ``item_errors``, ``chunks_sent``, ``items_sent``,
        ``open_insert_streams``, ``open_sample_streams``,
        ``cached_insert_chunks``, ``checkpoints``, ``checkpoint_failures``."""
        return self._s.stats()

    def checkpoint(self) -> Dict[str, Any]:
        """Writes a checkpoint of every served table now, without blocking
        inserts and samples for longer than a snapshot. Returns ``id``,
        ``path``, ``max_pause`` (seconds: the longest a table was locked),
        ``pauses`` (``{table: seconds}``), ``num_items``, ``num_chunks``,
        ``chunk_bytes``, ``duration`` (seconds) and ``deleted`` (checkpoint
        ids removed by retention). Raises RuntimeError without a
        ``checkpoint_dir``."""
        return self._s.checkpoint()

    def stop(self) -> None:
        """Stops serving: open streams are cancelled after a short grace
        period. The tables stay usable in process. Idempotent."""
        self._s.stop()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"flywheel.replay.Server({self.address!r}, tables={list(self._tables)!r})"


class RemoteWriter(_StepWriter):
    """A :class:`Writer` whose items go to replay servers (made by
    :meth:`Client.writer`). Same calls and column-type rules as
    :class:`Writer`; the differences:

    - ``create_item`` returns once the item is sent, without waiting for
      the server, unless ``max_in_flight_items`` items are unacknowledged
      (then it waits, up to ``timeout``, for them). ``timeout`` also bounds
      the server's wait on the table's rate limiter; a server-side error for
      an item (``TimeoutError`` from that wait, an unknown table as
      ``KeyError``, a trajectory not matching the table's signature as
      ``ValueError``) is raised by a later ``create_item``, ``flush`` or
      ``close``, naming the server.
    - Column types come from the first value (or from ``signature`` given to
      :meth:`Client.writer`); the servers' table signatures are not
      consulted.
    - With several servers, each episode goes to one server and the next
      episode to the next (``end_episode`` moves on).
    - ``flush(timeout)`` waits until every item sent is acknowledged.
      ``close()`` flushes and ends the streams. Used as a context manager,
      the episode ends and the writer closes on exit (without an exception;
      with one, the writer is left to garbage collection, which cancels its
      streams).
    """

    def __init__(self, core: Any, signature: Optional[Mapping[str, str]] = None):
        self._w = core
        self._types = {}
        self._signature_types = {}
        if signature is not None:
            if not isinstance(signature, Mapping):
                raise TypeError(f"writer signature must be a dict of column -> type, got {type(signature).__name__}")
            for col, type_text in signature.items():
                self._signature_types[col] = _step_type(f"writer signature: column '{col}'", type_text)

    @property
    def current_shard(self) -> int:
        """Index (into :attr:`Client.addresses`) of the current episode's server."""
        return self._w.current_shard

    @property
    def closed(self) -> bool:
        return self._w.closed

    def create_item(self, table: Union[str, Table], priority: float, trajectory: Mapping[str, int],
                    timeout: Optional[float] = None) -> int:
        """Sends an item of the last ``n`` steps of each column in
        ``trajectory`` (``{column: n}``) to ``table`` (a name) on the current
        episode's server; returns its key. See the class docstring for what
        ``timeout`` bounds and when server-side errors are raised."""
        return self._w.create_item(_table_name(table), float(priority), _trajectory(trajectory),
                                   _seconds(timeout))

    def end_episode(self) -> None:
        """Ends the episode (its chunks may be dropped on the server); the
        next episode goes to the next server."""
        self._w.end_episode()

    def flush(self, timeout: Optional[float] = None) -> None:
        """Waits up to ``timeout`` seconds (None = forever) until every item
        sent is acknowledged; raises the first item error since the last
        flush (others appended to its message), or ``TimeoutError``."""
        self._w.flush(_seconds(timeout))

    def close(self) -> None:
        """Flushes (waiting as long as that takes) and ends the streams; raises
        as :meth:`flush`. Later calls raise RuntimeError. Idempotent."""
        self._w.close()

    def __enter__(self) -> "RemoteWriter":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.end_episode()
            self.close()

    def __repr__(self) -> str:
        return (f"flywheel.replay.RemoteWriter(columns={self.column_types!r}, episode_steps={self.episode_steps}, "
                f"closed={self.closed})")


class Client:
    """A client of one or several replay servers (:class:`Server`, or
    ``flywheel replay serve``) that serve the same tables.

    ``address``: ``"127.0.0.1:PORT"``, or a list of them. With several
    servers (docs/replay.md, "Sharding") a :meth:`writer` sends each episode
    to one server, the next episode to the next; :meth:`sample` spreads a
    batch over the servers in proportion to each one's table size and
    scales each item's ``probability`` by the chance that its server was
    asked, so importance weights hold for the union of the tables.
    :meth:`info` sums the tables over servers; :meth:`reset`, :meth:`close`
    and :meth:`checkpoint` go to every server.

    Args:
      address: one address or a list of distinct addresses.
      max_message_bytes: largest gRPC message sent or accepted (as the
        server's).
      seed: seed of the sample spreading over servers.
      watchdog: seconds after which a blocked call on the main thread logs
        the servers' explanation (and again every as many seconds); 0 =
        never.

    Connects lazily: a server that is not up fails the first call that
    needs it (RuntimeError). Results and errors are those of the in-process
    API: :meth:`sample` returns a :class:`Sample`; ``TimeoutError`` (whose
    message holds the servers' explanation), :class:`Cancelled`, and
    ``KeyError`` for a table no server has. Blocking calls release the GIL,
    and on the main thread wait in slices so Ctrl-C works. Thread-safe;
    samples through one client run one at a time (use one client per
    sampling thread to sample concurrently). Used as a context manager, it
    disconnects on exit.
    """

    __slots__ = ("_c",)

    def __init__(self, address: Union[str, Sequence[str]], max_message_bytes: int = _DEFAULT_MAX_MESSAGE_BYTES,
                 seed: int = 0, *, watchdog: float = 10.0):
        _require_service("Client")
        addresses = [address] if isinstance(address, str) else list(address)
        for a in addresses:
            if not isinstance(a, str):
                raise TypeError(f"server addresses must be str like '127.0.0.1:PORT', got {a!r}")
        self._c = _core.ReplayClient(addresses, int(max_message_bytes), int(seed), float(watchdog))

    @property
    def num_shards(self) -> int:
        """Number of servers."""
        return self._c.num_shards

    @property
    def addresses(self) -> list:
        return self._c.addresses

    def sample(self, table: Union[str, Table], batch_size: int = 1, timeout: Optional[float] = None,
               flexible: bool = False) -> Sample:
        """Samples ``batch_size`` items from ``table``, as
        :meth:`Sampler.sample`: waits up to ``timeout`` seconds (None =
        forever); with ``flexible``, returns 1..``batch_size`` items once
        the first is there. Without ``flexible`` a batch from one server is
        all or nothing (a timeout takes no items); a batch spread over
        several servers that times out loses what some servers had sent
        (those items count as sampled)."""
        if isinstance(batch_size, (bool, float)) or not isinstance(batch_size, (int, np.integer)):
            raise TypeError(f"batch_size must be an int, got {batch_size!r}")
        return Sample(self._c.sample(_table_name(table), int(batch_size), _seconds(timeout), bool(flexible)))

    def iter(self, table: Union[str, Table], batch_size: int = 1, timeout: Optional[float] = None,
             flexible: bool = False, prefetch: int = 0) -> Iterator[Sample]:
        """Yields batches as :meth:`sample` returns them until the table is
        closed or a wait exceeds ``timeout``; other errors propagate.
        ``prefetch`` as :meth:`Sampler.iter`."""
        return _iterate(lambda n, t, f: self.sample(table, n, t, f), batch_size, timeout, flexible, prefetch)

    def writer(self, chunk_length: int = 16, codec: str = "lz4", max_history: int = 10000,
               max_in_flight_items: int = 64, *, signature: Optional[Mapping[str, str]] = None) -> RemoteWriter:
        """A new :class:`RemoteWriter` (its own streams, one per server).
        ``chunk_length``, ``codec``, ``max_history`` as :class:`Writer`;
        ``max_in_flight_items``: items sent but not yet acknowledged before
        ``create_item`` waits; ``signature``: optional ``{column: type}``
        fixing column types instead of inferring them from the first
        values (give a table's signature when it has one)."""
        core = self._c.writer(int(chunk_length), str(codec), int(max_history), int(max_in_flight_items))
        return RemoteWriter(core, signature)

    def mutate_priorities(self, table: Union[str, Table], updates: Optional[Mapping[int, float]] = None,
                          deletes: Optional[Sequence[int]] = None) -> int:
        """As :meth:`Table.mutate_priorities`, on every server (an item
        lives on one); returns how many keys no server held."""
        return self._c.mutate_priorities(_table_name(table), *_mutations(updates, deletes))

    def info(self, timeout: Optional[float] = 30.0) -> Dict[str, Dict[str, Any]]:
        """``{table: info}``: the keys of :meth:`Table.info`, summed over
        servers (``size``, ``max_size``, the limiter counters, blocked calls,
        ``num_evicted``, ``num_deleted``; options from the first server),
        plus ``explain``, each server's :meth:`Table.explain` prefixed with
        its address."""
        return self._c.info(_seconds(timeout))

    def explain(self, table: Union[str, Table]) -> str:
        """The servers' explanation of ``table`` (``info()[table]["explain"]``)."""
        name = _table_name(table)
        info = self.info()
        if name not in info:
            raise KeyError(f"no server has table '{name}'")
        return info[name]["explain"]

    def reset(self, table: Union[str, Table]) -> None:
        """Empties ``table`` on every server and zeroes its rate limiters."""
        self._c.reset(_table_name(table))

    def close(self, table: Union[str, Table]) -> None:
        """Closes ``table`` on every server (as :meth:`Table.close`: blocked
        and later inserts and samples raise :class:`Cancelled`)."""
        self._c.close(_table_name(table))

    def checkpoint(self) -> list:
        """Asks every server to write a checkpoint now; one dict per server,
        in address order: ``address``, ``id``, ``path`` (on the server's
        machine), ``max_pause`` and ``duration`` (seconds), ``num_items``,
        ``num_chunks``, ``chunk_bytes``. RuntimeError when a server has no
        checkpoint directory."""
        return self._c.checkpoint()

    def disconnect(self) -> None:
        """Drops the connections; later calls raise RuntimeError. Writers
        made by this client keep theirs. Idempotent."""
        self._c.disconnect()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.disconnect()

    def __repr__(self) -> str:
        state = "" if self._c.connected else ", disconnected"
        return f"flywheel.replay.Client({self.addresses!r}{state})"
