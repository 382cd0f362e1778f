"""The job's side of its rollout worker processes (``[rollout] workers =
N``; docs/rl.md, "Rollout workers"): a replay table ``rollouts`` and the
weight service on one loopback server, N :mod:`.rollout_worker` processes
fed prompts on their standard input, and a reader thread that gathers each
group's answers from the table.

A worker that dies (kill -9, out of memory) is restarted; the groups it had
not finished are lost (counted) and given to the workers again, so no
prompt is skipped; answers of a lost group that reach the table are
discarded (counted), so none is trained twice.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .rollout import FINISH_NAMES
from .rollout_worker import COLUMNS, META, TABLE

_M = {name: i for i, name in enumerate(META)}


class WorkerDied(RuntimeError):
    pass


class RolloutWorkers:
    def __init__(self, config_path: str, run_dir: str, n: int, engine_init: str, version: int,
                 group_size: int, max_restarts: int = 20):
        from ... import replay
        from ..weights import WeightClient
        self.config_path, self.run_dir, self.engine_init = config_path, run_dir, engine_init
        self.version, self.g, self.max_restarts = version, group_size, max_restarts
        self.table = replay.Table.queue(TABLE, max_size=1 << 22, signature=COLUMNS)
        self.server = replay.Server([self.table], port=0, weights=True)
        self.weights = WeightClient(self.server.address)
        self.sampler = replay.Sampler(self.table)
        self.counters: Counter = Counter()
        self.lock = threading.Lock()
        self.procs: List[Optional[subprocess.Popen]] = [None] * n
        self.owned: List[Dict[int, tuple]] = [dict() for _ in range(n)]   # per worker: gid -> request
        self.answers: Dict[int, List[Dict[str, Any]]] = {}
        self.owner: Dict[int, int] = {}
        self.ready: "queue.Queue" = queue.Queue()
        self.next_gid = 0
        self._closing = threading.Event()
        self._busy = threading.Lock()    # held while the reader handles an item
        for w in range(n):
            self._start(w)
        self.reader = threading.Thread(target=self._read, name="flywheel-rollout-reader", daemon=True)
        self.reader.start()

    # ------------------------------------------------------------ processes
    def _start(self, w: int) -> None:
        self.procs[w] = subprocess.Popen(
            [sys.executable, "-m", "flywheel.rl.lm.rollout_worker", self.config_path, "--address",
             self.server.address, "--engine-init", self.engine_init, "--version", str(self.version)],
            stdin=subprocess.PIPE, text=True)
        with open(os.path.join(self.run_dir, "workers.json"), "w") as f:
            json.dump({"rollout_workers": [p.pid for p in self.procs if p is not None]}, f)

    def pids(self) -> List[int]:
        return [p.pid for p in self.procs if p is not None]

    def _send(self, w: int, gid: int, req: tuple) -> None:
        _, ids, answer, seed, min_version = req
        line = json.dumps({"gid": gid, "ids": ids, "answer": answer, "n": self.g, "seed": seed,
                           "min_version": min_version})
        try:
            self.procs[w].stdin.write(line + "\n")
            self.procs[w].stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died; check() gives its groups to the others

    def submit(self, item: Any, ids: List[int], answer: Any, seed: int, min_version: int) -> int:
        """Gives a prompt to the worker with the fewest unfinished groups."""
        with self.lock:
            gid = self.next_gid
            self.next_gid += 1
            w = min(range(len(self.procs)), key=lambda k: len(self.owned[k]))
            req = (item, list(ids), answer, int(seed), int(min_version))
            self.owned[w][gid] = req
            self.owner[gid] = w
        self._send(w, gid, req)
        return gid

    def in_flight(self) -> int:
        """Groups given out and not yet taken by :meth:`take`."""
        with self.lock:
            return sum(len(o) for o in self.owned) + self.ready.qsize()

    def check(self) -> None:
        """Restarts dead workers; their unfinished groups go out again."""
        for w, p in enumerate(self.procs):
            if p is None or p.poll() is None or self._closing.is_set():
                continue
            rc = p.returncode
            try:
                p.stdin.close()
            except OSError:
                pass
            # Whatever it wrote is in the table (items are whole or absent):
            # read it all before deciding what was lost.
            deadline = time.monotonic() + 30
            while len(self.table) and time.monotonic() < deadline:
                time.sleep(0.005)
            with self._busy, self.lock:
                lost = self.owned[w]
                self.owned[w] = {}
                for gid in lost:
                    self.counters["answers_lost_worker"] += len(self.answers.pop(gid, []))
                    self.owner.pop(gid, None)
            if rc > 0:
                # An error of its own (its traceback is in the job's log):
                # restarting would only repeat it.
                raise WorkerDied(f"rollout worker {p.pid} exited with status {rc} (its error is in the log above)")
            self.counters["rollout_worker_restarts"] += 1
            self.counters["groups_lost_worker"] += len(lost)
            if self.counters["rollout_worker_restarts"] > self.max_restarts:
                raise WorkerDied(f"rollout workers died {self.counters['rollout_worker_restarts']} times "
                                 f"(the last with status {rc}); giving up")
            print(f"flywheel run: rollout worker {p.pid} died ({'signal ' + str(-rc) if rc < 0 else 'status ' + str(rc)}"
                  f"); {len(lost)} groups lost and given out again; restarting it", flush=True)
            self._start(w)
            for req in sorted(lost.values(), key=lambda r: r[3]):
                self.submit(*req)

    # --------------------------------------------------------------- answers
    def _read(self) -> None:
        from ... import replay
        while not self._closing.is_set():
            try:
                s = self.sampler.sample(1, timeout=0.1)
            except TimeoutError:
                continue
            except replay.Cancelled:
                return
            with self._busy:
                d = {k: v[0] for k, v in s.data.items()}
                meta = d["meta"][-1]
                gid, P = int(meta[_M["gid"]]), int(meta[_M["prompt_len"]])
                o = {"prompt_ids": d["token"][:P].tolist(), "tokens": d["token"][P:].tolist(),
                     "logprobs": d["logprob"].tolist(), "versions": d["version"].tolist(),
                     "loss_mask": d["loss_mask"].astype(bool).tolist(), "sample": int(meta[_M["sample"]]),
                     "reward": float(meta[_M["reward"]]),
                     "finish_reason": FINISH_NAMES.get(int(meta[_M["finish"]]), "error"),
                     "failures": {k: int(meta[_M[k]]) for k in ("raised", "timeout", "died")},
                     "tool_calls": int(meta[_M["tool_calls"]])}
                with self.lock:
                    w = self.owner.get(gid)
                    if w is None:
                        self.counters["answers_discarded"] += 1  # of a group already given out again
                        continue
                    outs = self.answers.setdefault(gid, [])
                    outs.append(o)
                    if len(outs) == self.g:
                        del self.answers[gid], self.owner[gid]
                        req = self.owned[w].pop(gid)
                        outs.sort(key=lambda x: x["sample"])
                        self.ready.put((gid, req, outs))

    def take(self, n: int, stop: threading.Event) -> List[Tuple[int, tuple, List[Dict[str, Any]]]]:
        """``n`` finished groups (fewer when ``stop`` is set), restarting dead workers while waiting."""
        out = []
        while len(out) < n and not stop.is_set():
            try:
                out.append(self.ready.get(timeout=0.1))
            except queue.Empty:
                self.check()
        return out

    def take_counters(self) -> Counter:
        """The counts since the last call (restarts, groups and answers lost or discarded)."""
        with self.lock:
            out, self.counters = self.counters, Counter()
        return out

    def publish(self, arrays: Dict[str, np.ndarray], version: int) -> None:
        self.weights.publish("policy", arrays, version=version)

    def close(self) -> None:
        self._closing.set()
        for p in self.procs:
            if p is not None and p.poll() is None:
                try:
                    p.stdin.close()
                except OSError:
                    pass
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.table.close()
        self.reader.join(timeout=5)
        self.server.stop()
