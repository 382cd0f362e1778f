"""IMPALA (Espeholt et al. 2018): actor-critic with V-trace off-policy targets.

Asynchronous actors act with weights that are 0-2 versions old; V-trace
corrects for the gap between their behaviour policy mu (``logprob`` in the
batch) and the learner's current policy pi with truncated importance
weights rho_t = min(rho_bar, pi/mu) and c_t = min(c_bar, pi/mu). Batch
format and the bootstrap rule at episode ends: :mod:`flywheel.rl.models`.

The optimizer is RMSprop as in the paper (decay 0.99, eps 0.01, no
momentum; ``"optimizer": "rmsprop"``, the default). Its large eps bounds the
step where gradients are small, which kept V-trace stable at learning rates
where Adam (``"optimizer": "adam"``, eps 1e-8) sometimes collapsed the policy
to one action: on CartPole-v1 with actors one version stale, RMSprop at lr
5e-3 solved 10 seeds out of 10 in 0.9-1.3 s, Adam's best (lr 3e-3) in
1.3-2.9 s, and Adam at lr 5e-3 (unrolls of 128, 4 minibatches) collapsed
on 4 seeds of 5 (bench/rl_tune.py).

Per-item ``weight`` multiplies every sample's loss term; a batch whose
weights are all 0 leaves the model and the optimizer untouched.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import torch
from torch import nn

from .models import ActorCritic, prepare_batch, with_defaults
from .optim import Adam, RMSprop

__all__ = ["vtrace", "Impala", "DEFAULTS"]

DEFAULTS: Dict[str, Any] = {
    "lr": 6e-4,
    "anneal_lr": False,       # lr * (1 - progress), progress in [0, 1] passed to update()
    "optimizer": "rmsprop",   # "rmsprop" (decay 0.99, eps 0.01) | "adam" (eps 1e-8)
    "gamma": 0.99,
    "rho_bar": 1.0,           # clip of the importance weights in the TD errors and policy gradient
    "c_bar": 1.0,             # clip of the trace-cutting weights
    "value_coef": 0.5,
    "entropy_coef": 0.01,
    "max_grad_norm": 40.0,    # global gradient-norm clip; 0 or None: none
    "epochs": 1,              # passes over each batch (V-trace recomputed per pass)
    "minibatches": 1,         # gradient steps per pass, each over a random subset of the B * E unrolls
    "reward_scale": 1.0,      # rewards are multiplied by this
}


def vtrace(behaviour_logprob: torch.Tensor, target_logprob: torch.Tensor, reward: torch.Tensor,
           value: torch.Tensor, next_value: torch.Tensor, terminated: torch.Tensor, done: torch.Tensor,
           gamma: float, rho_bar: float = 1.0, c_bar: float = 1.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets and policy-gradient advantages over [T, N] tensors
    (no gradient flows through them).

    ``value[t]`` = V(x_t); ``next_value[t]`` is step t's bootstrap (zeroed
    where ``terminated``); ``done`` (terminated | truncated) cuts the
    traces at step t. With rho_t = min(rho_bar, pi/mu), c_t = min(c_bar, pi/mu)::

        delta_t = rho_t * (r_t + gamma * next_value_t - V(x_t))
        vs_t    = V(x_t) + delta_t + gamma * c_t * (1 - done_t) * (vs_{t+1} - V(x_{t+1}))
        pg_adv_t = rho_t * (r_t + gamma * vs'_{t+1} - V(x_t))

    where vs'_{t+1} is vs_{t+1}, or next_value_t when step t ends an episode
    or is the last of the unroll. Returns (vs, pg_advantages).
    """
    with torch.no_grad():
        value = value.detach()
        log_rho = target_logprob.detach() - behaviour_logprob.detach()
        rho = log_rho.exp()
        rho_c = rho.clamp(max=rho_bar)
        cs = rho.clamp(max=c_bar)
        not_done = 1.0 - done.to(value.dtype)
        boot = next_value.detach() * (1.0 - terminated.to(value.dtype))
        delta = rho_c * (reward + gamma * boot - value)
        carry = gamma * cs * not_done
        vs_minus_v = torch.empty_like(value)
        acc = torch.zeros_like(value[0])
        for t in range(value.shape[0] - 1, -1, -1):
            acc = delta[t] + carry[t] * acc
            vs_minus_v[t] = acc
        vs = vs_minus_v + value
        next_vs = boot.clone()
        next_vs[:-1] = torch.where(not_done[:-1] > 0, vs[1:], boot[:-1])
        pg_adv = rho_c * (reward + gamma * next_vs - value)
    return vs, pg_adv


