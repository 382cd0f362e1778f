"""PPO (Schulman et al. 2017): clipped surrogate objective with GAE.

The learner takes batches of actor unrolls (format and bootstrap rule:
:mod:`flywheel.rl.models`). Each :meth:`PPO.update` computes GAE advantages
with the current value function, then runs ``epochs`` passes of
``minibatches`` gradient steps over the B * T * E samples. The probability
ratio is taken against the behaviour policy's ``logprob`` from the batch,
which is the "old policy" of PPO when actors act with the latest weights,
and a clipped importance weight when they lag a version or two.

Per-item ``weight`` multiplies every sample's loss term (policy, value and
entropy), so a weight of 0 removes an item from the gradient; a batch whose
weights are all 0 leaves the model and the optimizer untouched.

Example::

    model = ActorCritic(obs_dim=4, action_dim=2, discrete=True)
    ppo = PPO(model, {"lr": 1e-3, "epochs": 4, "minibatches": 4})
    stats = ppo.update(batch)            # batch: dict of numpy arrays
    tensors = model.policy_tensors()     # publish to the actors
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import torch
from torch import nn

from .models import ActorCritic, prepare_batch, with_defaults
from .optim import Adam

__all__ = ["gae", "PPO", "DEFAULTS"]

DEFAULTS: Dict[str, Any] = {
    "lr": 2.5e-4,                 # Adam step size
    "anneal_lr": False,           # lr * (1 - progress), progress in [0, 1] passed to update()
    "gamma": 0.99,                # discount
    "lam": 0.95,                  # GAE lambda
    "clip": 0.2,                  # ratio clip (and value clip when clip_value)
    "clip_value": True,           # clip the value update around the old values
    "value_coef": 0.5,
    "entropy_coef": 0.0,
    "epochs": 4,                  # passes over each batch
    "minibatches": 4,             # gradient steps per pass
    "max_grad_norm": 0.5,         # global gradient-norm clip; 0 or None: none
    "normalize_advantages": True,  # per minibatch, to (weighted) mean 0 std 1
    "target_kl": None,            # stop the passes early when the mean approx KL of a pass exceeds it
    "reward_scale": 1.0,          # rewards are multiplied by this before GAE
    "adam_eps": 1e-5,
}


def gae(reward: torch.Tensor, value: torch.Tensor, next_value: torch.Tensor, terminated: torch.Tensor,
        done: torch.Tensor, gamma: float, lam: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over [T, N] tensors.

    ``next_value[t]`` is step t's bootstrap (V(obs[t+1]), or V(final_obs[t])
    after a truncation); it is zeroed where ``terminated``. ``done``
    (terminated | truncated, 0/1 or bool) stops the recursion at step t, so
    advantages never cross an episode boundary::

        delta_t = r_t + gamma * (1 - terminated_t) * next_value_t - value_t
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1},   A_T = 0

    Returns (advantages, returns = advantages + value), both [T, N].
    """
    not_term = 1.0 - terminated.to(value.dtype)
    not_done = 1.0 - done.to(value.dtype)
    delta = reward + gamma * not_term * next_value - value
    carry = gamma * lam * not_done
    adv = torch.empty_like(value)
    acc = torch.zeros_like(value[0])
    for t in range(value.shape[0] - 1, -1, -1):
        acc = delta[t] + carry[t] * acc
        adv[t] = acc
    return adv, adv + value


