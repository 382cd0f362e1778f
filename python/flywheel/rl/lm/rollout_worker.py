"""A rollout worker of the language-model job (``[rollout] workers = N``;
docs/rl.md, "Rollout workers"): a process that runs the C++ engine,
generates ``n`` answers per prompt it is given, scores them in its own
reward worker processes and writes every answer as a replay item.

    python -m flywheel.rl.lm.rollout_worker CONFIG --address HOST:PORT --engine-init DIR --version V

The job starts it (:class:`.workers.RolloutWorkers`) and gives it prompts
as JSON lines on its standard input::

    {"gid": 17, "ids": [1, 5, 9], "answer": "42", "n": 8, "seed": 123, "min_version": 3}

``min_version``: the answers are generated with weights of at least that
version (the worker waits for them on the weight service). New weights are
fetched from the weight service between engine steps: with ``[run]
partial_rollouts`` they land mid-answer, otherwise once the engine has
drained. The end of standard input ends the worker.

Each answer is one item of the replay table ``rollouts`` (:data:`COLUMNS`):
``token`` holds the prompt then the response (P + L steps); ``logprob``,
``version`` and ``loss_mask`` the L response tokens; ``meta`` one step of
:data:`META` (group id, sample index, reward, finish reason, prompt length,
reward failures by kind, tool calls). A group's answers are flushed
together; a worker killed mid-group leaves whole items or none.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from collections import deque
from typing import Any, Dict, List, Optional

import numpy as np

from . import config as lmconfig
from . import rollout

TABLE = "rollouts"
COLUMNS = {"token": "int32", "logprob": "float32", "version": "int32", "loss_mask": "uint8", "meta": "float64[9]"}
META = ("gid", "sample", "reward", "finish", "prompt_len", "raised", "timeout", "died", "tool_calls")


def _tokenizer(directory: str):
    from ... import llm
    from .chars import CharTokenizer
    if os.path.exists(os.path.join(directory, "flywheel_chars.json")):
        return CharTokenizer.load(directory)
    return llm.Tokenizer.from_pretrained(directory)


def _read_requests(out: "queue.Queue") -> None:
    for line in sys.stdin:
        line = line.strip()
        if line:
            out.put(json.loads(line))
    out.put(None)


class Worker:
    def __init__(self, cfg: Dict[str, Dict[str, Any]], address: str, engine_init: str, version: int):
        from ... import llm, replay
        from ..weights import WeightClient
        from .job import _make_verifier
        from .reward_pool import RewardPool
        self.cfg, r, rc = cfg, cfg["rollout"], cfg["reward"]
        self.tok = _tokenizer(engine_init)
        self.eos = self.tok.eos_token_id
        self.engine = llm.Engine(engine_init, dtype=cfg["model"]["engine_dtype"], threads=r["worker_threads"],
                                 max_running=1024, max_step_tokens=2048, kv_cache_bytes=256 << 20, version=version)
        self.pool = RewardPool(_make_verifier(rc), workers=rc["workers"], timeout=rc["timeout_s"],
                               memory_mb=rc["memory_mb"] or None, failure_value=rc["failure_value"])
        self.client = replay.Client(address)
        self.weights = WeightClient(address)
        self.writer = self.client.writer(chunk_length=256, signature=COLUMNS)
        self.partial = cfg["run"]["partial_rollouts"]
        self.held: Optional[tuple] = None   # fetched weights waiting for the engine to drain
        self.times = {"generate": 0.0, "reward": 0.0, "write": 0.0, "weights": 0.0}

    def _poll_weights(self, wait: float = 0.0) -> None:
        t0 = time.monotonic()
        self._fetch(wait)
        self.times["weights"] += time.monotonic() - t0

    def _fetch(self, wait: float) -> None:
        if self.held is None:
            got = self.weights.fetch("policy", newer_than=self.engine.weight_version, wait=wait)
            if got is not None:
                self.held = (got[1], got[0])
        if self.held is not None and (self.partial or self.engine.idle()):
            self.engine.update_weights_from_arrays(*self.held)
            self.held = None

    def emit(self, groups: List[tuple]) -> None:
        """Scores finished groups ``[(request, answers)]`` (one call to the
        reward pool) and writes their answers as items."""
        t0 = time.monotonic()
        texts = [[rollout.decode(self.tok, self.eos, o["tokens"]) for o in outs] for _, outs in groups]
        before = dict(self.pool.failures)
        flat = self.pool.score([(t, req["answer"]) for (req, _), ts in zip(groups, texts) for t in ts])
        failed = [self.pool.failures[k] - before.get(k, 0) for k in ("raised", "timeout", "died")]
        t1 = time.monotonic()
        self.times["reward"] += t1 - t0
        k = 0
        for gi, (req, outs) in enumerate(groups):
            self._write(req, outs, flat[k:k + len(outs)], failed if gi == 0 else (0, 0, 0))
            k += len(outs)
        self.times["write"] += time.monotonic() - t1

    def _write(self, req: Dict[str, Any], outs: List[Dict[str, Any]], rewards: List[float], failed) -> None:
        ids = req["ids"]
        P = len(ids)
        for j, (o, reward) in enumerate(zip(outs, rewards)):
            L = len(o["tokens"])
            mask = o.get("loss_mask") or [True] * L
            meta = np.array([req["gid"], j, reward, rollout.FINISH_CODES.get(o["finish_reason"], 3), P,
                             *(failed if j == 0 else (0, 0, 0)), o.get("tool_calls", 0)], np.float64)
            n = P + L
            steps_meta = np.zeros((n, len(META)), np.float64)
            steps_meta[-1] = meta
            self.writer.extend({
                "token": np.asarray(list(ids) + list(o["tokens"]), np.int32),
                "logprob": np.concatenate([np.zeros(P, np.float32), np.asarray(o["logprobs"], np.float32)]),
                "version": np.concatenate([np.full(P, -1, np.int32), np.asarray(o["versions"], np.int32)]),
                "loss_mask": np.concatenate([np.zeros(P, np.uint8), np.asarray(mask, np.uint8)]),
                "meta": steps_meta})
            self.writer.create_item(TABLE, 1.0, {"token": P + L, "logprob": L, "version": L, "loss_mask": L,
                                                 "meta": 1})
            self.writer.end_episode()

    def flush(self) -> None:
        t0 = time.monotonic()
        self.writer.flush(timeout=60)
        self.times["write"] += time.monotonic() - t0

    def run(self) -> int:
        r = self.cfg["rollout"]
        requests: "queue.Queue" = queue.Queue()
        threading.Thread(target=_read_requests, args=(requests,), daemon=True).start()
        pending: deque = deque()
        running: Dict[int, tuple] = {}
        eof = False
        emitted, last_flush = False, time.monotonic()
        last_poll = 0.0
        params = rollout.sample_params(r, self.eos)
        while not (eof and not pending and not running):
            try:
                block = not pending and not running and not eof
                while True:
                    req = requests.get(timeout=0.05) if block else requests.get_nowait()
                    block = False
                    if req is None:
                        eof = True
                        break
                    pending.append(req)
            except queue.Empty:
                pass
            now = time.monotonic()
            if not running or now - last_poll > 0.02:
                self._poll_weights()
                last_poll = now
            if pending and pending[0]["min_version"] > self.engine.weight_version and not running:
                self._poll_weights(wait=0.1)  # the newer weights this prompt needs
                continue
            if r["tool"]:
                # Multi-turn episodes run a prompt's group at a time.
                while pending and pending[0]["min_version"] <= self.engine.weight_version:
                    req = pending.popleft()
                    outs = rollout.turns(self.engine, self.tok, r, self.eos, [req["ids"]], [""], [req["answer"]],
                                         req["n"], req["seed"], r["temperature"])
                    self.emit([(req, outs)])
                    self.flush()
                continue
            while pending and self.held is None and pending[0]["min_version"] <= self.engine.weight_version:
                req = pending.popleft()
                rid = self.engine.submit(req["ids"], n=req["n"], seed=req["seed"], **params)
                running[rid] = (req, [])
            if not running:
                continue
            t0 = time.monotonic()
            self.engine.step()
            self.times["generate"] += time.monotonic() - t0
            finished = []
            for o in self.engine.take_finished():
                req, outs = running[o["request_id"]]
                outs.append(o)
                if len(outs) == req["n"]:
                    del running[o["request_id"]]
                    outs.sort(key=lambda x: x["sample"])
                    finished.append((req, outs))
            if finished:
                self.emit(finished)
                emitted = True
            if emitted and (not running or time.monotonic() - last_flush > 0.05):
                self.flush()   # a group's items leave together
                emitted, last_flush = False, time.monotonic()
        self.writer.close()
        self.pool.close()
        print(f"flywheel run: rollout worker {os.getpid()} stops: " +
              ", ".join(f"{k} {v:.1f} s" for k, v in self.times.items()), flush=True)
        return 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flywheel.rl.lm.rollout_worker",
                                 description="a rollout worker of the language-model job (docs/rl.md)")
    ap.add_argument("config")
    ap.add_argument("--address", required=True, help="the job's replay and weight service, host:port")
    ap.add_argument("--engine-init", required=True, help="the checkpoint the engine starts from")
    ap.add_argument("--version", type=int, default=0, help="the weight version of that checkpoint")
    ap.add_argument("--threads", type=int, default=-1, help="engine threads (default: [rollout] worker_threads)")
    args = ap.parse_args(argv)
    from .reward_pool import _die_with_parent
    _die_with_parent(os.getppid())
    cfg = lmconfig.load(args.config)
    if args.threads >= 0:
        cfg["rollout"]["worker_threads"] = args.threads
    t0 = time.monotonic()
    w = Worker(cfg, args.address, args.engine_init, args.version)
    print(f"flywheel run: rollout worker {os.getpid()} ready in {time.monotonic() - t0:.1f} s "
          f"(weights v{w.engine.weight_version})", flush=True)
    return w.run()


if __name__ == "__main__":
    sys.exit(main())
