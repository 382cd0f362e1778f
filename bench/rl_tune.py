"""In-process RL training loop for tuning flywheel's learners on the built-in envs.

Runs the actor side in this process the way flywheel's C++ actors do it:
actions are sampled in numpy from ``ActorCritic.policy_tensors()`` (softmax
over logits, or mean + exp(log_std) * N(0, 1)), E envs step in one
``flywheel.envs`` pool with same-step autoreset, and every T steps the
unroll goes to the learner as a batch of B = 1 item in the learner batch
format (flywheel/rl/models.py). ``--lag 1`` acts with the weights from
before the latest update (what asynchronous actors see), for IMPALA.

The run stops when the mean return of the last 100 finished training
episodes (stochastic policy) reaches ``--target``, or at the step/time
budget. It prints one JSON line per run: env steps and wall time to the
target, and the share of wall time spent in learner updates.

Workloads (one per preset, ``--preset``):
  cartpole_ppo     CartPole-v1, PPO (the tuned configuration)
  cartpole_impala  CartPole-v1, IMPALA/V-trace, actors 1 version stale
  pendulum_ppo     Pendulum-v1, PPO (continuous actions)

  PYTHONPATH=build/python python3 bench/rl_tune.py --preset cartpole_ppo --seeds 0 1 2
  ... --set learner.lr=3e-3 --set model.hidden=[64,64]     # try a variant

Measured on a 2-core x86 VM, torch 1.13 (Debian, reference BLAS),
torch.set_num_threads(1); to the target, per seed 0 / 1 / 2:

  cartpole_ppo     71-79k env steps, 1.0-1.1 s wall (0.8-0.9 s in updates);
                   10 seeds of 10 solved in 1.0-1.2 s
  cartpole_impala  116-132k env steps, 1.2-1.3 s wall (0.8-0.9 s in updates);
                   10 of 10 in 0.9-1.3 s; lag 0: 1.0-1.2 s, lag 2: 1.1-4.2 s
  pendulum_ppo     mean100 >= -200 after 64-74k env steps, 3.2-3.7 s;
                   -144 after 2M steps (104 s)

What mattered: one hidden layer of 64 (a second 64x64 layer triples the
update cost with reference BLAS and learned no faster), a high learning
rate annealed to 0 over 500k steps, 2 epochs of 4 minibatches, no value
clipping (PPO); RMSprop with eps 0.01 (IMPALA; Adam collapsed the policy at
learning rates where RMSprop was fine).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np
import torch

import flywheel
from flywheel import envs

# The build tree's package (PYTHONPATH=build/python) may predate flywheel.rl;
# then take flywheel.rl from the source tree.
_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python", "flywheel")
if not os.path.isdir(os.path.join(flywheel.__path__[0], "rl")) and _SRC not in flywheel.__path__:
    flywheel.__path__.append(_SRC)

from flywheel.rl.impala import Impala  # noqa: E402
from flywheel.rl.models import ActorCritic  # noqa: E402
from flywheel.rl.ppo import PPO  # noqa: E402

PRESETS: Dict[str, Dict[str, Any]] = {
    "cartpole_ppo": {
        "env": "CartPole-v1", "algo": "ppo", "num_envs": 8, "unroll": 128, "lag": 0,
        "model": {"hidden": [64], "activation": "tanh"},
        "learner": {"lr": 1e-2, "anneal_lr": True, "epochs": 2, "minibatches": 4, "clip_value": False},
        "total_steps": 500_000, "target": 475.0,
    },
    "cartpole_impala": {
        "env": "CartPole-v1", "algo": "impala", "num_envs": 8, "unroll": 64, "lag": 1,
        "model": {"hidden": [64], "activation": "tanh"},
        "learner": {"lr": 5e-3, "optimizer": "rmsprop", "minibatches": 2, "entropy_coef": 0.01},
        "total_steps": 1_000_000, "target": 475.0,
    },
    "pendulum_ppo": {
        "env": "Pendulum-v1", "algo": "ppo", "num_envs": 8, "unroll": 256, "lag": 0,
        "model": {"hidden": [64], "activation": "tanh"},
        "learner": {"lr": 3e-3, "anneal_lr": True, "epochs": 10, "minibatches": 8, "gamma": 0.95,
                    "lam": 0.95, "reward_scale": 0.1, "clip_value": False},
        "total_steps": 1_000_000, "target": -200.0,
    },
}


class NumpyActor:
    """Samples actions from exported policy tensors, as the C++ MlpPolicy does."""

    def __init__(self, tensors: Dict[str, np.ndarray], activation: str, rng: np.random.Generator):
        n = sum(1 for k in tensors if k.endswith(".weight"))
        self.layers = [(tensors[f"layers.{i}.weight"].T.copy(), tensors[f"layers.{i}.bias"]) for i in range(n)]
        self.log_std = tensors.get("log_std")
        self.act = np.tanh if activation == "tanh" else (lambda x: np.maximum(x, 0.0))
        self.rng = rng

    def __call__(self, obs: np.ndarray):
        x = obs
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if i < len(self.layers) - 1:
                x = self.act(x)
        if self.log_std is None:
            z = x - x.max(axis=1, keepdims=True)
            logp_all = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            g = self.rng.gumbel(size=logp_all.shape)
            a = np.argmax(logp_all + g, axis=1)
            return a.astype(np.int64), logp_all[np.arange(len(a)), a].astype(np.float32)
        std = np.exp(self.log_std)
        noise = self.rng.standard_normal(x.shape).astype(np.float32)
        a = (x + std * noise).astype(np.float32)
        logp = (-0.5 * noise ** 2 - self.log_std - 0.5 * math.log(2 * math.pi)).sum(axis=1)
        return a, logp.astype(np.float32)


def train(preset: Dict[str, Any], seed: int, max_seconds: float, log_every: float = 0.0) -> Dict[str, Any]:
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    env_id, e, t_len = preset["env"], int(preset["num_envs"]), int(preset["unroll"])
    pool = envs.make(env_id, num_envs=e, num_threads=1, seed=seed * 1000, autoreset_mode="same_step")
    discrete = isinstance(pool.single_action_space, envs.Discrete)
    obs_dim = pool.single_observation_space.shape[0]
    act_dim = pool.single_action_space.n if discrete else pool.single_action_space.shape[0]
    low = None if discrete else pool.single_action_space.low
    high = None if discrete else pool.single_action_space.high
    model = ActorCritic.from_config(obs_dim, act_dim, discrete, preset["model"])
    learner = (PPO if preset["algo"] == "ppo" else Impala)(model, preset["learner"])
    activation = preset["model"].get("activation", "tanh")
    versions = collections.deque([model.policy_tensors()], maxlen=int(preset["lag"]) + 1)

    obs, _ = pool.reset(seed=seed * 1000)
    obs = obs.astype(np.float32)
    ep_ret = np.zeros(e)
    returns: collections.deque = collections.deque(maxlen=100)
    episodes = 0
    steps = 0
    total = int(preset["total_steps"])
    target = float(preset["target"])
    learn_s = 0.0
    start = time.perf_counter()
    last_log = start
    solved_at: Optional[Dict[str, Any]] = None
    version = 0
    while steps < total and time.perf_counter() - start < max_seconds:
        actor = NumpyActor(versions[0], activation, rng)
        b_obs = np.zeros((1, t_len + 1, e, obs_dim), np.float32)
        b_act = np.zeros((1, t_len, e) if discrete else (1, t_len, e, act_dim), np.int64 if discrete else np.float32)
        b_logp = np.zeros((1, t_len, e), np.float32)
        b_rew = np.zeros((1, t_len, e), np.float32)
        b_term = np.zeros((1, t_len, e), bool)
        b_trunc = np.zeros((1, t_len, e), bool)
        b_final = np.zeros((1, t_len, e, obs_dim), np.float32)
        for t in range(t_len):
            b_obs[0, t] = obs
            a, logp = actor(obs)
            b_act[0, t] = a
            b_logp[0, t] = logp
            nobs, rew, term, trunc, info = pool.step(a if discrete else np.clip(a, low, high))
            b_rew[0, t] = rew
            b_term[0, t] = term
            b_trunc[0, t] = trunc
            done = term | trunc
            if done.any():
                b_final[0, t] = info["final_obs"]
                for i in np.flatnonzero(done):
                    returns.append(ep_ret[i] + rew[i])
                    episodes += 1
                ep_ret[done] = 0.0
            ep_ret[~done] += rew[~done]
            obs = nobs.astype(np.float32)
        b_obs[0, t_len] = obs
        steps += t_len * e
        batch = {"obs": b_obs, "action": b_act, "logprob": b_logp, "reward": b_rew, "terminated": b_term,
                 "truncated": b_trunc, "final_obs": b_final, "version": np.full((1, t_len), version, np.int64),
                 "weight": np.ones(1, np.float32)}
        t0 = time.perf_counter()
        stats = learner.update(batch, progress=min(1.0, steps / total))
        learn_s += time.perf_counter() - t0
        version += 1
        versions.append(model.policy_tensors())
        mean100 = float(np.mean(returns)) if returns else float("nan")
        now = time.perf_counter()
        if log_every and now - last_log > log_every:
            last_log = now
            print(f"  steps {steps} t {now - start:.1f}s mean100 {mean100:.1f} eps {episodes} "
                  + " ".join(f"{k} {v:.3g}" for k, v in stats.items()), file=sys.stderr)
        if len(returns) >= 100 and mean100 >= target:
            solved_at = {"steps": steps, "wall_s": round(now - start, 2), "learner_s": round(learn_s, 2),
                         "episodes": episodes}
            break
    pool.close()
    return {"seed": seed, "solved": solved_at is not None, **(solved_at or {}),
            "final_mean100": round(float(np.mean(returns)) if returns else float("nan"), 1),
            "total_steps": steps, "total_wall_s": round(time.perf_counter() - start, 2),
            "total_learner_s": round(learn_s, 2)}


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="cartpole_ppo")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                   help="override: num_envs=16, learner.lr=1e-3, model.hidden=[32,32]")
    p.add_argument("--log-every", type=float, default=0.0)
    args = p.parse_args(argv)
    preset = json.loads(json.dumps(PRESETS[args.preset]))
    for item in args.set:
        key, value = item.split("=", 1)
        node = preset
        *path, last = key.split(".")
        for k in path:
            node = node[k]
        node[last] = json.loads(value)
    print(json.dumps({"preset": args.preset, "config": preset}))
    for seed in args.seeds:
        print(json.dumps(train(preset, seed, args.max_seconds, args.log_every)), flush=True)


if __name__ == "__main__":
    main()
