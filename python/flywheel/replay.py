"""In-process experience replay (the Python face of src/flywheel/replay/).

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
"""

from __future__ import annotations

import math
import sys
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core
from ._convert import _cast, _parse_type

__all__ = [
    "RateLimiter", "Selector", "Uniform", "Prioritized", "Fifo", "Lifo", "MinHeap", "MaxHeap",
    "Table", "Writer", "Sampler", "Sample", "Cancelled",
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
        ups = [] if updates is None else [(int(k), float(p)) for k, p in dict(updates).items()]
        dels = [] if deletes is None else [int(k) for k in np.asarray(deletes, dtype=np.uint64).reshape(-1)]
        return self._t.mutate_priorities(ups, dels)

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


class Writer:
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
        if not isinstance(trajectory, Mapping):
            raise TypeError(f"create_item: trajectory must be a dict of column -> number of steps, "
                            f"got {type(trajectory).__name__}")
        traj = []
        for col, n in trajectory.items():
            if isinstance(n, (bool, float)) or not isinstance(n, (int, np.integer)):
                raise TypeError(f"create_item: column '{col}': number of steps must be an int, got {n!r}")
            traj.append((col, int(n)))
        return self._w.create_item(table, float(priority), traj, _seconds(timeout))

    def end_episode(self) -> None:
        """Ends the episode: pending steps are chunked, and later items can
        only use steps appended after this call. Column types stay fixed."""
        self._w.end_episode()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end_episode()


# --------------------------------------------------------------------------- sampler


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

    def iter(self, batch_size: int = 1, timeout: Optional[float] = None, flexible: bool = False) -> Iterator[Sample]:
        """Yields batches as :meth:`sample` returns them until the table is
        closed or a wait exceeds ``timeout`` (as Reverb's datasets end on
        their rate limiter timeout); other errors propagate."""
        while True:
            try:
                s = self.sample(batch_size, timeout, flexible)
            except (Cancelled, TimeoutError):
                return
            yield s

    def __iter__(self) -> Iterator[Sample]:
        return self.iter()
