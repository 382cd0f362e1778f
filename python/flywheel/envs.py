"""Parallel environments (the Python face of src/flywheel/envs/; docs/envs.md).

:func:`make` builds an :class:`EnvPool` of built-in C++ environments that
reproduce Gymnasium's classic control (CartPole-v1, Acrobot-v1,
MountainCar-v0, MountainCarContinuous-v0, Pendulum-v1), stepped on C++
threads, with Gymnasium's vector-env API::

    import numpy as np
    from flywheel import envs

    pool = envs.make("CartPole-v1", num_envs=64, num_threads=2, seed=0)
    obs, info = pool.reset()                        # (64, 4) float32
    for _ in range(1000):
        actions = np.random.randint(2, size=64)
        obs, reward, terminated, truncated, info = pool.step(actions)

With ``batch_size < num_envs`` the pool runs asynchronously (EnvPool's
send/recv): :meth:`EnvPool.send` queues steps and returns at once,
:meth:`EnvPool.recv` returns the first ``batch_size`` results to finish, with
the env of each row in ``info["env_id"]``::

    pool = envs.make("CartPole-v1", num_envs=16, batch_size=8, num_threads=2)
    obs, info = pool.reset()
    pool.send(np.zeros(16, np.int64))               # every env
    for _ in range(1000):
        obs, reward, terminated, truncated, info = pool.recv()
        pool.send(np.random.randint(2, size=8), info["env_id"])

Arrays returned by ``reset``/``step``/``recv`` are views of the pool's
buffers, not copies: a batch stays intact until the second ``step``/``recv``
after the one that returned it (so the previous batch is still valid while
you hold the current one), and ``reset``'s until the next ``reset``. Copy
what you keep longer.

:func:`from_python` wraps your own Python environments (objects with
Gymnasium's ``reset``/``step`` and spaces) in the same API; they run in the
calling thread.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core

__all__ = [
    "Space", "Box", "Discrete", "MultiDiscrete", "batch_space", "EnvPool", "PythonEnvPool", "make",
    "from_python", "registry", "AUTORESET_MODES",
]

AUTORESET_MODES = ("next_step", "same_step")

# --------------------------------------------------------------------------- spaces


class Space:
    """Base of :class:`Box`, :class:`Discrete` and :class:`MultiDiscrete`
    (Gymnasium's spaces of the same names, minus what needs Gymnasium)."""

    shape: Tuple[int, ...]
    dtype: np.dtype

    def __init__(self, seed: Optional[int] = None):
        self._rng = np.random.default_rng(seed)

    def seed(self, seed: Optional[int] = None) -> None:
        """Reseeds :meth:`sample`."""
        self._rng = np.random.default_rng(seed)

    def sample(self) -> Any:
        raise NotImplementedError

    def contains(self, x: Any) -> bool:
        raise NotImplementedError

    def __contains__(self, x: Any) -> bool:
        return self.contains(x)


class Box(Space):
    """A box in R^shape: ``low <= x <= high`` element-wise, of ``dtype``.

    ``low``/``high`` are scalars or arrays broadcast to ``shape`` (which,
    when omitted, is their shape). Bounds are stored in ``dtype``.
    """

    def __init__(self, low: Any, high: Any, shape: Optional[Sequence[int]] = None, dtype: Any = np.float32,
                 seed: Optional[int] = None):
        super().__init__(seed)
        self.dtype = np.dtype(dtype)
        if shape is None:
            shape = np.broadcast(np.asarray(low), np.asarray(high)).shape
        self.shape = tuple(int(d) for d in shape)
        self.low = np.broadcast_to(np.asarray(low, dtype=self.dtype), self.shape).copy()
        self.high = np.broadcast_to(np.asarray(high, dtype=self.dtype), self.shape).copy()
        if np.any(self.low > self.high):
            raise ValueError(f"Box: low > high somewhere ({self.low} > {self.high})")

    def sample(self) -> np.ndarray:
        """Uniform where both bounds are finite, else as Gymnasium: normal
        when unbounded, shifted exponential when bounded on one side."""
        low = self.low.astype(np.float64)
        high = self.high.astype(np.float64)
        if self.dtype.kind in "iu":
            return self._rng.integers(low, high + 1, size=self.shape).astype(self.dtype)
        lo_ok, hi_ok = np.isfinite(low), np.isfinite(high)
        x = np.empty(self.shape, np.float64)
        both = lo_ok & hi_ok
        x[both] = self._rng.uniform(low[both], high[both])
        neither = ~lo_ok & ~hi_ok
        x[neither] = self._rng.normal(size=int(neither.sum()))
        below = lo_ok & ~hi_ok
        x[below] = low[below] + self._rng.exponential(size=int(below.sum()))
        above = ~lo_ok & hi_ok
        x[above] = high[above] - self._rng.exponential(size=int(above.sum()))
        return np.clip(x, low, high).astype(self.dtype)

    def contains(self, x: Any) -> bool:
        x = np.asarray(x)
        if x.shape != self.shape or not np.can_cast(x.dtype, self.dtype, casting="same_kind"):
            return False
        return bool(np.all(x >= self.low) and np.all(x <= self.high))

    def __repr__(self) -> str:
        if self.low.size and np.all(self.low == self.low.flat[0]) and np.all(self.high == self.high.flat[0]):
            return f"Box({self.low.flat[0]}, {self.high.flat[0]}, {self.shape}, {self.dtype})"
        return f"Box({self.low}, {self.high}, {self.shape}, {self.dtype})"

    def __eq__(self, other: Any) -> bool:
        return (isinstance(other, Box) and self.shape == other.shape and self.dtype == other.dtype
                and np.array_equal(self.low, other.low) and np.array_equal(self.high, other.high))


class Discrete(Space):
    """The integers ``start, start + 1, ..., start + n - 1`` (int64)."""

    def __init__(self, n: int, start: int = 0, seed: Optional[int] = None):
        super().__init__(seed)
        if int(n) < 1:
            raise ValueError(f"Discrete: n must be >= 1, got {n}")
        self.n = int(n)
        self.start = int(start)
        self.shape = ()
        self.dtype = np.dtype(np.int64)

    def sample(self) -> np.int64:
        return np.int64(self.start + self._rng.integers(self.n))

    def contains(self, x: Any) -> bool:
        if isinstance(x, (bool, np.bool_)):
            return False
        if isinstance(x, np.ndarray):
            if x.shape != () or x.dtype.kind not in "iu":
                return False
            x = int(x)
        if not isinstance(x, (numbers.Integral, np.integer)):
            return False
        return self.start <= int(x) < self.start + self.n

    def __repr__(self) -> str:
        return f"Discrete({self.n})" if self.start == 0 else f"Discrete({self.n}, start={self.start})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Discrete) and (self.n, self.start) == (other.n, other.start)


class MultiDiscrete(Space):
    """One Discrete per element: element i in ``[start[i], start[i] + nvec[i])``
    (what a batch of Discrete actions is)."""

    def __init__(self, nvec: Any, start: Any = 0, seed: Optional[int] = None):
        super().__init__(seed)
        self.nvec = np.asarray(nvec, dtype=np.int64)
        self.start = np.broadcast_to(np.asarray(start, dtype=np.int64), self.nvec.shape).copy()
        self.shape = self.nvec.shape
        self.dtype = np.dtype(np.int64)

    def sample(self) -> np.ndarray:
        return (self.start + self._rng.integers(self.nvec)).astype(np.int64)

    def contains(self, x: Any) -> bool:
        x = np.asarray(x)
        if x.shape != self.shape or x.dtype.kind not in "iu":
            return False
        return bool(np.all(x >= self.start) and np.all(x < self.start + self.nvec))

    def __repr__(self) -> str:
        return f"MultiDiscrete({self.nvec})"

    def __eq__(self, other: Any) -> bool:
        return (isinstance(other, MultiDiscrete) and np.array_equal(self.nvec, other.nvec)
                and np.array_equal(self.start, other.start))


def batch_space(space: Space, n: int) -> Space:
    """The space of ``n`` stacked values of ``space`` (Gymnasium's batch_space)."""
    if isinstance(space, Box):
        return Box(np.broadcast_to(space.low, (n,) + space.shape), np.broadcast_to(space.high, (n,) + space.shape),
                   (n,) + space.shape, space.dtype)
    if isinstance(space, Discrete):
        return MultiDiscrete(np.full(n, space.n), np.full(n, space.start))
    raise TypeError(f"batch_space: unsupported space {space!r}")


def _space_from_core(d: Mapping[str, Any]) -> Space:
    if d["kind"] == "discrete":
        return Discrete(d["n"], d["start"])
    return Box(d["low"], d["high"], d["shape"], d["dtype"])


def _space_from_python(space: Any, what: str) -> Space:
    """Our space for a user env's space: ours, or anything shaped like
    Gymnasium's Discrete (``n``) or Box (``low``, ``high``, ``shape``, ``dtype``)."""
    if isinstance(space, (Box, Discrete)):
        return space
    if hasattr(space, "n") and not hasattr(space, "nvec"):
        return Discrete(int(space.n), int(getattr(space, "start", 0)))
    if all(hasattr(space, a) for a in ("low", "high", "shape", "dtype")):
        return Box(space.low, space.high, space.shape, space.dtype)
    raise TypeError(f"{what} must be a Discrete-like (n) or Box-like (low, high, shape, dtype) space, got {space!r}")


# --------------------------------------------------------------------------- registry


def registry() -> Dict[str, Dict[str, Any]]:
    """The built-in environments: id -> {"max_episode_steps": int,
    "kwargs": "name=default, ..."} (the constructor arguments ``make`` takes)."""
    return {env_id: {"max_episode_steps": steps, "kwargs": kwargs}
            for env_id, steps, kwargs in _core.env_specs()}


def _check_mode(autoreset_mode: Any) -> str:
    """"next_step"/"same_step", or Gymnasium's AutoresetMode.NEXT_STEP/SAME_STEP
    (values "NextStep"/"SameStep")."""
    text = str(getattr(autoreset_mode, "value", autoreset_mode)).lower().replace("_", "")
    modes = {m.replace("_", ""): m for m in AUTORESET_MODES}
    if text not in modes:
        raise ValueError(f"autoreset_mode must be one of {AUTORESET_MODES}, got {autoreset_mode!r}")
    return modes[text]


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _limits(max_episode_steps: Any, num_envs: int) -> List[int]:
    """None -> [] (registered limit), int -> [n], sequence -> per env."""
    if max_episode_steps is None:
        return []
    if isinstance(max_episode_steps, (numbers.Integral, np.integer)) and not isinstance(max_episode_steps, bool):
        return [_check_count("max_episode_steps", max_episode_steps, 0)]
    steps = [_check_count("max_episode_steps[]", s, 0) for s in max_episode_steps]
    if len(steps) != num_envs:
        raise ValueError(f"max_episode_steps has {len(steps)} values; need one int or num_envs = {num_envs}")
    return steps


def _env_kwargs(env_kwargs: Mapping[str, Any], num_envs: int) -> List[Dict[str, float]]:
    """Scalars apply to every env; a sequence gives one value per env."""
    per_env = {k: v for k, v in env_kwargs.items() if isinstance(v, (list, tuple, np.ndarray))}
    for k, v in env_kwargs.items():
        values = v if k in per_env else [v]
        for x in values:
            if isinstance(x, bool) or not isinstance(x, (numbers.Real, np.number)):
                raise TypeError(f"env argument {k!r} must be a number or one number per env, got {v!r}")
        if k in per_env and len(v) != num_envs:
            raise ValueError(f"env argument {k!r} has {len(v)} values; need a number or num_envs = {num_envs}")
    if not env_kwargs:
        return []
    if not per_env:
        return [{k: float(v) for k, v in env_kwargs.items()}]
    return [{k: float(v[i] if k in per_env else v) for k, v in env_kwargs.items()} for i in range(num_envs)]


def _seed_list(seed: Any, num_envs: int) -> Optional[List[int]]:
    if seed is None:
        return None
    seeds = [seed] if isinstance(seed, (numbers.Integral, np.integer)) else list(seed)
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, (numbers.Integral, np.integer)) or int(s) < 0:
            raise ValueError(f"seed must be None, an int >= 0 or num_envs ints >= 0, got {seed!r}")
    if len(seeds) not in (1, num_envs):
        raise ValueError(f"seed has {len(seeds)} values; need one int (env i gets seed + i) or num_envs = {num_envs}")
    return [int(s) % (1 << 64) for s in seeds]


