#!/usr/bin/env python3
"""End-to-end RL benchmark: `flywheel run` on CartPole-v1 with PPO and IMPALA,
and, in the same run, a baseline: the same PPO code in one synchronous
Python process (the envs stepped through flywheel.envs, the policy acting in
PyTorch, no replay, no separate processes) — what a user would write first.

Reports per run: wall time to solve (mean return >= 475 over the last 100
episodes), env steps trained on per second, env steps produced by the
actors per second, the policy lag distribution, and where each component's
time goes (learner: waiting for data / updating / publishing; actors:
stepping envs / inference / writing to replay / waiting for weights).
Writes bench/results/rl.json.

    PYTHONPATH=build/python $(make -s python-path) bench/rl_bench.py --bin build/src/flywheel/cli/flywheel
"""

import argparse
import collections
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lag_stats(hist):
    lags = sorted((int(k), v) for k, v in hist.items())
    total = sum(v for _, v in lags)

    def pct(q):
        acc = 0
        for k, v in lags:
            acc += v
            if acc >= q * total:
                return k
        return lags[-1][0] if lags else 0
    return {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99), "max": lags[-1][0] if lags else 0,
            "histogram": {str(k): v for k, v in lags}}


def run_flywheel(binary, config, budget_s, run_dir, seed):
    with open(config) as f:
        text = f.read()
    text = re.sub(r"(?m)^max_seconds\s*=.*$", f"max_seconds = {budget_s}", text)
    text = re.sub(r"(?m)^seed\s*=.*$", f"seed = {seed}", text)
    cfg = os.path.join(run_dir, "bench.toml")
    os.makedirs(run_dir, exist_ok=True)
    with open(cfg, "w") as f:
        f.write(text)
    t0 = time.monotonic()
    p = subprocess.run([binary, "run", cfg, "--run-dir", os.path.join(run_dir, "run"), "--fresh"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=budget_s + 120)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"flywheel run {config} failed ({p.returncode}):\n{p.stdout[-3000:]}")
    with open(os.path.join(run_dir, "run", "summary.json")) as f:
        s = json.load(f)
    lr, act = s["learner"], s["actor_totals"]
    lw = max(1e-9, lr["elapsed_s"])
    aw = max(1e-9, act["elapsed_s"])
    return {
        "seed": seed,
        "solved": bool(s["result"].get("solved")),
        "wall_s": round(s["wall_s"], 2),
        "process_wall_s": round(wall, 2),
        "env_steps_trained": lr["env_steps"],
        "updates": lr["update"],
        "trained_steps_per_s": round(lr["env_steps"] / max(1e-9, s["wall_s"]), 1),
        "produced_steps_per_s": round(act["env_steps"] / max(1e-9, s["wall_s"]), 1),
        "mean_return_100": lr["mean_return_100"],
        "policy_lag": lag_stats(lr["staleness"]["lags"]),
        "dropped_unrolls": lr["staleness"]["dropped"],
        "learner_time": {k: round(lr["times"][k] / lw, 3) for k in ("wait_s", "update_s", "publish_s")},
        "actor_time": {k: round(act[k] / aw, 3) for k in ("step_s", "act_s", "write_s", "wait_weights_s")},
    }


def run_baseline(config, budget_s, seed):
    """The same PPO, synchronous, one process: act (PyTorch) -> step
    (flywheel.envs) -> every unroll, update."""
    import tomllib
    import torch
    from flywheel import envs
    from flywheel.rl.models import ActorCritic
    from flywheel.rl.ppo import PPO
    from flywheel.rl.learner import LOOP_DEFAULTS

    with open(config, "rb") as f:
        cfg = tomllib.load(f)
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    e = cfg["env"]["num_envs"] * cfg["actor"]["count"]  # the same envs per update
    t_len = cfg["actor"]["unroll_length"]
    learner = {k: v for k, v in cfg["learner"].items() if k not in LOOP_DEFAULTS}
    pool = envs.make(cfg["env"]["id"], num_envs=e, autoreset_mode="same_step", seed=seed)
    model = ActorCritic.from_config(4, 2, True, cfg.get("policy", {}))
    algo = PPO(model, learner)
    obs, _ = pool.reset()
    running = np.zeros(e)
    returns = collections.deque(maxlen=100)
    steps = 0
    t0 = time.monotonic()
    act_s = step_s = update_s = 0.0
    solved = False
    while time.monotonic() - t0 < budget_s:
        cols = collections.defaultdict(list)
        for _ in range(t_len):
            a0 = time.monotonic()
            with torch.no_grad():
                d = model.distribution(torch.from_numpy(np.asarray(obs, np.float32)))
                a = d.sample()
                lp = d.log_prob(a)
            a1 = time.monotonic()
            nxt, rew, term, trunc, info = pool.step(a.numpy())
            a2 = time.monotonic()
            act_s += a1 - a0
            step_s += a2 - a1
            done = term | trunc
            next_obs = np.array(nxt, np.float32)
            if done.any():
                next_obs[done] = info["final_obs"][done]
            running += rew
            returns.extend(running[done].tolist())
            running[done] = 0
            for k, v in (("obs", obs), ("action", a.numpy()), ("logprob", lp.numpy()), ("reward", rew),
                         ("terminated", term), ("truncated", trunc), ("next_obs", next_obs)):
                cols[k].append(np.array(v))  # copy: the pool reuses its batch buffers
            obs = nxt
            steps += e
        data = {k: np.stack(v)[None] for k, v in cols.items()}
        done = data["terminated"] | data["truncated"]
        batch = {"obs": np.concatenate([data["obs"], data["next_obs"][:, -1:]], 1).astype(np.float32),
                 "action": data["action"].astype(np.int64), "logprob": data["logprob"].astype(np.float32),
                 "reward": data["reward"].astype(np.float32), "terminated": data["terminated"],
                 "truncated": data["truncated"],
                 "final_obs": np.where(done[..., None], data["next_obs"], 0).astype(np.float32),
                 "version": np.zeros((1, t_len), np.int64), "weight": np.ones(1, np.float32)}
        u0 = time.monotonic()
        algo.update(batch)
        update_s += time.monotonic() - u0
        if len(returns) >= 100 and np.mean(returns) >= cfg["run"]["stop_mean_return"]:
            solved = True
            break
    wall = time.monotonic() - t0
    pool.close()
    return {"seed": seed, "solved": solved, "wall_s": round(wall, 2), "env_steps_trained": steps,
            "trained_steps_per_s": round(steps / wall, 1),
            "mean_return_100": float(np.mean(returns)) if returns else None,
            "time": {"act": round(act_s / wall, 3), "step": round(step_s / wall, 3), "update": round(update_s / wall, 3)}}


