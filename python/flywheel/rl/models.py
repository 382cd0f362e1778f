"""The actor-critic network and the learner's view of a batch of unrolls.

:class:`ActorCritic` is two MLPs: the policy (``layers``), whose weights the
C++ actors run, and a separate value function (``value_layers``), which only
the learner uses. :meth:`ActorCritic.policy_tensors` exports the policy in
the layout flywheel's C++ MlpPolicy reads:

* ``layers.{i}.weight`` float32 [out, in] and ``layers.{i}.bias`` float32
  [out] for every layer i; hidden layers apply the activation, the last one
  does not. The last layer gives logits (discrete: the actor samples from
  softmax(logits)) or means (continuous: the actor samples
  mean + exp(log_std) * N(0, 1), unclipped).
* ``log_std`` float32 [action_dim], continuous policies only.

Batch format
------------
A learner receives B items; each is one actor unroll of T steps over E
parallel envs, as a dict of numpy arrays:

=============  =========================  ===========================================
key            dtype, shape               meaning
=============  =========================  ===========================================
obs            float32 [B, T+1, E, D]     observation before step t; [T] is the one
                                          after the last step (for bootstrapping)
action         int64 [B, T, E] or         the action taken (continuous: the unclipped
               float32 [B, T, E, A]       sample)
logprob        float32 [B, T, E]          behaviour policy log-probability of action
reward         float32 [B, T, E]
terminated     bool [B, T, E]
truncated      bool [B, T, E]
final_obs      float32 [B, T, E, D]       terminal observation where step t ended an
                                          episode, zeros elsewhere
version        int64 [B, T]               policy version the actor acted with
weight         float32 [B]                per-item loss weight (staleness handling)
=============  =========================  ===========================================

Envs reset in the same step (``autoreset_mode="same_step"``): when an episode
ends at step t, ``obs[:, t+1]`` is already the first observation of the next
episode and the real terminal observation is ``final_obs[:, t]``. So the
value bootstrap of step t is

* 0 where ``terminated[t]``;
* V(final_obs[t]) where ``truncated[t]`` and not ``terminated[t]``;
* V(obs[t+1]) otherwise,

and advantage recursions stop at any episode end (``terminated | truncated``).
:func:`prepare_batch` applies that rule and lays the batch out time-major,
[T, N] with N = B * E (sample n is item n // E, env n % E).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np
import torch
from torch import nn

__all__ = ["ActorCritic", "Unrolls", "prepare_batch", "with_defaults", "BATCH_KEYS"]

_ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu}

# Keys a batch must have (version is carried along but the losses ignore it).
BATCH_KEYS = ("obs", "action", "logprob", "reward", "terminated", "truncated", "final_obs", "weight")


def _mlp(sizes: Sequence[int], last_gain: float) -> nn.ModuleList:
    """Linear layers sizes[0] -> sizes[1] -> ...; orthogonal weights (gain
    sqrt(2) for hidden layers, ``last_gain`` for the output), zero biases."""
    layers = nn.ModuleList()
    for i in range(len(sizes) - 1):
        layer = nn.Linear(sizes[i], sizes[i + 1])
        gain = last_gain if i == len(sizes) - 2 else math.sqrt(2.0)
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
        layers.append(layer)
    return layers


class ActorCritic(nn.Module):
    """MLP policy (``layers``) and a separate MLP value function
    (``value_layers``) with the same hidden sizes.

    ``discrete``: ``action_dim`` actions, the policy outputs logits.
    Otherwise ``action_dim`` real actions, the policy outputs means and the
    state-independent parameter ``log_std`` (initially 0) the log standard
    deviations.

    Orthogonal init: hidden layers gain sqrt(2), policy output 0.01 (a
    near-uniform / near-zero-mean first policy, which PPO learns from much
    faster), value output 1.
    """

    def __init__(self, obs_dim: int, action_dim: int, discrete: bool, hidden: Sequence[int] = (64, 64),
                 activation: str = "tanh"):
        super().__init__()
        if int(obs_dim) < 1 or int(action_dim) < 1:
            raise ValueError(f"obs_dim and action_dim must be >= 1, got {obs_dim} and {action_dim}")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        hidden = [int(h) for h in hidden]
        if any(h < 1 for h in hidden):
            raise ValueError(f"hidden sizes must be >= 1, got {hidden}")
        self.obs_dim = int(obs_dim)
        self.action_dim = int(action_dim)
        self.discrete = bool(discrete)
        self.hidden = tuple(hidden)
        self.activation = activation
        self._act = _ACTIVATIONS[activation]
        self.layers = _mlp([self.obs_dim, *hidden, self.action_dim], last_gain=0.01)
        self.value_layers = _mlp([self.obs_dim, *hidden, 1], last_gain=1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(self.action_dim))

    @classmethod
    def from_config(cls, obs_dim: int, action_dim: int, discrete: bool, cfg: Mapping[str, Any]) -> "ActorCritic":
        """Builds from a config dict with keys ``hidden`` (list of ints,
        default [64, 64]) and ``activation`` ("tanh" | "relu", default
        "tanh"); other keys are an error."""
        unknown = set(cfg) - {"hidden", "activation"}
        if unknown:
            raise ValueError(f"model config: unknown keys {sorted(unknown)} (known: 'hidden', 'activation')")
        return cls(obs_dim, action_dim, discrete, hidden=tuple(cfg.get("hidden", (64, 64))),
                   activation=str(cfg.get("activation", "tanh")))

    def _run(self, layers: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
        last = len(layers) - 1
        for i, layer in enumerate(layers):
            x = layer(x)
            if i < last:
                x = self._act(x)
        return x

    def policy_output(self, obs: torch.Tensor) -> torch.Tensor:
        """Logits (discrete) or action means (continuous), [..., action_dim]."""
        return self._run(self.layers, obs)

    def distribution(self, obs: torch.Tensor) -> torch.distributions.Distribution:
        """The policy at ``obs`` [..., obs_dim]: Categorical over logits, or a
        diagonal Normal(mean, exp(log_std)) whose ``log_prob`` and
        ``entropy`` sum over the action dimension."""
        out = self.policy_output(obs)
        if self.discrete:
            return torch.distributions.Categorical(logits=out)
        std = self.log_std.exp().expand_as(out)
        return torch.distributions.Independent(torch.distributions.Normal(out, std), 1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(obs), shape ``obs.shape[:-1]``."""
        return self._run(self.value_layers, obs).squeeze(-1)

    def policy_tensors(self) -> Dict[str, np.ndarray]:
        """The policy as C-contiguous float32 numpy copies, in the layout the
        C++ MlpPolicy reads (see the module docstring)."""
        out: Dict[str, np.ndarray] = {}
        with torch.no_grad():
            for i, layer in enumerate(self.layers):
                out[f"layers.{i}.weight"] = np.array(layer.weight.detach().cpu().numpy(), np.float32, order="C")
                out[f"layers.{i}.bias"] = np.array(layer.bias.detach().cpu().numpy(), np.float32, order="C")
            if not self.discrete:
                out["log_std"] = np.array(self.log_std.detach().cpu().numpy(), np.float32, order="C")
        return out

    def policy_parameters(self) -> list:
        """The parameters :meth:`policy_tensors` exports."""
        params = list(self.layers.parameters())
        if not self.discrete:
            params.append(self.log_std)
        return params


