#!/usr/bin/env python3
"""The Python side of bench/envs_bench.cc (docs/benchmarks.md, "Environments").

Workloads, each the best of --repeats runs of about --seconds:
  python_loop   a plain Python loop over --envs reference CartPole-v1 envs
                (tests/python/envs_reference.py: the same dynamics in plain
                Python, with Gymnasium's TimeLimit of 500 and a reset when an
                episode ends), random actions drawn up front.
  flywheel_api  flywheel.envs.make("CartPole-v1", num_envs=--envs,
                num_threads=t).step(actions) from Python, t in --threads:
                the C++ pool plus the binding's per-call cost. Skipped (and
                reported as null) when flywheel cannot be imported.

Prints one JSON object: {"python_loop": {"steps_per_s", "samples"},
"flywheel_api": {"<t>": {"steps_per_s", "samples"}} or null}. Env steps/s
count one env stepping once.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import envs_reference as ref  # noqa: E402


def python_loop(num_envs, seconds, seed):
    envs = [ref.make("CartPole-v1") for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    rng = np.random.default_rng(seed)
    rows = max(16, 32768 // num_envs)  # as envs_bench.cc: a ring of ~32K actions
    actions = rng.integers(2, size=(rows, num_envs)).tolist()
    steps = 0
    start = time.perf_counter()
    deadline = start + seconds
    t = 0
    while True:
        row = actions[t % rows]
        for i, env in enumerate(envs):
            _, _, terminated, truncated, _ = env.step(row[i])
            if terminated or truncated:
                env.reset()
        steps += num_envs
        t += 1
        if t % 16 == 0 and time.perf_counter() >= deadline:
            break
    return steps / (time.perf_counter() - start)


def flywheel_api(num_envs, threads, seconds, seed):
    from flywheel import envs
    pool = envs.make("CartPole-v1", num_envs=num_envs, num_threads=threads, seed=seed)
    pool.reset()
    rng = np.random.default_rng(seed)
    rows = max(16, 32768 // num_envs)
    actions = [rng.integers(2, size=num_envs) for _ in range(rows)]
    for a in actions[:16]:  # warm up the threads
        pool.step(a)
    steps = 0
    start = time.perf_counter()
    deadline = start + seconds
    t = 0
    while True:
        pool.step(actions[t % rows])
        steps += num_envs
        t += 1
        if t % 64 == 0 and time.perf_counter() >= deadline:
            break
    rate = steps / (time.perf_counter() - start)
    pool.close()
    return rate


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", type=int, default=256)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    out = {"python_loop": None, "flywheel_api": None}
    samples = [python_loop(args.envs, args.seconds, args.seed) for _ in range(args.repeats)]
    out["python_loop"] = {"steps_per_s": max(samples), "samples": samples}
    try:
        import flywheel.envs  # noqa: F401
    except ImportError as e:
        print(f"envs_reference_bench: flywheel not importable ({e}); flywheel_api skipped", file=sys.stderr)
    else:
        out["flywheel_api"] = {}
        for t in (int(x) for x in args.threads.split(",")):
            s = [flywheel_api(args.envs, t, args.seconds, args.seed) for _ in range(args.repeats)]
            out["flywheel_api"][str(t)] = {"steps_per_s": max(s), "samples": s}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
