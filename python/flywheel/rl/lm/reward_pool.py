"""Rewards computed in worker processes, each call under a timeout and the
workers under a memory limit (docs/rl.md, "Language models"). A verifier
that raises, hangs, runs out of memory or kills its process gives the
configured ``failure_value`` for that item, counted by kind, and never stops
the run: a hung or dead worker is replaced.

    pool = RewardPool(rewards.numeric_answer, workers=2, timeout=5.0, memory_mb=1024)
    values = pool.score([(response_text, answer), ...])
    pool.failures  # {"raised": 0, "timeout": 1, "died": 0}
    pool.close()
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import time
import traceback
from collections import deque
from multiprocessing.connection import wait
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

FAILURE_KINDS = ("raised", "timeout", "died")


def _die_with_parent(parent: int) -> None:
    """SIGKILL this worker when the process that started it dies (kill -9 of
    the job must not leave workers behind holding its pipes)."""
    import ctypes
    import os
    import signal
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the prctl
        os._exit(1)


def _worker(fn: Callable[..., float], conn, memory_mb: Optional[int], parent: int = 0) -> None:
    if parent:
        _die_with_parent(parent)
    if memory_mb:
        # On top of what the worker inherits (a forked learner's address space
        # holds torch's libraries: gigabytes of mappings it never touches).
        import os
        with open("/proc/self/statm") as f:
            inherited = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = inherited + (memory_mb << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        idx, args = msg
        try:
            value = float(fn(*args))
            conn.send((idx, "ok", value))
        except BaseException:  # noqa: BLE001 (a verifier's failure of any kind is a failed reward)
            conn.send((idx, "raised", traceback.format_exc(limit=3)))


class RewardPool:
    """``workers`` processes calling ``fn(*item)`` for each item of
    :meth:`score`. Items are scored in parallel; results come back in item
    order. ``timeout`` seconds per call; ``memory_mb`` caps the address
    space each worker may add to what it inherits (None: no cap)."""

    PIPELINE = 32  # items in flight per worker

    def __init__(self, fn: Callable[..., float], workers: int = 2, timeout: float = 5.0,
                 memory_mb: Optional[int] = 2048, failure_value: float = 0.0, start_method: str = "fork"):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self._fn, self._timeout, self._memory_mb = fn, float(timeout), memory_mb
        self.failure_value = float(failure_value)
        self.failures: Dict[str, int] = {k: 0 for k in FAILURE_KINDS}
        self.last_errors: List[str] = []  # the latest few failure messages
        self._ctx = mp.get_context(start_method)
        self._procs: List[Any] = [None] * workers
        self._conns: List[Any] = [None] * workers
        for w in range(workers):
            self._start(w)

    def _start(self, w: int) -> None:
        parent, child = self._ctx.Pipe()
        import os
        p = self._ctx.Process(target=_worker, args=(self._fn, child, self._memory_mb, os.getpid()), daemon=True,
                              name=f"flywheel-reward-{w}")
        p.start()
        child.close()
        self._procs[w], self._conns[w] = p, parent

    def _replace(self, w: int) -> None:
        p = self._procs[w]
        if p.is_alive():
            p.kill()
        p.join(5)
        self._conns[w].close()
        self._start(w)

    def _fail(self, kind: str, message: str) -> float:
        self.failures[kind] += 1
        self.last_errors = (self.last_errors + [f"{kind}: {message}"])[-8:]
        return self.failure_value

    def score(self, items: Sequence[Tuple[Any, ...]]) -> List[float]:
        """One reward per item (a tuple of ``fn``'s arguments), in order.

        Each worker has up to ``PIPELINE`` items in its pipe (one round trip
        per item would dominate cheap verifiers); it answers them in order,
        and each item's timeout runs from when the worker reached it (the
        previous answer). A worker that hangs or dies fails the item it was
        on; the items queued behind it go to the others."""
        out: List[Optional[float]] = [None] * len(items)
        todo = deque(range(len(items)))
        sent: List[deque] = [deque() for _ in self._procs]
        started: List[float] = [0.0] * len(self._procs)  # when the head item began

        def requeue(w: int) -> None:
            todo.extendleft(reversed(sent[w]))
            sent[w].clear()

        while todo or any(sent):
            for w in range(len(self._procs)):
                while todo and len(sent[w]) < self.PIPELINE:
                    i = todo.popleft()
                    try:
                        self._conns[w].send((i, tuple(items[i])))
                    except (BrokenPipeError, OSError):
                        todo.appendleft(i)
                        requeue(w)
                        self._replace(w)
                        continue
                    if not sent[w]:
                        started[w] = time.monotonic()
                    sent[w].append(i)
            active = [w for w in range(len(self._procs)) if sent[w]]
            left = max(0.0, min(started[w] for w in active) + self._timeout - time.monotonic())
            ready = wait([self._conns[w] for w in active], timeout=left)
            for w in active:
                conn = self._conns[w]
                if conn in ready:
                    try:
                        idx, status, payload = conn.recv()
                    except (EOFError, OSError):
                        i = sent[w].popleft()
                        code = self._procs[w].exitcode if self._procs[w].exitcode is not None else "?"
                        out[i] = self._fail("died", f"item {i}: the worker exited (code {code})")
                        requeue(w)
                        self._replace(w)
                        continue
                    sent[w].popleft()
                    out[idx] = payload if status == "ok" else self._fail("raised", f"item {idx}: {payload.strip()}")
                    started[w] = time.monotonic()
                elif time.monotonic() >= started[w] + self._timeout:
                    i = sent[w].popleft()
                    out[i] = self._fail("timeout", f"item {i}: no reward within {self._timeout:g} s")
                    requeue(w)
                    self._replace(w)
        return [float(v) for v in out]

    def close(self) -> None:
        for w, p in enumerate(self._procs):
            try:
                self._conns[w].send(None)
            except (BrokenPipeError, OSError):
                pass
            p.join(2)
            if p.is_alive():
                p.kill()
                p.join(2)
            self._conns[w].close()

    def __enter__(self) -> "RewardPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