# --------------------------------------------------------------------------- configs


def with_defaults(cfg: Optional[Mapping[str, Any]], defaults: Mapping[str, Any], what: str) -> Dict[str, Any]:
    """``defaults`` updated with ``cfg``; a key not in ``defaults`` raises
    ValueError naming it (a misspelt key must not silently keep a default)."""
    cfg = dict(cfg or {})
    unknown = set(cfg) - set(defaults)
    if unknown:
        raise ValueError(f"{what} config: unknown keys {sorted(unknown)} (known: {', '.join(sorted(defaults))})")
    out = dict(defaults)
    out.update(cfg)
    return out


# --------------------------------------------------------------------------- batches


@dataclasses.dataclass
class Unrolls:
    """A batch laid out time-major for the losses: every tensor is [T, N]
    (plus trailing feature dims), N = B * E. ``value`` and ``next_value``
    come from the model at :func:`prepare_batch` time, without gradient."""

    obs: torch.Tensor          # [T, N, D]
    action: torch.Tensor       # [T, N] int64 or [T, N, A] float32
    logprob: torch.Tensor      # [T, N] behaviour log-probabilities
    reward: torch.Tensor       # [T, N]
    terminated: torch.Tensor   # [T, N] float 0/1
    done: torch.Tensor         # [T, N] float 0/1: terminated | truncated
    weight: torch.Tensor       # [T, N] the item's weight
    value: torch.Tensor        # [T, N] V(obs[t])
    next_value: torch.Tensor   # [T, N] bootstrap of step t (module docstring)
    num_items: int             # B
    total_weight: float        # sum of weight over items


