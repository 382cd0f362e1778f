"""A DQN-style learner over flywheel.replay (docs/replay.md, "Python").

An actor thread plays a toy CartPole-like environment with random actions
and writes transitions (obs, action, reward, next_obs, done) into a
prioritized replay table; the main thread samples batches, trains a small
PyTorch Q-network with importance weights, and writes TD errors back as
priorities. A sample-to-insert-ratio rate limiter keeps the learner from
running ahead of the actor (and the actor from running ahead of the
learner). When the actor is done it closes the table, which ends the
learner's loop.

    PYTHONPATH=build/python python3 examples/replay_dqn.py --steps 5000

Needs PyTorch; without it the example says so and exits (status 0).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import numpy as np

from flywheel import replay

try:
    import torch
except ImportError:  # checked in main()
    torch = None

BATCH = 32


class ToyCartPole:
    """CartPole's state and termination rule with simplified linear dynamics."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.state = np.zeros(4, np.float32)
        self.t = 0

    def reset(self) -> np.ndarray:
        self.state = self.rng.uniform(-0.05, 0.05, size=4).astype(np.float32)
        self.t = 0
        return self.state.copy()

    def step(self, action: int):
        x, x_dot, theta, theta_dot = (float(v) for v in self.state)
        force = 1.0 if action == 1 else -1.0
        theta_dot += 0.02 * (9.8 * theta - 0.5 * force)
        x_dot += 0.02 * force
        x, theta = x + 0.02 * x_dot, theta + 0.02 * theta_dot
        self.state = np.array([x, x_dot, theta, theta_dot], np.float32)
        self.t += 1
        done = abs(x) > 2.4 or abs(theta) > 0.21 or self.t >= 200
        return self.state.copy(), 1.0, done


def actor(table: replay.Table, steps: int, seed: int) -> None:
    """Writes `steps` transitions, then closes the table."""
    env = ToyCartPole(seed)
    rng = np.random.default_rng(seed + 1)
    try:
        with replay.Writer([table], chunk_length=16) as writer:
            obs = env.reset()
            for _ in range(steps):
                action = int(rng.integers(2))
                next_obs, reward, done = env.step(action)
                writer.append({"obs": obs, "action": action, "reward": reward, "next_obs": next_obs, "done": done})
                # New transitions get priority 1 (the TD errors the learner
                # writes back are of that order).
                writer.create_item(table.name, 1.0, {"obs": 1, "action": 1, "reward": 1, "next_obs": 1, "done": 1})
                obs = next_obs
                if done:
                    writer.end_episode()
                    obs = env.reset()
    except replay.Cancelled:
        pass  # the learner stopped first
    finally:
        table.close()


def learn(table: replay.Table, gamma: float = 0.99, lr: float = 1e-3, beta: float = 0.4) -> dict:
    torch.manual_seed(0)
    q_net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    target = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    target.load_state_dict(q_net.state_dict())
    opt = torch.optim.Adam(q_net.parameters(), lr=lr)
    steps, loss_value = 0, float("nan")
    # Ends when the actor closes the table (or nothing arrives for 60 s).
    for batch in replay.Sampler(table).iter(BATCH, timeout=60):
        d = {k: torch.from_numpy(v[:, 0]) for k, v in batch.data.items()}  # (batch, time=1, ...) -> (batch, ...)
        q = q_net(d["obs"]).gather(1, d["action"].unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            next_q = target(d["next_obs"]).max(dim=1).values
            y = d["reward"] + gamma * (~d["done"]).float() * next_q
        td = y - q
        # Importance weights for prioritized sampling, normalised by their max.
        w = torch.from_numpy((batch.probabilities * batch.table_size) ** -beta).float()
        w = w / w.max()
        loss = (w * torch.nn.functional.smooth_l1_loss(q, y, reduction="none")).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        table.mutate_priorities(dict(zip(batch.keys.tolist(), (td.detach().abs() + 1e-3).tolist())))
        steps += 1
        loss_value = float(loss)
        if steps % 100 == 0:
            target.load_state_dict(q_net.state_dict())
    return {"learner_steps": steps, "loss": loss_value}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5000, help="environment steps")
    parser.add_argument("--samples-per-insert", type=float, default=8.0)
    args = parser.parse_args()
    if torch is None:
        print("PyTorch is not installed; skipping the DQN example (pip install torch to run it).")
        return 0

    spi = args.samples_per_insert
    table = replay.Table(
        "transitions",
        sampler=replay.Prioritized(0.6),
        remover=replay.Fifo(),
        max_size=100_000,
        # Learn once 200 transitions are in; keep about `spi` sampled items
        # per inserted one, with room for a few batches of slack either way.
        rate_limiter=replay.RateLimiter.sample_to_insert_ratio(spi, min(200, args.steps), 4 * BATCH * max(1.0, spi)),
        signature={"obs": "float32[4]", "action": "int64", "reward": "float32", "next_obs": "float32[4]",
                   "done": "bool"})
    start = time.monotonic()
    th = threading.Thread(target=actor, args=(table, args.steps, 0), daemon=True)
    th.start()
    try:
        result = learn(table)
    finally:
        table.close()  # stops the actor if the learner failed
        th.join()
    info = table.info()
    print(f"{args.steps} env steps, {result['learner_steps']} learner steps "
          f"({info['samples']} items sampled, {info['samples'] / max(1, info['inserts']):.1f} per insert), "
          f"last loss {result['loss']:.4f}, {time.monotonic() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
