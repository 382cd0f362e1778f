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
from typing import Dict, List, Optional, Sequence, Tuple

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
                 tis_cap: Optional[float] = None, temperature: float = 1.0):
        if algorithm not in GRPOLearner.ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(GRPOLearner.ALGORITHMS)}")
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
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        # The policy is softmax(logits / T), as the engine samples it (its
        # behaviour log-probs are under the same T).
        self.temperature = float(temperature)
        if ref_model is not None:
            ref_model.requires_grad_(False)

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        if self.algorithm == "rloo":
            return losses.rloo_advantages(rewards, self.group_size)
        return losses.grpo_advantages(rewards, self.group_size, scale=self.algorithm == "grpo")

    def _forward(self, rollouts: Sequence[Rollout], model: Optional[torch.nn.Module] = None,
                 value_head: Optional[torch.nn.Module] = None
                 ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The model's log-prob of every response token, (B, T) with T the
        longest response and 0 past each response's end (one packed forward
        pass per ``token_budget`` of tokens); with ``value_head`` also the
        value of each state a response token was chosen in, (B, T)."""
        seqs = [list(r.prompt) + list(r.response) for r in rollouts]
        # Attention within a packed row is a dense (L x L) masked product, so
        # a row costs O(L^2): rows of at most twice the longest sequence keep
        # that small when sequences are short (the budget still caps them).
        budget = min(self.token_budget, 2 * max(len(s) for s in seqs))
        batch = packing.pack(seqs, [[True] * len(s) for s in seqs], budget)
        self.last_packing_efficiency = batch.efficiency
        # The packer's positions restart at 0 in every sequence and are 0 on
        # padding (positions derived from segment ids would run on through it).
        out = (model or self.model)(batch.input_ids, segment_ids=batch.segment_ids,
                                    position_ids=batch.position_ids, return_hidden=value_head is not None)
        logits, hidden = out if value_head is not None else (out, None)
        # Response token j of a sequence is predicted at position (start of
        # the response + j - 1): gather them all in one indexing operation.
        rows, cols, targets, out_b, out_t = [], [], [], [], []
        for b, (r, (row, at, n)) in enumerate(zip(rollouts, batch.places)):
            p, m = len(r.prompt), len(r.response)
            rows.extend([row] * m)
            cols.extend(range(at + p - 1, at + p - 1 + m))
            targets.extend(r.response)
            out_b.extend([b] * m)
            out_t.extend(range(m))
        rows_t, cols_t = torch.as_tensor(rows), torch.as_tensor(cols)
        at = (torch.as_tensor(out_b), torch.as_tensor(out_t))
        t = max(len(r.response) for r in rollouts)
        picked = torch.log_softmax(logits[rows_t, cols_t].float() / self.temperature, dim=-1)
        logp = torch.zeros(len(rollouts), t).index_put(at, picked.gather(1, torch.as_tensor(targets)[:, None])[:, 0])
        values = None
        if value_head is not None:
            v = value_head(hidden[rows_t, cols_t].float())[:, 0]
            values = torch.zeros(len(rollouts), t).index_put(at, v)
        return logp, values

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
            rewards = torch.tensor([float(r.reward) for r in keep])
        # Data parallel (torch.distributed initialised, world > 1): every rank
        # takes this step on its own groups; the loss is normalised by the
        # global token (or sequence) count and the gradients are summed over
        # ranks, so N ranks take the step one process would take on the union.
        world = _world_size()
        t = max((len(r.response) for r in keep), default=1)
        b = len(keep)
        n_tok = float(sum(sum(r.loss_mask) if r.loss_mask is not None else len(r.response) for r in keep))
        counts = torch.tensor([n_tok, float(b)], dtype=torch.float64)
        t_max = torch.tensor([t], dtype=torch.int64)
        if world > 1:
            torch.distributed.all_reduce(counts)
            torch.distributed.all_reduce(t_max, op=torch.distributed.ReduceOp.MAX)
        if counts[1] == 0:  # every group on every rank was uniform
            metrics.update(loss=0.0, updated=0.0)
            return metrics
        scale = (n_tok / float(counts[0]) if self.aggregation == "token-mean" else b / float(counts[1])) \
            if world > 1 else 1.0
        if not keep:  # this rank has nothing, the others do: take part with zero gradients
            self.optimizer.zero_grad(set_to_none=False)
            for p in self._params():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            self._finish_step(metrics, world)
            metrics.update(loss=0.0, updated=1.0, tokens=0.0)
            return metrics
        adv = self.advantages(rewards).float()
        old, mask = _behaviour_and_mask(keep, t)
        self.model.train()
        logp, _ = self._forward(keep)
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
                ref, _ = self._forward(keep, self.ref_model)
        loss, m = losses.policy_loss(logp, old, adv, mask, clip_low=self.clip_low, clip_high=self.clip_high,
                                     aggregation=self.aggregation, sequence_ratio=self.sequence_ratio,
                                     max_tokens=int(t_max), ref_logp=ref, kl_coef=self.kl_coef,
                                     kl_estimator=self.kl_estimator, token_weights=weights)
        with torch.no_grad():
            # The full distributions are not kept by _forward; -mean log p of
            # the sampled tokens estimates the entropy.
            metrics["entropy"] = float(-(logp.detach() * mask).sum() / mask.sum().clamp(min=1))
        self.optimizer.zero_grad(set_to_none=False)
        (loss * scale).backward()
        self._finish_step(metrics, world)
        metrics.update(m)
        metrics.update(loss=float(loss.detach()), updated=1.0, tokens=float(mask.sum()),
                       packing_efficiency=float(self.last_packing_efficiency))
        return metrics

    def _params(self) -> List[torch.nn.Parameter]:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def _finish_step(self, metrics: Dict[str, float], world: int) -> None:
        """Sums the gradients over ranks (one flat all-reduce), clips, steps."""
        params = self._params()
        if world > 1:
            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            torch.distributed.all_reduce(flat)
            at = 0
            for p in params:
                p.grad.copy_(flat[at:at + p.numel()].view_as(p))
                at += p.numel()
        if self.max_grad_norm:
            metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm))
        self.optimizer.step()

    def weights(self) -> Dict[str, np.ndarray]:
        """The model's tensors in Hugging Face names as float32 arrays, for
        the weight service or ``Engine.update_weights_from_arrays`` (a tied
        output matrix is sent once)."""
        state = {k: v.detach().float().contiguous().numpy().copy() for k, v in self.model.state_dict().items()}
        if getattr(self.model.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)
        return state


def _behaviour_and_mask(rollouts: Sequence[Rollout], t: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The engine's log-probs and the loss mask, (B, T), 0 past each response."""
    old = torch.zeros(len(rollouts), t)
    mask = torch.zeros(len(rollouts), t)
    for i, r in enumerate(rollouts):
        n = len(r.response)
        old[i, :n] = torch.as_tensor(list(r.behaviour_logprobs), dtype=torch.float32)
        mask[i, :n] = torch.as_tensor(list(r.loss_mask if r.loss_mask is not None else [True] * n),
                                      dtype=torch.float32)
    return old, mask