def _field(batch: Mapping[str, Any], key: str, dtype: Any, shape: Sequence[Optional[int]]) -> np.ndarray:
    if key not in batch:
        raise ValueError(f"batch has no {key!r} (needs {', '.join(BATCH_KEYS)})")
    x = np.asarray(batch[key])
    if x.ndim != len(shape) or any(want is not None and got != want for got, want in zip(x.shape, shape)):
        want = "[" + ", ".join("?" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"batch[{key!r}] has shape {list(x.shape)}; need {want}")
    return np.ascontiguousarray(x, dtype=dtype)


def _time_major(x: np.ndarray) -> torch.Tensor:
    """[B, T, E, ...] -> [T, B * E, ...]."""
    t = torch.from_numpy(x).transpose(0, 1)
    return t.reshape(t.shape[0], t.shape[1] * t.shape[2], *t.shape[3:])


def prepare_batch(model: ActorCritic, batch: Mapping[str, Any], reward_scale: float = 1.0) -> Unrolls:
    """Checks ``batch`` (module docstring; a bad field raises ValueError
    naming it), lays it out time-major, and computes V(obs[t]) and each
    step's bootstrap with the current ``model``. ``reward_scale``
    multiplies the rewards (the value function then learns scaled returns)."""
    obs = _field(batch, "obs", np.float32, (None, None, None, model.obs_dim))
    b, t1, e, _ = obs.shape
    t = t1 - 1
    if t < 1:
        raise ValueError(f"batch['obs'] has {t1} steps; need T + 1 >= 2")
    if model.discrete:
        action = _field(batch, "action", np.int64, (b, t, e))
    else:
        action = _field(batch, "action", np.float32, (b, t, e, model.action_dim))
    logprob = _field(batch, "logprob", np.float32, (b, t, e))
    reward = _field(batch, "reward", np.float32, (b, t, e))
    terminated = _field(batch, "terminated", np.bool_, (b, t, e))
    truncated = _field(batch, "truncated", np.bool_, (b, t, e))
    final_obs = _field(batch, "final_obs", np.float32, (b, t, e, model.obs_dim))
    weight = _field(batch, "weight", np.float32, (b,))
    if not np.all(np.isfinite(weight)) or np.any(weight < 0):
        raise ValueError(f"batch['weight'] must be finite and >= 0, got {weight}")

    n = b * e
    obs_t = _time_major(obs)                                # [T+1, N, D]
    term_t = _time_major(terminated)
    trunc_t = _time_major(truncated) & ~term_t
    with torch.no_grad():
        values = model.value(obs_t)                         # [T+1, N]
        next_value = values[1:].clone()
        next_value[term_t] = 0.0
        if bool(trunc_t.any()):
            next_value[trunc_t] = model.value(_time_major(final_obs)[trunc_t])
    item_weight = torch.from_numpy(weight)
    return Unrolls(
        obs=obs_t[:t], action=_time_major(action), logprob=_time_major(logprob),
        reward=_time_major(reward) * float(reward_scale), terminated=term_t.float(),
        done=(term_t | trunc_t).float(),
        weight=item_weight.repeat_interleave(e).expand(t, n),
        value=values[:t], next_value=next_value, num_items=b, total_weight=float(item_weight.sum()))