class Impala:
    """The IMPALA learner for one :class:`ActorCritic` (which the caller
    owns and saves); see :data:`DEFAULTS` for the config keys. Not
    thread-safe."""

    def __init__(self, model: ActorCritic, cfg: Optional[Mapping[str, Any]] = None):
        self.model = model
        self.cfg = with_defaults(cfg, DEFAULTS, "IMPALA")
        c = self.cfg
        if int(c["epochs"]) < 1 or int(c["minibatches"]) < 1:
            raise ValueError(f"IMPALA config: epochs and minibatches must be >= 1, got {c['epochs']}, "
                             f"{c['minibatches']}")
        if not float(c["lr"]) > 0:
            raise ValueError(f"IMPALA config: lr must be > 0, got {c['lr']}")
        if c["optimizer"] == "adam":
            self.optimizer = Adam(model.parameters(), lr=float(c["lr"]))
        elif c["optimizer"] == "rmsprop":
            self.optimizer = RMSprop(model.parameters(), lr=float(c["lr"]), alpha=0.99, eps=0.01)
        else:
            raise ValueError(f"IMPALA config: optimizer must be 'adam' or 'rmsprop', got {c['optimizer']!r}")

    def update(self, batch: Mapping[str, Any], progress: float = 0.0) -> Dict[str, float]:
        """One IMPALA update on ``batch``; returns mean stats over the
        gradient steps: policy_loss, value_loss, entropy, mean_rho (of the
        unclipped pi/mu), clipped_rho_fraction (pi/mu > rho_bar),
        grad_steps, lr. Deterministic given torch's RNG state."""
        c = self.cfg
        model = self.model
        lr = float(c["lr"]) * (max(0.0, 1.0 - float(progress)) if c["anneal_lr"] else 1.0)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        u = prepare_batch(model, batch, float(c["reward_scale"]))
        totals = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "mean_rho": 0.0,
                  "clipped_rho_fraction": 0.0}
        steps = 0
        if u.total_weight > 0:
            n = u.reward.shape[1]
            for _ in range(int(c["epochs"])):
                parts = [None] if int(c["minibatches"]) == 1 else torch.randperm(n).tensor_split(int(c["minibatches"]))
                for cols in parts:
                    if cols is not None and cols.numel() == 0:
                        continue
                    stats = self._step(u, cols)
                    for k, v in stats.items():
                        totals[k] += v
                    steps += 1
        out = {k: v / steps if steps else 0.0 for k, v in totals.items()}
        out.update(grad_steps=steps, lr=lr)
        return out

    def _step(self, u: Any, cols: Optional[torch.Tensor]) -> Dict[str, float]:
        c = self.cfg
        model = self.model

        def pick(x: torch.Tensor) -> torch.Tensor:
            return x if cols is None else x[:, cols]

        obs, action = pick(u.obs), pick(u.action)
        behaviour, reward = pick(u.logprob), pick(u.reward)
        terminated, done, weight, next_value = pick(u.terminated), pick(u.done), pick(u.weight), pick(u.next_value)
        dist = model.distribution(obs)
        target = dist.log_prob(action)
        entropy = dist.entropy()
        value = model.value(obs)
        # Within the unroll the bootstrap of a step that did not end an
        # episode is V(x_{t+1}) under the current value function.
        next_value = next_value.clone()
        next_value[:-1] = torch.where(done[:-1] > 0, next_value[:-1], value[1:].detach())
        vs, pg_adv = vtrace(behaviour, target, reward, value, next_value, terminated, done, float(c["gamma"]),
                            float(c["rho_bar"]), float(c["c_bar"]))
        policy_loss = -target * pg_adv
        value_loss = 0.5 * (vs - value).square()
        loss = (weight * (policy_loss + float(c["value_coef"]) * value_loss
                          - float(c["entropy_coef"]) * entropy)).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if c["max_grad_norm"]:
            nn.utils.clip_grad_norm_(model.parameters(), float(c["max_grad_norm"]))
        self.optimizer.step()
        with torch.no_grad():
            rho = (target.detach() - behaviour).exp()
            return {
                "policy_loss": float(policy_loss.mean()),
                "value_loss": float(value_loss.mean()),
                "entropy": float(entropy.mean()),
                "mean_rho": float(rho.mean()),
                "clipped_rho_fraction": float((rho > float(c["rho_bar"])).float().mean()),
            }

    def state_dict(self) -> Dict[str, Any]:
        """The optimizer state and config (the model is saved by its owner)."""
        return {"optimizer": self.optimizer.state_dict(), "cfg": dict(self.cfg)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`'s optimizer state; the config stays
        the one this learner was built with."""
        self.optimizer.load_state_dict(state["optimizer"])