class PPO:
    """The PPO learner for one :class:`ActorCritic` (which the caller owns
    and saves); see :data:`DEFAULTS` for the config keys. Not thread-safe."""

    def __init__(self, model: ActorCritic, cfg: Optional[Mapping[str, Any]] = None):
        self.model = model
        self.cfg = with_defaults(cfg, DEFAULTS, "PPO")
        c = self.cfg
        if int(c["epochs"]) < 1 or int(c["minibatches"]) < 1:
            raise ValueError(f"PPO config: epochs and minibatches must be >= 1, got {c['epochs']}, "
                             f"{c['minibatches']}")
        if not float(c["lr"]) > 0:
            raise ValueError(f"PPO config: lr must be > 0, got {c['lr']}")
        self.optimizer = Adam(model.parameters(), lr=float(c["lr"]), eps=float(c["adam_eps"]))

    def _set_lr(self, progress: float) -> float:
        lr = float(self.cfg["lr"])
        if self.cfg["anneal_lr"]:
            lr *= max(0.0, 1.0 - float(progress))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def update(self, batch: Mapping[str, Any], progress: float = 0.0) -> Dict[str, float]:
        """One PPO update on ``batch``; returns mean stats over the gradient
        steps: policy_loss, value_loss, entropy, approx_kl (the k3
        estimator), clip_fraction, explained_variance (of the pre-update
        values), grad_steps, lr. Minibatches come from torch.randperm, so
        the update is deterministic given torch's RNG state."""
        c = self.cfg
        model = self.model
        lr = self._set_lr(progress)
        u = prepare_batch(model, batch, float(c["reward_scale"]))
        adv, ret = gae(u.reward, u.value, u.next_value, u.terminated, u.done, float(c["gamma"]), float(c["lam"]))
        var_ret = ret.var()
        explained = float(1.0 - (ret - u.value).var() / var_ret) if var_ret > 0 else float("nan")

        samples = adv.numel()
        obs = u.obs.reshape(samples, -1)
        action = u.action.reshape(samples, *u.action.shape[2:])
        old_logprob = u.logprob.reshape(samples)
        old_value = u.value.reshape(samples)
        adv = adv.reshape(samples)
        ret = ret.reshape(samples)
        weight = u.weight.reshape(samples)

        totals = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clip_fraction": 0.0}
        steps = 0
        if u.total_weight > 0:
            clip = float(c["clip"])
            max_norm = c["max_grad_norm"]
            for _ in range(int(c["epochs"])):
                epoch_kl, epoch_steps = 0.0, 0
                for idx in torch.randperm(samples).tensor_split(int(c["minibatches"])):
                    if idx.numel() == 0:
                        continue
                    stats = self._step(obs[idx], action[idx], old_logprob[idx], old_value[idx], adv[idx], ret[idx],
                                       weight[idx], clip, max_norm)
                    for k, v in stats.items():
                        totals[k] += v
                    epoch_kl += stats["approx_kl"]
                    epoch_steps += 1
                    steps += 1
                if c["target_kl"] is not None and epoch_kl / max(epoch_steps, 1) > float(c["target_kl"]):
                    break
        out = {k: v / steps if steps else 0.0 for k, v in totals.items()}
        out.update(explained_variance=explained, grad_steps=steps, lr=lr)
        return out

    def _step(self, obs: torch.Tensor, action: torch.Tensor, old_logprob: torch.Tensor, old_value: torch.Tensor,
              adv: torch.Tensor, ret: torch.Tensor, weight: torch.Tensor, clip: float,
              max_norm: Optional[float]) -> Dict[str, float]:
        c = self.cfg
        model = self.model
        dist = model.distribution(obs)
        logratio = dist.log_prob(action) - old_logprob
        ratio = logratio.exp()
        entropy = dist.entropy()
        if c["normalize_advantages"] and adv.numel() > 1:
            # Weighted moments, so that an item of weight 0 has no influence at all.
            total = weight.sum()
            if total > 0:
                mean = (weight * adv).sum() / total
                std = ((weight * (adv - mean).square()).sum() / total).sqrt()
                adv = (adv - mean) / (std + 1e-8)
        policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1.0 - clip, 1.0 + clip))
        value = model.value(obs)
        value_loss = (value - ret).square()
        if c["clip_value"]:
            clipped = old_value + (value - old_value).clamp(-clip, clip)
            value_loss = torch.max(value_loss, (clipped - ret).square())
        value_loss = 0.5 * value_loss
        loss = (weight * (policy_loss + float(c["value_coef"]) * value_loss
                          - float(c["entropy_coef"]) * entropy)).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if max_norm:
            nn.utils.clip_grad_norm_(model.parameters(), float(max_norm))
        self.optimizer.step()
        with torch.no_grad():
            return {
                "policy_loss": float(policy_loss.mean()),
                "value_loss": float(value_loss.mean()),
                "entropy": float(entropy.mean()),
                "approx_kl": float(((ratio - 1.0) - logratio).mean()),
                "clip_fraction": float(((ratio - 1.0).abs() > clip).float().mean()),
            }

    def state_dict(self) -> Dict[str, Any]:
        """The optimizer state and config (the model is saved by its owner)."""
        return {"optimizer": self.optimizer.state_dict(), "cfg": dict(self.cfg)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict`'s optimizer state; the config stays
        the one this learner was built with."""
        self.optimizer.load_state_dict(state["optimizer"])
