"""The learner process of ``flywheel run`` (docs/rl.md, "Learner").

Started by the launcher as::

    python3 -m flywheel.rl.learner CONFIG.toml --address HOST:PORT --run-dir DIR [--deterministic]

It samples actor unrolls from the replay table, accounts for policy lag
(staleness), updates an :class:`~flywheel.rl.models.ActorCritic` with PPO or
IMPALA, publishes the policy weights as the next version, logs one JSON line
per update to ``DIR/metrics.jsonl``, checkpoints to ``DIR/checkpoints/``
and, when a checkpoint exists, resumes from the newest one (model,
optimizer, counters, staleness accounting, RNG state).

Exit codes: 0 a stop condition was met (``DIR/result.json`` says which), 2
bad configuration, 3 stopped by SIGTERM/SIGINT (after a checkpoint), 1 any
other error.

Staleness: an item's lag is the learner's latest published version minus
the version the actor acted with. Items with lag > ``max_policy_lag`` are
dropped (``stale = "drop"``) or kept with loss weight ``stale_weight``
(``stale = "downweight"``); every item's lag is counted in a histogram.
These counters are part of the checkpoint, so they survive a restart.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import signal
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from .. import trace as _trace

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11
    tomllib = None  # type: ignore[assignment]

# The [learner] keys this loop reads; the rest go to the algorithm.
LOOP_DEFAULTS: Dict[str, Any] = {
    "algorithm": "ppo",
    "batch_unrolls": None,       # default: the actor count
    "max_policy_lag": None,      # default: 0 for ppo, 4 for impala
    "stale": "drop",             # or "downweight"
    "stale_weight": 0.1,
    "threads": 1,                # torch threads
    "checkpoint_keep": 3,
}
RUN_STOP_KEYS = ("stop_mean_return", "max_env_steps", "max_updates", "max_seconds", "checkpoint_interval")

EXIT_DONE, EXIT_ERROR, EXIT_CONFIG, EXIT_STOPPED = 0, 1, 2, 3


class ConfigError(ValueError):
    pass


def load_config(path: str) -> Dict[str, Any]:
    if tomllib is None:
        raise ConfigError("reading TOML needs Python >= 3.11 (tomllib)")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}") from None


class Staleness:
    """Lag accounting: how many items were seen, used, dropped or
    down-weighted, and a histogram of lags (versions behind)."""

    def __init__(self) -> None:
        self.seen = 0
        self.used = 0
        self.dropped = 0
        self.downweighted = 0
        self.lags: Dict[int, int] = {}

    def count(self, lag: int, outcome: str) -> None:
        self.seen += 1
        self.lags[lag] = self.lags.get(lag, 0) + 1
        if outcome == "dropped":
            self.dropped += 1
        else:
            self.used += 1
            if outcome == "downweighted":
                self.downweighted += 1

    def apply(self, lags: np.ndarray, max_lag: int, mode: str, stale_weight: float) -> Tuple[np.ndarray, np.ndarray]:
        """Counts each item's lag and decides its fate: items more than
        ``max_lag`` versions behind are dropped (``mode="drop"``) or kept
        with loss weight ``stale_weight`` (``"downweight"``). Returns
        (keep mask, per-item weights)."""
        keep = np.ones(len(lags), dtype=bool)
        weight = np.ones(len(lags), dtype=np.float32)
        for i, lag in enumerate(int(x) for x in lags):
            if lag <= max_lag:
                self.count(lag, "used")
            elif mode == "drop":
                keep[i] = False
                self.count(lag, "dropped")
            else:
                weight[i] = stale_weight
                self.count(lag, "downweighted")
        return keep, weight

    def percentile(self, q: float) -> int:
        if not self.seen:
            return 0
        need = q * self.seen
        acc = 0
        for lag in sorted(self.lags):
            acc += self.lags[lag]
            if acc >= need:
                return lag
        return max(self.lags)

    def to_dict(self) -> Dict[str, Any]:
        return {"seen": self.seen, "used": self.used, "dropped": self.dropped, "downweighted": self.downweighted,
                "lags": {str(k): v for k, v in sorted(self.lags.items())}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Staleness":
        s = cls()
        s.seen, s.used, s.dropped, s.downweighted = (int(d[k]) for k in ("seen", "used", "dropped", "downweighted"))
        s.lags = {int(k): int(v) for k, v in d["lags"].items()}
        return s


def to_learner_batch(data: Mapping[str, np.ndarray], weight: np.ndarray) -> Dict[str, np.ndarray]:
    """Actor items (every column T steps, with ``next_obs``; see
    src/flywheel/rl/actor.h) -> the algorithms' batch format (``obs`` with
    T + 1 steps, ``final_obs`` where an episode ended; see flywheel.rl.ppo).
    """
    obs = data["obs"]
    next_obs = data["next_obs"]
    done = np.logical_or(data["terminated"], data["truncated"])
    final_obs = np.where(done[..., None], next_obs, np.float32(0))
    return {
        "obs": np.concatenate([obs, next_obs[:, -1:]], axis=1),
        "action": data["action"],
        "logprob": data["logprob"],
        "reward": data["reward"],
        "terminated": data["terminated"],
        "truncated": data["truncated"],
        "final_obs": final_obs.astype(np.float32, copy=False),
        "version": data["version"],
        "weight": weight.astype(np.float32),
    }


class Learner:
    def __init__(self, config_path: str, address: str, run_dir: str, deterministic: bool = False):
        import torch  # imported here so that `--help` works without torch

        from flywheel import envs
        from flywheel import replay
        from flywheel.rl.models import ActorCritic
        from flywheel.rl.weights import WeightClient

        self.torch = torch
        self.cfg = load_config(config_path)
        self.run_dir = run_dir
        self.address = address
        self.deterministic = deterministic
        run = self.cfg.get("run", {})
        env = self.cfg.get("env", {})
        actor = self.cfg.get("actor", {})
        policy = self.cfg.get("policy", {})
        learner = dict(self.cfg.get("learner", {}))
        self.seed = int(run.get("seed", 0))
        self.stop_mean_return = run.get("stop_mean_return")
        self.max_env_steps = int(run.get("max_env_steps", 0))
        self.max_updates = int(run.get("max_updates", 0))
        self.max_seconds = float(run.get("max_seconds", 0))
        self.checkpoint_interval = int(run.get("checkpoint_interval", 10))
        self.table = self.cfg.get("replay", {}).get("table", "unrolls")
        self.actors = 1 if deterministic else int(actor.get("count", 1))

        loop = {k: learner.pop(k) for k in list(learner) if k in LOOP_DEFAULTS}
        self.algorithm = str(loop.get("algorithm", "ppo"))
        if self.algorithm not in ("ppo", "impala"):
            raise ConfigError(f"[learner] algorithm = {self.algorithm!r}: expected 'ppo' or 'impala'")
        self.batch_unrolls = int(loop.get("batch_unrolls") or self.actors)
        if deterministic:
            self.batch_unrolls = 1
        lag_default = 0 if self.algorithm == "ppo" else 4
        self.max_policy_lag = int(loop["max_policy_lag"]) if loop.get("max_policy_lag") is not None else lag_default
        self.stale = str(loop.get("stale", "drop"))
        if self.stale not in ("drop", "downweight"):
            raise ConfigError(f"[learner] stale = {self.stale!r}: expected 'drop' or 'downweight'")
        self.stale_weight = float(loop.get("stale_weight", 0.1))
        self.checkpoint_keep = int(loop.get("checkpoint_keep", 3))
        threads = 1 if deterministic else int(loop.get("threads", 1))
        torch.set_num_threads(threads)
        torch.manual_seed(self.seed)
        if deterministic:
            torch.use_deterministic_algorithms(True)

        probe = envs.make(str(env["id"]), num_envs=1)
        obs_space, act_space = probe.single_observation_space, probe.single_action_space
        probe.close()
        self.discrete = hasattr(act_space, "n")
        obs_dim = int(np.prod(obs_space.shape))
        act_dim = int(act_space.n) if self.discrete else int(np.prod(act_space.shape))
        self.model = ActorCritic.from_config(obs_dim, act_dim, self.discrete,
                                             {"hidden": policy.get("hidden", [64, 64]),
                                              "activation": policy.get("activation", "tanh")})
        if self.algorithm == "ppo":
            from flywheel.rl.ppo import PPO as Algo
        else:
            from flywheel.rl.impala import Impala as Algo
        try:
            self.algo = Algo(self.model, learner)
        except (KeyError, ValueError) as e:
            raise ConfigError(f"[learner]: {e}") from None

        self.replay = replay.Client(address)
        self.weights = WeightClient(address)
        self.ckpt_dir = os.path.join(run_dir, "checkpoints")
        os.makedirs(self.ckpt_dir, exist_ok=True)

        # Progress (all in the checkpoint).
        self.update = 0
        self.version = 0
        self.env_steps = 0          # env steps in the items the learner trained on
        self.env_steps_seen = 0     # ... and in every item it sampled
        self.items = 0
        self.episodes = 0
        self.returns: collections.deque = collections.deque(maxlen=100)
        self.staleness = Staleness()
        self.elapsed = 0.0          # learner seconds over all restarts
        self.times = {"wait_s": 0.0, "update_s": 0.0, "publish_s": 0.0, "checkpoint_s": 0.0}
        self.resumed_from: Optional[str] = None
        self.starts = 1             # learner processes this run has had (resumes + 1)
        self.stopping = False

    # ------------------------------------------------------------ checkpoints
    def _checkpoints(self) -> List[str]:
        names = sorted(n for n in os.listdir(self.ckpt_dir) if n.startswith("learner-") and n.endswith(".pt"))
        return [os.path.join(self.ckpt_dir, n) for n in names]

    def save(self) -> str:
        t0 = time.monotonic()
        torch = self.torch
        state = {
            "model": self.model.state_dict(), "algo": self.algo.state_dict(),
            "update": self.update, "version": self.version, "env_steps": self.env_steps,
            "env_steps_seen": self.env_steps_seen, "items": self.items, "episodes": self.episodes,
            "returns": list(self.returns), "staleness": self.staleness.to_dict(),
            "elapsed": self.elapsed + (time.monotonic() - self._t0), "times": dict(self.times),
            "torch_rng": torch.get_rng_state(), "algorithm": self.algorithm, "starts": self.starts,
        }
        path = os.path.join(self.ckpt_dir, f"learner-{self.update:08d}.pt")
        tmp = path + ".tmp"
        torch.save(state, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        for old in self._checkpoints()[:-self.checkpoint_keep]:
            os.remove(old)
        self.times["checkpoint_s"] += time.monotonic() - t0
        return path

    def restore(self) -> bool:
        ckpts = self._checkpoints()
        if not ckpts:
            return False
        path = ckpts[-1]
        state = self.torch.load(path, weights_only=False)
        if state.get("algorithm") != self.algorithm:
            raise ConfigError(f"{path}: checkpoint is for {state.get('algorithm')!r}, config says {self.algorithm!r}")
        self.model.load_state_dict(state["model"])
        self.algo.load_state_dict(state["algo"])
        self.update, self.version = int(state["update"]), int(state["version"])
        self.env_steps, self.env_steps_seen = int(state["env_steps"]), int(state["env_steps_seen"])
        self.items, self.episodes = int(state["items"]), int(state["episodes"])
        self.returns.extend(state["returns"])
        self.staleness = Staleness.from_dict(state["staleness"])
        self.elapsed = float(state["elapsed"])
        self.times.update(state["times"])
        self.torch.set_rng_state(state["torch_rng"])
        self.starts = int(state.get("starts", 1)) + 1
        self.resumed_from = path
        return True

    # ------------------------------------------------------------------ loop
    def publish(self) -> None:
        t0 = time.monotonic()
        self.version = self.weights.publish("policy", self.model.policy_tensors())
        self.times["publish_s"] += time.monotonic() - t0

    def mean_return(self) -> Optional[float]:
        return float(np.mean(self.returns)) if self.returns else None

    def done_reason(self) -> Optional[str]:
        m = self.mean_return()
        if self.stop_mean_return is not None and len(self.returns) >= 100 and m >= float(self.stop_mean_return):
            return f"solved: mean return {m:.1f} over the last 100 episodes >= {float(self.stop_mean_return):g}"
        if self.max_env_steps and self.env_steps >= self.max_env_steps:
            return f"max_env_steps {self.max_env_steps} reached"
        if self.max_updates and self.update >= self.max_updates:
            return f"max_updates {self.max_updates} reached"
        if self.max_seconds and self.elapsed + (time.monotonic() - self._t0) >= self.max_seconds:
            return f"max_seconds {self.max_seconds:g} reached"
        return None

    def sample(self) -> Optional[Any]:
        """A batch of items, or None when stopping."""
        from flywheel import replay
        t0 = time.monotonic()
        try:
            while not self.stopping:
                try:
                    return self.replay.sample(self.table, self.batch_unrolls, timeout=1.0)
                except TimeoutError:
                    if self.max_seconds and self.done_reason():
                        return None
        except replay.Cancelled:
            return None
        finally:
            self.times["wait_s"] += time.monotonic() - t0
        return None

    def step(self, s: Any) -> Optional[Dict[str, Any]]:
        data = s.data
        versions = data["version"][:, 0]
        b, t, e = data["reward"].shape
        lags = self.version - versions
        keep, weight = self.staleness.apply(lags, self.max_policy_lag, self.stale, self.stale_weight)
        self.items += b
        self.env_steps_seen += b * t * e
        finished = data["episode_return"].reshape(-1)  # item, time, env order
        for r in finished[~np.isnan(finished)]:
            self.returns.append(float(r))
            self.episodes += 1
        if not keep.any():
            return None
        kept = {k: v[keep] for k, v in data.items()}
        batch = to_learner_batch(kept, weight[keep])
        progress = 0.0
        if self.max_env_steps:
            progress = min(1.0, self.env_steps / self.max_env_steps)
        t0 = time.monotonic()
        with _trace.span("learner", "update", update=self.update):
            stats = self.algo.update(batch, progress=progress)
        self.times["update_s"] += time.monotonic() - t0
        self.env_steps += int(keep.sum()) * t * e
        self.update += 1
        return {"lag_min": int(lags.min()), "lag_max": int(lags.max()), **stats}

    def log(self, stats: Mapping[str, Any], wall: float) -> None:
        m = self.mean_return()
        line = {
            "time": round(time.time(), 3), "elapsed_s": round(wall, 3), "starts": self.starts, "update": self.update,
            "version": self.version, "env_steps": self.env_steps, "env_steps_seen": self.env_steps_seen,
            "items": self.items, "episodes": self.episodes,
            "mean_return_100": None if m is None else round(m, 3),
            "staleness": self.staleness.to_dict(),
            "times": {k: round(v, 3) for k, v in self.times.items()},
            **{k: (round(v, 6) if isinstance(v, float) else v) for k, v in stats.items()},
        }
        with open(os.path.join(self.run_dir, "metrics.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")

    def run(self) -> int:
        self._t0 = time.monotonic()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        if self.restore():
            print(f"learner: resumed from {self.resumed_from} (update {self.update}, {self.env_steps} env steps, "
                  f"staleness {json.dumps(self.staleness.to_dict())})", flush=True)
        self.publish()
        print(f"learner: {self.algorithm} on {self.address}, table '{self.table}', batches of "
              f"{self.batch_unrolls} unrolls, published policy version {self.version}", flush=True)
        reason = self.done_reason()
        while reason is None and not self.stopping:
            s = self.sample()
            if s is None:
                break
            stats = self.step(s)
            if stats is None:
                continue
            self.publish()
            wall = self.elapsed + (time.monotonic() - self._t0)
            self.log(stats, wall)
            if self.update % self.checkpoint_interval == 0:
                self.save()
            reason = self.done_reason()
        path = self.save()
        wall = self.elapsed + (time.monotonic() - self._t0)
        if reason is None:
            print(f"learner: stopped at update {self.update}; checkpoint {path}", flush=True)
            return EXIT_STOPPED
        result = {"reason": reason, "solved": reason.startswith("solved"), "updates": self.update,
                  "env_steps": self.env_steps, "episodes": self.episodes, "mean_return_100": self.mean_return(),
                  "learner_seconds": round(wall, 3), "staleness": self.staleness.to_dict(), "checkpoint": path}
        tmp = os.path.join(self.run_dir, "result.json.tmp")
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2)
        os.replace(tmp, os.path.join(self.run_dir, "result.json"))
        print(f"learner: {reason}", flush=True)
        try:
            # Actors see the table close when they next send; a last version
            # wakes the on-policy ones waiting for weights.
            self.replay.close(self.table)
            self.publish()
        except Exception as e:  # the run is over either way
            print(f"learner: closing table '{self.table}': {e}", file=sys.stderr, flush=True)
        return EXIT_DONE

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stopping = True


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m flywheel.rl.learner",
                                description="The learner of `flywheel run` (normally started by it).")
    p.add_argument("config", help="the run's TOML config")
    p.add_argument("--address", required=True, help="replay + weight server, host:port")
    p.add_argument("--run-dir", required=True, help="run directory (metrics, checkpoints)")
    p.add_argument("--deterministic", action="store_true", help="one thread, deterministic torch kernels")
    a = p.parse_args(argv)
    try:
        learner = Learner(a.config, a.address, a.run_dir, a.deterministic)
    except ConfigError as e:
        print(f"learner: error: {e}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    return learner.run()


if __name__ == "__main__":
    sys.exit(main())
