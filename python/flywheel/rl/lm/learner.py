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
                 max_grad_norm: float = 1.0, drop_uninformative: bool = True,
                 ref_model: Optional[torch.nn.Module] = None, kl_coef: float = 0.0, kl_estimator: str = "k3",
                 tis_cap: Optional[float] = None):
        if algorithm not in self.ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(self.ALGORITHMS)}")
        if group_size < 2:
            raise ValueError(f"group_size must be >= 2 (advantages compare answers to one prompt), got {group_size}")
        self.model, self.optimizer, self.group_size = model, optimizer, group_size
        self.algorithm, self.clip_low, self.clip_high = algorithm, clip_low, clip_high
        self.aggregation = aggregation or ("seq-mean-token-sum" if algorithm == "dr_grpo" else "token-mean")
        self.sequence_ratio, self.token_budget = sequence_ratio, token_budget
        self.max_grad_norm, self.drop_uninformative = max_grad_norm, drop_uninformative
        if kl_coef and ref_model is None:
            raise ValueError("kl_coef > 0 needs ref_model (the frozen reference policy)")
        if tis_cap is not None and tis_cap < 1:
            raise ValueError(f"tis_cap must be >= 1, got {tis_cap}")
        self.ref_model, self.kl_coef, self.kl_estimator, self.tis_cap = ref_model, kl_coef, kl_estimator, tis_cap
        if ref_model is not None:
            ref_model.requires_grad_(False)

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        if self.algorithm == "rloo":
            return losses.rloo_advantages(rewards, self.group_size)
        return losses.grpo_advantages(rewards, self.group_size, scale=self.algorithm == "grpo")

    def _token_logps(self, rollouts: List[Rollout], model: Optional[torch.nn.Module] = None) -> List[torch.Tensor]:
        """The model's log-prob of every response token of every rollout (one
        packed forward pass per ``token_budget`` of tokens)."""
        seqs = [list(r.prompt) + list(r.response) for r in rollouts]
        batch = packing.pack(seqs, [[True] * len(s) for s in seqs], self.token_budget)
        self.last_packing_efficiency = batch.efficiency
        # The packer's positions restart at 0 in every sequence and are 0 on
        # padding (positions derived from segment ids would run on through it).
        logits = (model or self.model)(batch.input_ids, segment_ids=batch.segment_ids,
                                       position_ids=batch.position_ids)
        logp_all = torch.log_softmax(logits.float(), dim=-1)
        out = []
        for r, (row, at, n) in zip(rollouts, batch.places):
            p = len(r.prompt)
            # Token j of the sequence is predicted at position j - 1.
            targets = torch.as_tensor(list(r.response), dtype=torch.long)
            pred = logp_all[row, at + p - 1: at + n - 1]
            out.append(pred.gather(1, targets[:, None])[:, 0])
        return out

    def step(self, rollouts: Sequence[Rollout], correct: Optional[Sequence[bool]] = None) -> Dict[str, float]:
        """One update on ``rollouts`` (whole groups, each group's rollouts
        together). ``correct[i]`` marks rollouts generated by an older policy
        (async runs): their ratio is taken against the learner's own
        pre-update log-probs (the proximal policy) and each token is weighted
        by the truncated importance weight min(pi_prox / pi_behaviour, tis_cap)
        -- the decoupled PPO objective. With ``tis_cap`` set, every rollout
        is corrected so (low-precision engines)."""
        if correct is not None and len(correct) != len(rollouts):
            raise ValueError(f"correct has {len(correct)} flags for {len(rollouts)} rollouts")
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
            kept = [i for g, ok in enumerate(informative.tolist()) if ok
                    for i in range(g * self.group_size, (g + 1) * self.group_size)]
            keep = [rollouts[i] for i in kept]
            if correct is not None:
                correct = [correct[i] for i in kept]
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
        fix = torch.zeros(b, dtype=torch.bool)
        if self.tis_cap is not None:
            fix[:] = True
        elif correct is not None:
            fix = torch.as_tensor(list(correct), dtype=torch.bool)
        weights = None
        if bool(fix.any()):
            # Decoupled objective: ratio against the proximal (pre-update)
            # policy, each token weighted by min(pi_prox / pi_behaviour, C).
            prox = logp.detach()
            w = losses.truncated_is_weights(old, prox, self.tis_cap or 2.0)
            weights = torch.where(fix[:, None], w, torch.ones_like(w))
            old = torch.where(fix[:, None], prox, old)
            metrics["corrected"] = float(fix.sum())
            metrics["is_weight_mean"] = float((w * mask)[fix].sum() / mask[fix].sum().clamp(min=1))
        ref = None
        if self.kl_coef:
            with torch.no_grad():
                per_ref = self._token_logps(keep, self.ref_model)
            ref = torch.stack([torch.nn.functional.pad(x, (0, t - x.numel())) for x in per_ref])
        loss, m = losses.policy_loss(logp, old, adv, mask, clip_low=self.clip_low, clip_high=self.clip_high,
                                     aggregation=self.aggregation, sequence_ratio=self.sequence_ratio,
                                     max_tokens=t, ref_logp=ref, kl_coef=self.kl_coef,
                                     kl_estimator=self.kl_estimator, token_weights=weights)
        with torch.no_grad():
            # Entropy of the sampled tokens' distributions is not kept by
            # _token_logps; -mean log p of the sampled tokens estimates it.
            metrics["entropy"] = float(-(logp.detach() * mask).sum() / mask.sum().clamp(min=1))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm:
            metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm))
        self.optimizer.step()
        metrics.update(m)
        metrics.update(loss=float(loss.detach()), updated=1.0, tokens=float(mask.sum()),
                       packing_efficiency=float(self.last_packing_efficiency))
        return metrics

    def weights(self) -> Dict[str, np.ndarray]:
        """The model's tensors in Hugging Face names as float32 arrays, for
        the weight service or ``Engine.update_weights_from_arrays`` (a tied
        output matrix is sent once)."""
        state = {k: v.detach().float().contiguous().numpy().copy() for k, v in self.model.state_dict().items()}
        if getattr(self.model.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)
        return state
