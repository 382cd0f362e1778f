"""A Python actor: the C++ actor's loop (src/flywheel/rl/actor.h) with a
Python policy callback, for policies the C++ MLP cannot run (recurrent,
convolutional, anything in PyTorch or JAX).

It writes the same unroll items as the C++ actor, so the same learners
consume them::

    from flywheel import envs
    from flywheel.rl.actor import PythonActor

    def policy(obs):                       # obs: float32 [num_envs, obs_dim]
        ...                                # -> (actions [num_envs], logprob [num_envs])
        return actions, logprob

    pool = envs.make("CartPole-v1", num_envs=8, autoreset_mode="same_step", seed=0)
    actor = PythonActor("127.0.0.1:9000", pool, policy, unroll_length=64, version=lambda: current_version)
    actor.run(max_unrolls=10)

Acting is one Python call per step for the whole batch of envs, so the
per-step overhead is Python's; the C++ actor is the fast path.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

Policy = Callable[[np.ndarray], Tuple[np.ndarray, np.ndarray]]


class PythonActor:
    """Steps ``pool`` (a ``flywheel.envs`` vector env in ``same_step``
    autoreset mode, sync) with ``policy`` and sends one replay item per
    unroll of ``unroll_length`` steps to ``table`` at ``address``.

    Args:
      address: replay server ``"host:port"``.
      pool: the envs; must use ``autoreset_mode="same_step"`` so that every
        step is a real transition (the terminal observation is in
        ``next_obs``).
      policy: ``obs -> (actions, logprob)``; actions int (Discrete, 0-based
        from the space's start) or float ``[num_envs, act_dim]`` (Box; the
        env gets them clipped to its bounds, the item keeps them unclipped).
      version: the policy version to record per unroll (an int, or a
        callable read at the start of each unroll).
      on_unroll: called after each unroll is sent (e.g. to fetch new
        weights); returning False stops :meth:`run`.
    """

    def __init__(self, address: str, pool: Any, policy: Policy, unroll_length: int = 64, table: str = "unrolls",
                 version: Any = 0, on_unroll: Optional[Callable[[int], Optional[bool]]] = None):
        from flywheel import replay

        if pool.autoreset_mode != "same_step":
            raise ValueError(f"PythonActor needs an env pool with autoreset_mode='same_step', got "
                             f"{pool.autoreset_mode!r}")
        if unroll_length < 1:
            raise ValueError(f"unroll_length must be >= 1, got {unroll_length}")
        self.pool = pool
        self.policy = policy
        self.unroll_length = int(unroll_length)
        self.table = table
        self.version = version
        self.on_unroll = on_unroll
        self.client = replay.Client(address)
        self.writer = self.client.writer(chunk_length=self.unroll_length, codec="none",
                                         max_history=2 * self.unroll_length, max_in_flight_items=1)
        space = pool.single_action_space
        self.discrete = hasattr(space, "n")
        self._start = int(getattr(space, "start", 0)) if self.discrete else 0
        self._low = None if self.discrete else np.asarray(space.low, np.float32)
        self._high = None if self.discrete else np.asarray(space.high, np.float32)
        self.num_envs = int(pool.num_envs)
        self.unrolls = 0
        self.env_steps = 0
        self.episode_returns: list = []
        self._running = np.zeros(self.num_envs, np.float64)
        self._obs: Optional[np.ndarray] = None

    def _version(self) -> int:
        return int(self.version() if callable(self.version) else self.version)

    def _act(self, obs: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        actions, logprob = self.policy(obs)
        logprob = np.asarray(logprob, np.float32).reshape(self.num_envs)
        if self.discrete:
            stored = np.asarray(actions, np.int64).reshape(self.num_envs)
            return stored, stored + self._start, logprob
        stored = np.asarray(actions, np.float32).reshape(self.num_envs, -1)
        return stored, np.clip(stored, self._low, self._high), logprob

    def run(self, max_unrolls: int = 0) -> int:
        """Acts until ``max_unrolls`` unrolls are sent (0: until
        ``on_unroll`` returns False or the table closes). Returns the
        number of unrolls sent."""
        from flywheel import replay

        if self._obs is None:
            obs, _ = self.pool.reset()
            self._obs = np.array(obs, np.float32)
        sent = 0
        while not max_unrolls or sent < max_unrolls:
            version = self._version()
            for _ in range(self.unroll_length):
                obs = self._obs
                stored, env_actions, logprob = self._act(obs)
                nxt, reward, terminated, truncated, info = self.pool.step(env_actions)
                nxt = np.array(nxt, np.float32)
                next_obs = nxt.copy()
                done = np.logical_or(terminated, truncated)
                if done.any():
                    final = np.asarray(info["final_obs"], np.float32)
                    next_obs[done] = final[done]
                self._running += reward
                ep_return = np.full(self.num_envs, np.nan, np.float32)
                ep_return[done] = self._running[done]
                self.episode_returns.extend(float(r) for r in self._running[done])
                self._running[done] = 0
                self.writer.append({"obs": obs, "action": stored, "logprob": logprob,
                                    "reward": np.asarray(reward, np.float32),
                                    "terminated": np.asarray(terminated, bool), "truncated": np.asarray(truncated, bool),
                                    "next_obs": next_obs, "episode_return": ep_return,
                                    "version": np.int64(version)})
                self._obs = nxt
                self.env_steps += self.num_envs
            t = self.unroll_length
            try:
                self.writer.create_item(self.table, 1.0, {c: t for c in (
                    "obs", "action", "logprob", "reward", "terminated", "truncated", "next_obs", "episode_return",
                    "version")})
                self.writer.flush()
            except replay.Cancelled:
                break  # the table closed: the run is over
            sent += 1
            self.unrolls += 1
            if self.on_unroll is not None and self.on_unroll(self.unrolls) is False:
                break
        return sent

    def close(self) -> None:
        from flywheel import replay
        try:
            self.writer.close()
        except replay.Cancelled:
            pass

    def stats(self) -> Dict[str, Any]:
        return {"unrolls": self.unrolls, "env_steps": self.env_steps, "episodes": len(self.episode_returns)}