def median_of(runs, key):
    vals = [r[key] for r in runs if r["solved"]]
    return round(float(np.median(vals)), 2) if vals else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build/src/flywheel/cli/flywheel"))
    p.add_argument("--budget", type=float, default=300, help="seconds per run before giving up")
    p.add_argument("--out", default=os.path.join(ROOT, "bench/results/rl.json"))
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="fw-rl-bench-")
    load = open("/proc/loadavg").read().split()[:3]
    print(f"== rl_bench: {os.cpu_count()} CPUs, load {load}, seeds {a.seeds}")
    results = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "loadavg_at_start": load},
               "seeds": a.seeds}
    for name in ("cartpole_ppo", "cartpole_impala"):
        cfg = os.path.join(ROOT, "examples", f"{name}.toml")
        runs = []
        for seed in a.seeds:
            r = run_flywheel(a.bin, cfg, a.budget, os.path.join(tmp, f"{name}_{seed}"), seed)
            runs.append(r)
            print(f"{name} seed {seed}: solved={r['solved']} in {r['wall_s']} s, {r['env_steps_trained']} steps "
                  f"trained ({r['trained_steps_per_s']}/s), actors produced {r['produced_steps_per_s']}/s, "
                  f"lag p50/p90/max {r['policy_lag']['p50']}/{r['policy_lag']['p90']}/{r['policy_lag']['max']}, "
                  f"learner {r['learner_time']}, actors {r['actor_time']}", flush=True)
        results[name] = {"config": os.path.relpath(cfg, ROOT), "runs": runs,
                         "median_wall_s": median_of(runs, "wall_s"),
                         "median_trained_steps_per_s": median_of(runs, "trained_steps_per_s")}
    base_runs = []
    for seed in a.seeds:
        b = run_baseline(os.path.join(ROOT, "examples", "cartpole_ppo.toml"), a.budget, seed)
        base_runs.append(b)
        print(f"baseline (same PPO, one synchronous Python process) seed {seed}: solved={b['solved']} in "
              f"{b['wall_s']} s, {b['env_steps_trained']} steps ({b['trained_steps_per_s']}/s), time {b['time']}",
              flush=True)
    results["baseline_sync_python_ppo"] = {"runs": base_runs, "median_wall_s": median_of(base_runs, "wall_s"),
                                           "median_trained_steps_per_s": median_of(base_runs, "trained_steps_per_s")}

    def ratio(x, y):
        return round(x / y, 2) if x and y else None
    base = results["baseline_sync_python_ppo"]
    ppo, impala = results["cartpole_ppo"], results["cartpole_impala"]
    results["ratios"] = {
        "ppo_trained_steps_per_s_vs_baseline": ratio(ppo["median_trained_steps_per_s"],
                                                     base["median_trained_steps_per_s"]),
        "impala_trained_steps_per_s_vs_baseline": ratio(impala["median_trained_steps_per_s"],
                                                        base["median_trained_steps_per_s"]),
        "ppo_time_to_solve_baseline_over_flywheel": ratio(base["median_wall_s"], ppo["median_wall_s"]),
    }
    print(f"medians: ppo {ppo['median_wall_s']} s ({ppo['median_trained_steps_per_s']} steps/s), impala "
          f"{impala['median_wall_s']} s ({impala['median_trained_steps_per_s']}/s), baseline "
          f"{base['median_wall_s']} s ({base['median_trained_steps_per_s']}/s)")
    print(f"ratios: {results['ratios']}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
