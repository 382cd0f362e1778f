"""The language-model learner's training step behind one interface (docs/rl.md,
"Language models"): a batch of rollouts in; metrics and new weights out. The
rollouts come from the engine (prompt ids, response ids, the behaviour
log-prob of every response token, a reward, a group id); nothing here depends
on how they were generated, so a JAX learner can implement the same step.

    learner = GRPOLearner(model, torch.optim.AdamW(model.parameters(), 1e-3), group_size=8)
    metrics = learner.step(rollouts)          # one update
    engine.update_weights_from_arrays(learner.weights(), version)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from . import losses, packing


@dataclass
class Rollout:
    prompt: Sequence[int]
    response: Sequence[int]
    behaviour_logprobs: Sequence[float]  # the engine's, one per response token
    reward: float
    group: int                            # rollouts of one prompt share it, and sit together
    loss_mask: Optional[Sequence[bool]] = None  # per response token; default all True
    versions: Sequence[int] = field(default_factory=list)


class GRPOLearner:
    """GRPO / Dr. GRPO / RLOO / GSPO updates of a :class:`flywheel.llm.Transformer`.

    ``algorithm``: "grpo" (std-normalised group advantages), "dr_grpo"
    (not normalised, seq-mean-token-sum), "rloo" (leave-one-out baseline).
    The batch is packed under ``token_budget`` tokens per row. ``step``
    checks the engine/learner mismatch before updating (the learner's
    recomputation of the behaviour log-probs)."""

    ALGORITHMS = ("grpo", "dr_grpo", "rloo")

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, group_size: int,
                 algorithm: str = "grpo", clip_low: float = 0.2, clip_high: Optional[float] = None,
                 aggregation: Optional[str] = None, sequence_ratio: bool = False, token_budget: int = 4096,
                 max_grad_norm: float = 1.0, drop_uninformative: bool = True):
        if algorithm not in self.ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(self.ALGORITHMS)}")
        if group_size < 2:
            raise ValueError(f"group_size must be >= 2 (advantages compare answers to one prompt), got {group_size}")
        self.model, self.optimizer, self.group_size = model, optimizer, group_size
        self.algorithm, self.clip_low, self.clip_high = algorithm, clip_low, clip_high
        self.aggregation = aggregation or ("seq-mean-token-sum" if algorithm == "dr_grpo" else "token-mean")
        self.sequence_ratio, self.token_budget = sequence_ratio, token_budget
        self.max_grad_norm, self.drop_uninformative = max_grad_norm, drop_uninformative

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        if self.algorithm == "rloo":
            return losses.rloo_advantages(rewards, self.group_size)
        return losses.grpo_advantages(rewards, self.group_size, scale=self.algorithm == "grpo")

    def _token_logps(self, rollouts: List[Rollout]) -> List[torch.Tensor]:
        """The model's log-prob of every response token of every rollout (one
        packed forward pass per ``token_budget`` of tokens)."""
        seqs = [list(r.prompt) + list(r.response) for r in rollouts]
        batch = packing.pack(seqs, [[True] * len(s) for s in seqs], self.token_budget)
        logits = self.model(batch.input_ids, segment_ids=batch.segment_ids)
        logp_all = torch.log_softmax(logits.float(), dim=-1)
        out = []
        for r, (row, at, n) in zip(rollouts, batch.places):
            p = len(r.prompt)
            # Token j of the sequence is predicted at position j - 1.
            targets = torch.as_tensor(list(r.response), dtype=torch.long)
            pred = logp_all[row, at + p - 1: at + n - 1]
            out.append(pred.gather(1, targets[:, None])[:, 0])
        return out

    def step(self, rollouts: Sequence[Rollout]) -> Dict[str, float]:
        if len(rollouts) == 0 or len(rollouts) % self.group_size:
            raise ValueError(f"{len(rollouts)} rollouts do not split into groups of {self.group_size}")
        for i in range(0, len(rollouts), self.group_size):
            if len({r.group for r in rollouts[i:i + self.group_size]}) != 1:
                raise ValueError(f"rollouts {i}..{i + self.group_size - 1} are not one group (groups sit together)")
        rewards = torch.tensor([float(r.reward) for r in rollouts])
        metrics: Dict[str, float] = {"reward_mean": float(rewards.mean()), "reward_std": float(rewards.std())}
        keep = list(rollouts)
        if self.drop_uninformative:
            informative = losses.informative_groups(rewards, self.group_size)
            metrics["groups_dropped"] = float((~informative).sum())
            keep = [r for g, ok in enumerate(informative.tolist()) if ok
                    for r in rollouts[g * self.group_size:(g + 1) * self.group_size]]
            if not keep:
                metrics.update(loss=0.0, updated=0.0)
                return metrics
            rewards = torch.tensor([float(r.reward) for r in keep])
        adv = self.advantages(rewards).float()
        t = max(len(r.response) for r in keep)
        b = len(keep)
        old = torch.zeros(b, t)
        mask = torch.zeros(b, t)
        for i, r in enumerate(keep):
            n = len(r.response)
            old[i, :n] = torch.as_tensor(list(r.behaviour_logprobs), dtype=torch.float32)
            lm = r.loss_mask if r.loss_mask is not None else [True] * n
            mask[i, :n] = torch.as_tensor(list(lm), dtype=torch.float32)
        self.model.train()
        per_seq = self._token_logps(keep)
        logp = torch.stack([torch.nn.functional.pad(x, (0, t - x.numel())) for x in per_seq])
        metrics.update(losses.mismatch(old, logp.detach(), mask))
        loss, m = losses.policy_loss(logp, old, adv, mask, clip_low=self.clip_low, clip_high=self.clip_high,
                                     aggregation=self.aggregation, sequence_ratio=self.sequence_ratio,
                                     max_tokens=t)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm:
            metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm))
        self.optimizer.step()
        metrics.update(m)
        metrics.update(loss=float(loss.detach()), updated=1.0, tokens=float(mask.sum()))
        return metrics

    def weights(self) -> Dict[str, np.ndarray]:
        """The model's tensors in Hugging Face names as float32 arrays, for
        the weight service or ``Engine.update_weights_from_arrays`` (a tied
        output matrix is sent once)."""
        state = {k: v.detach().float().contiguous().numpy().copy() for k, v in self.model.state_dict().items()}
        if getattr(self.model.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)
        return state