def _reset_state(options: Optional[Mapping[str, Any]]) -> Optional[np.ndarray]:
    if options is None:
        return None
    unknown = set(options) - {"state"}
    if unknown:
        raise ValueError(f"reset: unknown options {sorted(unknown)} (supported: 'state')")
    return np.asarray(options["state"], dtype=np.float64) if "state" in options else None


# --------------------------------------------------------------------------- the C++ pool

Info = Dict[str, Any]
StepResult = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Info]


class EnvPool:
    """A pool of built-in C++ environments; build it with :func:`make`.

    Gymnasium's vector-env API (``reset``, ``step``, ``num_envs``,
    ``single_observation_space``, ``single_action_space``,
    ``observation_space``, ``action_space``, ``close``) plus EnvPool's
    ``send``/``recv``. Results: ``obs`` (rows, *obs_shape) of the space's
    dtype, ``reward`` float64, ``terminated``/``truncated`` bool, and ``info``
    with ``"env_id"`` (int32: the env of each row) and, with
    ``autoreset_mode="same_step"``, ``"final_obs"`` (the terminal observation
    where ``"_final_obs"`` is True, zeros elsewhere). Rows are in env order
    for ``reset`` and in sync mode; in async mode (``batch_size <
    num_envs``) in the order envs finished.

    Calls may come from any thread; they are serialised.
    """

    def __init__(self, core: Any):
        self._core = core
        self.num_envs: int = core.num_envs
        self.batch_size: int = core.batch_size
        self.single_observation_space = _space_from_core(core.observation_space)
        self.single_action_space = _space_from_core(core.action_space)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata: Dict[str, Any] = {"autoreset_mode": core.autoreset_mode}

    # ---- properties

    @property
    def env_id(self) -> str:
        return self._core.env_id

    @property
    def num_threads(self) -> int:
        return self._core.num_threads

    @property
    def autoreset_mode(self) -> str:
        """"next_step" or "same_step" (docs/envs.md#autoreset)."""
        return self._core.autoreset_mode

    @property
    def is_async(self) -> bool:
        return self.batch_size < self.num_envs

    @property
    def max_episode_steps(self) -> List[int]:
        """Each env's time limit (0 = none)."""
        return self._core.max_episode_steps

    @property
    def state_size(self) -> int:
        """Values in one env's internal state (``reset(options={"state": ...})``)."""
        return self._core.state_size

    @property
    def pending(self) -> int:
        """Steps sent and not yet received."""
        return self._core.pending

    @property
    def closed(self) -> bool:
        return self._core.closed

    # ---- Gymnasium vector API

    def reset(self, *, seed: Union[None, int, Sequence[int]] = None,
              options: Optional[Mapping[str, Any]] = None) -> Tuple[np.ndarray, Info]:
        """Resets every env; returns ``(obs, info)`` with one row per env in
        env order. ``seed``: None continues each env's random stream; an int
        seeds env i with ``seed + i``; a list gives one seed per env.
        ``options={"state": s}`` starts every env (s of shape (state_size,))
        or each env (s of shape (num_envs, state_size)) from that internal
        state instead of a random one. Steps still in flight are dropped."""
        obs, env_id = self._core.reset(_seed_list(seed, self.num_envs), _reset_state(options))
        return obs, {"env_id": env_id}

    def step(self, actions: Any, env_ids: Any = None) -> StepResult:
        """Steps every env (sync mode, ``env_ids`` None) or the envs in
        ``env_ids`` (then recv: async mode returns ``batch_size`` results,
        not necessarily these envs'). Returns ``(obs, reward, terminated,
        truncated, info)``."""
        return self._result(self._core.step(actions, env_ids, None))

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Queues one step per env in ``env_ids`` (default: every env, in
        order) with the matching row of ``actions``; returns at once. An env
        may not be sent again before its result was received."""
        self._core.send(actions, env_ids)

    def recv(self, timeout: Optional[float] = None) -> StepResult:
        """The next ``batch_size`` results, as :meth:`step`; ``info["env_id"]``
        names each row's env. Raises RuntimeError at once when fewer than
        ``batch_size`` steps are pending, TimeoutError after ``timeout``
        seconds (None: no limit; nothing is lost), KeyboardInterrupt on
        Ctrl-C."""
        return self._result(self._core.recv(timeout))

    def close(self) -> None:
        """Stops the pool's threads; later calls raise RuntimeError. Arrays
        already returned stay valid."""
        self._core.close()

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = f"async, batch_size={self.batch_size}" if self.is_async else "sync"
        return (f"EnvPool({self.env_id}, num_envs={self.num_envs}, {mode}, num_threads={self.num_threads}, "
                f"autoreset_mode={self.autoreset_mode})")

    @staticmethod
    def _result(r: Tuple[Any, ...]) -> StepResult:
        obs, reward, terminated, truncated, env_id, final_obs, has_final = r
        info: Info = {"env_id": env_id}
        if final_obs is not None:
            info["final_obs"] = final_obs
            info["_final_obs"] = has_final
        return obs, reward, terminated, truncated, info


def make(env_id: str, num_envs: int = 1, batch_size: Optional[int] = None, num_threads: int = 1, seed: int = 0,
         autoreset_mode: str = "next_step", max_episode_steps: Union[None, int, Sequence[int]] = None,
         spin_us: float = 20.0, **env_kwargs: Any) -> EnvPool:
    """An :class:`EnvPool` of ``num_envs`` built-in envs ``env_id`` (see
    :func:`registry`).

    * ``batch_size``: None or ``num_envs`` for sync mode; fewer for async.
    * ``num_threads``: threads stepping envs (sync: the caller plus
      ``num_threads - 1`` workers; async: ``num_threads`` workers).
    * ``seed``: env i starts from seed ``seed + i``.
    * ``autoreset_mode``: "next_step" (Gymnasium's default) or "same_step".
    * ``max_episode_steps``: None (the registered limit, e.g. 500 for
      CartPole-v1), an int for every env, or one per env; 0 = no limit.
    * ``spin_us``: how long idle threads spin before sleeping.
    * ``**env_kwargs``: constructor arguments, e.g. ``g=9.81`` for
      Pendulum-v1; a number for every env or a sequence with one per env.
    """
    num_envs = _check_count("num_envs", num_envs, 1)
    batch = num_envs if batch_size is None else _check_count("batch_size", batch_size, 1)
    num_threads = _check_count("num_threads", num_threads, 1)
    if isinstance(seed, bool) or not isinstance(seed, (numbers.Integral, np.integer)) or int(seed) < 0:
        raise ValueError(f"seed must be an int >= 0 (env i gets seed + i), got {seed!r}")
    core = _core.EnvPool(str(env_id), num_envs, batch, num_threads, int(seed) % (1 << 64),
                         _check_mode(autoreset_mode), _limits(max_episode_steps, num_envs),
                         _env_kwargs(env_kwargs, num_envs), float(spin_us))
    return EnvPool(core)


# --------------------------------------------------------------------------- Python envs


class PythonEnvPool:
    """Your own Python envs behind :class:`EnvPool`'s API (build it with
    :func:`from_python`). Envs run one after another in the calling thread,
    holding the GIL: the slow path, for envs that exist only in Python.

    Same semantics as :class:`EnvPool` (sync/async, autoreset modes, time
    limits, seeds env i = seed + i), except that results are fresh arrays
    rather than views, and "the first to finish" in async mode is the order
    envs were sent (FIFO).
    """

    def __init__(self, envs: List[Any], batch_size: int, seed: Optional[int], autoreset_mode: str,
                 max_episode_steps: List[int]):
        self.envs = envs
        self.num_envs = len(envs)
        self.batch_size = batch_size
        self.single_observation_space = _space_from_python(envs[0].observation_space, "observation_space")
        self.single_action_space = _space_from_python(envs[0].action_space, "action_space")
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata: Dict[str, Any] = {"autoreset_mode": autoreset_mode}
        self._mode = autoreset_mode
        self._limits = (max_episode_steps * self.num_envs if len(max_episode_steps) == 1
                        else list(max_episode_steps) or [0] * self.num_envs)
        self._seed = seed
        self._elapsed = [0] * self.num_envs
        self._needs_reset = [False] * self.num_envs
        self._queue: List[Tuple[int, Any]] = []
        self._in_flight = [False] * self.num_envs
        self._was_reset = False
        self._closed = False

    autoreset_mode = property(lambda self: self._mode)
    is_async = property(lambda self: self.batch_size < self.num_envs)
    max_episode_steps = property(lambda self: list(self._limits))
    pending = property(lambda self: len(self._queue))
    closed = property(lambda self: self._closed)

    def _check_open(self, what: str, needs_reset: bool = True) -> None:
        if self._closed:
            raise RuntimeError(f"{what}: the pool is closed")
        if needs_reset and not self._was_reset:
            raise RuntimeError(f"{what}: call reset() first")

    def reset(self, *, seed: Union[None, int, Sequence[int]] = None,
              options: Optional[Mapping[str, Any]] = None) -> Tuple[np.ndarray, Info]:
        self._check_open("reset", needs_reset=False)
        seeds = _seed_list(seed, self.num_envs)
        if seeds is None and not self._was_reset and self._seed is not None:
            seeds = [self._seed]
        state = _reset_state(options)
        obs = np.empty((self.num_envs,) + self.single_observation_space.shape, self.single_observation_space.dtype)
        for i, env in enumerate(self.envs):
            s = None if seeds is None else (seeds[0] + i if len(seeds) == 1 else seeds[i])
            env_options = None
            if state is not None:
                env_options = {"state": state if state.ndim == 1 else state[i]}
            obs[i] = env.reset(seed=s, options=env_options)[0]
        self._elapsed = [0] * self.num_envs
        self._needs_reset = [False] * self.num_envs
        self._queue.clear()
        self._in_flight = [False] * self.num_envs
        self._was_reset = True
        return obs, {"env_id": np.arange(self.num_envs, dtype=np.int32)}

    def _actions(self, actions: Any, count: int) -> np.ndarray:
        a = np.asarray(actions)
        space = self.single_action_space
        if isinstance(space, Discrete):
            if a.dtype.kind not in "iu":
                raise TypeError(f"actions for {space!r} must be integers, got dtype {a.dtype}")
        elif a.dtype.kind not in "fiu":
            raise TypeError(f"actions for {space!r} must be numbers, got dtype {a.dtype}")
        want = (count,) + space.shape
        if a.shape != want:
            raise ValueError(f"actions have shape {a.shape}; need {want}: {count} envs x {space!r}")
        return a.astype(space.dtype, copy=False)

    def send(self, actions: Any, env_ids: Any = None) -> None:
        self._check_open("send")
        ids = list(range(self.num_envs)) if env_ids is None else [int(e) for e in np.asarray(env_ids).reshape(-1)]
        if env_ids is not None and np.asarray(env_ids).dtype.kind not in "iu":
            raise TypeError(f"env_ids must be integers, got {np.asarray(env_ids).dtype}")
        if not self.is_async and len(ids) != self.num_envs:
            raise ValueError(f"send: in sync mode (batch_size == num_envs == {self.num_envs}) every step is for "
                             f"all envs; got {len(ids)} env ids")
        a = self._actions(actions, len(ids))
        seen = set()
        for k, e in enumerate(ids):
            if not 0 <= e < self.num_envs:
                raise ValueError(f"send: env_ids[{k}] = {e} is out of range [0, {self.num_envs})")
            if e in seen:
                raise ValueError(f"send: env {e} appears twice in env_ids")
            seen.add(e)
            if self._in_flight[e]:
                raise RuntimeError(f"send: env {e} is still stepping; recv() its result before sending it "
                                   "another action")
            if isinstance(self.single_action_space, Discrete) and not self.single_action_space.contains(a[k]):
                raise ValueError(f"send: action {a[k]} for env {e} is outside {self.single_action_space!r}")
        for k, e in enumerate(ids):
            self._in_flight[e] = True
            self._queue.append((e, a[k]))

    def recv(self, timeout: Optional[float] = None) -> StepResult:
        del timeout  # nothing runs in the background: results are computed here
        self._check_open("recv")
        if len(self._queue) < self.batch_size:
            raise RuntimeError(f"recv: {len(self._queue)} steps are pending, fewer than batch_size = "
                               f"{self.batch_size}, so this recv would never return; send() actions first")
        batch, self._queue = self._queue[:self.batch_size], self._queue[self.batch_size:]
        if not self.is_async:
            batch.sort(key=lambda ea: ea[0])
        n = len(batch)
        shape = (n,) + self.single_observation_space.shape
        obs = np.empty(shape, self.single_observation_space.dtype)
        reward = np.zeros(n, np.float64)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        env_id = np.empty(n, np.int32)
        same = self._mode == "same_step"
        final_obs = np.zeros(shape, self.single_observation_space.dtype) if same else None
        has_final = np.zeros(n, bool) if same else None
        for row, (e, action) in enumerate(batch):
            env = self.envs[e]
            env_id[row] = e
            self._in_flight[e] = False
            if self._needs_reset[e]:
                obs[row] = env.reset()[0]
                self._elapsed[e] = 0
                self._needs_reset[e] = False
                continue
            o, r, term, trunc, _ = env.step(action if action.shape else action.item())
            self._elapsed[e] += 1
            trunc = bool(trunc) or (self._limits[e] > 0 and self._elapsed[e] >= self._limits[e])
            obs[row], reward[row], terminated[row], truncated[row] = o, r, bool(term), trunc
            if term or trunc:
                if same:
                    final_obs[row] = o
                    has_final[row] = True
                    obs[row] = env.reset()[0]
                    self._elapsed[e] = 0
                else:
                    self._needs_reset[e] = True
        info: Info = {"env_id": env_id}
        if same:
            info["final_obs"] = final_obs
            info["_final_obs"] = has_final
        return obs, reward, terminated, truncated, info

    def step(self, actions: Any, env_ids: Any = None) -> StepResult:
        self.send(actions, env_ids)
        return self.recv()

    def close(self) -> None:
        if not self._closed:
            for env in self.envs:
                if hasattr(env, "close"):
                    env.close()
        self._closed = True

    def __enter__(self) -> "PythonEnvPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = f"async, batch_size={self.batch_size}" if self.is_async else "sync"
        return f"PythonEnvPool({type(self.envs[0]).__name__}, num_envs={self.num_envs}, {mode})"


def from_python(env_fns: Union[Callable[[], Any], Sequence[Callable[[], Any]]], num_envs: Optional[int] = None,
                batch_size: Optional[int] = None, seed: Optional[int] = 0, autoreset_mode: str = "next_step",
                max_episode_steps: Union[None, int, Sequence[int]] = None) -> PythonEnvPool:
    """A :class:`PythonEnvPool` of your own envs.

    ``env_fns``: one callable per env (Gymnasium's SyncVectorEnv style), or a
    single callable called ``num_envs`` times. Each env needs
    ``reset(seed=None, options=None) -> (obs, info)``, ``step(action) -> (obs,
    reward, terminated, truncated, info)``, and ``observation_space`` /
    ``action_space`` (this module's spaces, Gymnasium's, or any object with
    ``n`` or ``low``/``high``/``shape``/``dtype``). Every env must have the
    same spaces. ``max_episode_steps`` is applied by the pool (None: no
    limit beyond the envs' own truncation); ``seed``: env i's first reset
    gets ``seed + i`` (None: unseeded).
    """
    if callable(env_fns):
        count = _check_count("num_envs", 1 if num_envs is None else num_envs, 1)
        fns = [env_fns] * count
    else:
        fns = list(env_fns)
        if num_envs is not None and num_envs != len(fns):
            raise ValueError(f"num_envs = {num_envs} but {len(fns)} env functions")
        if not fns:
            raise ValueError("from_python: no env functions")
    envs = [fn() for fn in fns]
    for i, env in enumerate(envs):
        for attr in ("reset", "step", "observation_space", "action_space"):
            if not hasattr(env, attr):
                raise TypeError(f"env {i} ({type(env).__name__}) has no {attr}")
    first_obs = _space_from_python(envs[0].observation_space, "observation_space")
    first_act = _space_from_python(envs[0].action_space, "action_space")
    for i, env in enumerate(envs[1:], 1):
        if (_space_from_python(env.observation_space, "observation_space") != first_obs
                or _space_from_python(env.action_space, "action_space") != first_act):
            raise ValueError(f"env {i} has other spaces than env 0: every env of a pool must have the same spaces")
    batch = len(envs) if batch_size is None else _check_count("batch_size", batch_size, 1)
    if batch > len(envs):
        raise ValueError(f"batch_size must be in [1, num_envs = {len(envs)}], got {batch}")
    seeds = _seed_list(seed, 1)
    return PythonEnvPool(envs, batch, seeds[0] if seeds else None, _check_mode(autoreset_mode),
                         _limits(max_episode_steps, len(envs)))