def _world_size() -> int:
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class PPOLearner(GRPOLearner):
    """PPO over tokens with a value head (a linear map of the model's final
    hidden state to a scalar): the verifier's reward on each response's last
    token, token-level GAE (``gamma``, ``lam``; losses.token_gae), advantages
    whitened over the batch's tokens, the clipped surrogate per token and
    PPO's clipped value loss (losses.value_loss), ``epochs`` passes over each
    batch. The optimizer must hold the value head's parameters too; the
    head is not part of :meth:`weights` (the engine does not need it).

        loss = policy_loss(logp, old_logp, A_t) + value_coef * value_loss(V, R, V_old)
    """

    ALGORITHMS = ("ppo",)

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, value_head: torch.nn.Module,
                 group_size: int, gamma: float = 1.0, lam: float = 0.95, value_coef: float = 0.5,
                 value_clip: Optional[float] = 0.2, epochs: int = 2, **kw):
        kw.setdefault("drop_uninformative", False)
        super().__init__(model, optimizer, group_size, algorithm="grpo", **kw)
        self.algorithm = "ppo"
        if epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {epochs}")
        self.value_head, self.gamma, self.lam = value_head, gamma, lam
        self.value_coef, self.value_clip, self.epochs = value_coef, value_clip, epochs

    def step(self, rollouts: Sequence[Rollout], correct: Optional[Sequence[bool]] = None) -> Dict[str, float]:
        if not rollouts:
            raise ValueError("no rollouts")
        if _world_size() > 1:
            raise NotImplementedError("PPOLearner runs in one process (its advantage whitening is per batch); "
                                      "data-parallel learners are GRPO / Dr. GRPO / RLOO")
        rollouts = list(rollouts)
        rewards = torch.tensor([float(r.reward) for r in rollouts])
        metrics: Dict[str, float] = {"reward_mean": float(rewards.mean()),
                                     "reward_std": float(rewards.std()) if len(rollouts) > 1 else 0.0}
        t = max(len(r.response) for r in rollouts)
        old, mask = _behaviour_and_mask(rollouts, t)
        token_rewards = torch.zeros(len(rollouts), t)
        for i, r in enumerate(rollouts):
            token_rewards[i, len(r.response) - 1] = float(r.reward)
        params = self._params()
        self.model.train()
        for epoch in range(self.epochs):
            logp, values = self._forward(rollouts, value_head=self.value_head)
            if epoch == 0:
                metrics.update(losses.mismatch(old, logp.detach(), mask))
                old_values = values.detach()
                adv, ret = losses.token_gae(token_rewards, old_values, mask, self.gamma, self.lam)
                n_tok = mask.sum().clamp(min=1)
                mean = (adv * mask).sum() / n_tok
                std = (((adv - mean) * mask) ** 2).sum().div(n_tok).sqrt()
                adv = (adv - mean) / (std + 1e-8) * mask
            pl, m = losses.policy_loss(logp, old, adv, mask, clip_low=self.clip_low, clip_high=self.clip_high,
                                       aggregation="token-mean")
            vl = losses.value_loss(values, ret, old_values, mask, self.value_clip)
            loss = pl + self.value_coef * vl
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.max_grad_norm:
                metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm))
            self.optimizer.step()
        with torch.no_grad():
            metrics["entropy"] = float(-(logp.detach() * mask).sum() / mask.sum().clamp(min=1))
            metrics["value_mean"] = float((old_values * mask).sum() / mask.sum().clamp(min=1))
        metrics.update(m)
        metrics.update(loss=float(loss.detach()), policy_loss=float(pl.detach()), value_loss=float(vl.detach()),
                       updated=1.0, tokens=float(mask.sum()) * self.epochs,
                       packing_efficiency=float(self.last_packing_efficiency))
        return metrics
