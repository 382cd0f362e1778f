"""Losses for RL on language models, written out beside the code (docs/rl.md,
"Language models").

Shapes: a batch of ``B`` responses padded to ``T`` tokens; ``mask`` (B, T) is
1 on the policy's own tokens (0 on padding and on tokens a tool or the
environment wrote); ``logp`` / ``old_logp`` / ``ref_logp`` (B, T) are per-token
log-probabilities of the sampled tokens under the policy being trained, the
policy that generated them (the engine's behaviour log-probs) and a frozen
reference; ``adv`` (B,) is one advantage per response.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
KL_ESTIMATORS = ("k1", "k2", "k3")


def _check_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-d (one per response), got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    return rewards.view(-1, group_size).to(torch.float64)


def grpo_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True,
                    eps: float = 1e-4) -> torch.Tensor:
    """GRPO (Shao et al. 2024, DeepSeekMath): responses come in consecutive
    groups of ``group_size`` answers to one prompt;

        A_i = (r_i - mean_g(r)) / (std_g(r) + eps)     (scale=True)
        A_i =  r_i - mean_g(r)                          (scale=False: Dr. GRPO,
                                                          Liu et al. 2025)

    std_g is the sample standard deviation (n - 1), as TRL computes it. A
    group whose rewards are all equal gets advantage 0 for every answer."""
    g = _check_groups(rewards, group_size)
    centred = g - g.mean(dim=1, keepdim=True)
    if scale:
        std = g.std(dim=1, keepdim=True, unbiased=True) if group_size > 1 else torch.zeros_like(g[:, :1])
        centred = torch.where(std > 0, centred / (std + eps), torch.zeros_like(centred))
    return centred.reshape(-1).to(rewards.dtype if rewards.is_floating_point() else torch.float32)


def rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO (Ahmadian et al. 2024): each answer's baseline is the mean reward
    of the other answers to the same prompt;

        A_i = r_i - (sum_g(r) - r_i) / (k - 1)  =  k / (k - 1) * (r_i - mean_g(r))

    Needs ``group_size >= 2``."""
    if group_size < 2:
        raise ValueError("RLOO needs group_size >= 2 (a leave-one-out baseline)")
    g = _check_groups(rewards, group_size)
    baseline = (g.sum(dim=1, keepdim=True) - g) / (group_size - 1)
    return (g - baseline).reshape(-1).to(rewards.dtype if rewards.is_floating_point() else torch.float32)


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimates of KL(pi || pi_ref) from samples of pi (Schulman,
    "Approximating KL divergence", 2020), with log r = ref_logp - logp:

        k1 = -log r                 (unbiased, high variance, can be negative)
        k2 = (log r)^2 / 2          (biased, low variance)
        k3 = (r - 1) - log r        (unbiased, >= 0; GRPO's choice)
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {', '.join(KL_ESTIMATORS)}")
    log_r = ref_logp - logp
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r * log_r
    return torch.expm1(log_r) - log_r


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean",
              max_tokens: Optional[int] = None) -> torch.Tensor:
    """Reduces a (B, T) per-token loss to a scalar over the masked tokens:

        token-mean          sum_{i,t} m l / sum_{i,t} m        (DAPO; long answers weigh more)
        seq-mean-token-mean mean_i ( sum_t m l / sum_t m )      (GRPO's original)
        seq-mean-token-sum  mean_i ( sum_t m l ) / T_max        (Dr. GRPO: a constant
                                                                  denominator, no length bias)

    ``max_tokens`` is Dr. GRPO's constant (default: T, the padded length). A
    sequence with no masked token adds 0 to its mean (and still counts)."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {mode!r}; choose one of {', '.join(AGGREGATIONS)}")
    m = mask.to(per_token.dtype)
    if mode == "token-mean":
        return (per_token * m).sum() / m.sum().clamp(min=1)
    if mode == "seq-mean-token-mean":
        return ((per_token * m).sum(dim=1) / m.sum(dim=1).clamp(min=1)).mean()
    denom = float(max_tokens if max_tokens is not None else per_token.shape[1])
    if denom <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    return ((per_token * m).sum(dim=1) / denom).mean()


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                clip_low: float = 0.2, clip_high: Optional[float] = None, aggregation: str = "token-mean",
                ref_logp: Optional[torch.Tensor] = None, kl_coef: float = 0.0, kl_estimator: str = "k3",
                sequence_ratio: bool = False, max_tokens: Optional[int] = None,
                token_weights: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, Dict[str, float]]:
    """The clipped surrogate of PPO applied per token with one advantage per
    response (GRPO), and its variants:

        rho_t   = exp(logp_t - old_logp_t)
        l_t     = -min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A) + beta * KL_t
        loss    = aggregate(l, mask)

    ``clip_high`` defaults to ``clip_low`` (DAPO's clip-higher sets it larger,
    e.g. 0.28, Yu et al. 2025). With ``sequence_ratio`` (GSPO, Zheng et al.
    2025) every token of response i uses the sequence's length-normalised ratio

        s_i = exp( sum_t m (logp_t - old_logp_t) / sum_t m )

    in place of rho_t (the gradient still flows through every token's logp).
    ``kl_coef`` > 0 adds beta * KL(pi || ref) per token with the chosen
    estimator (needs ``ref_logp``). ``token_weights`` (detached, (B, T))
    multiply each token's surrogate: truncated importance-sampling weights
    w_t (:func:`truncated_is_weights`) turn it into the decoupled objective
    of stale or low-precision behaviour, with ``old_logp`` the proximal
    (learner's pre-update) policy. Returns the loss and metrics: clip fractions
    (low / high side), ratio mean / max, KL mean."""
    if not (0 <= clip_low < 1):
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    clip_high = clip_low if clip_high is None else clip_high
    if clip_high < 0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")
    if logp.shape != old_logp.shape or logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(f"logp, old_logp and mask must share a (B, T) shape, got {tuple(logp.shape)}, "
                         f"{tuple(old_logp.shape)}, {tuple(mask.shape)}")
    if adv.shape != (logp.shape[0],) and adv.shape != logp.shape:
        raise ValueError(f"adv must hold one advantage per response ({logp.shape[0]}) or one per token "
                         f"{tuple(logp.shape)} (PPO), got {tuple(adv.shape)}")
    m = mask.to(logp.dtype)
    log_ratio = (logp - old_logp) * m
    if sequence_ratio:
        # One ratio per response; its gradient reaches every token's logp / |y_i|.
        seq = log_ratio.sum(dim=1) / m.sum(dim=1).clamp(min=1)
        log_ratio = seq[:, None].expand_as(logp)
    ratio = torch.exp(log_ratio)
    a = (adv[:, None] if adv.dim() == 1 else adv).to(logp.dtype)
    unclipped = ratio * a
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * a
    per_token = -torch.minimum(unclipped, clipped)
    if token_weights is not None:
        if token_weights.shape != logp.shape:
            raise ValueError(f"token_weights must have logp's shape {tuple(logp.shape)}, got {tuple(token_weights.shape)}")
        per_token = per_token * token_weights.detach().to(logp.dtype)
    kl_mean = 0.0
    if kl_coef:
        if ref_logp is None:
            raise ValueError("kl_coef > 0 needs ref_logp (the reference policy's log-probs)")
        kl = kl_estimate(logp, ref_logp, kl_estimator)
        per_token = per_token + kl_coef * kl
        kl_mean = float((kl.detach() * m).sum() / m.sum().clamp(min=1))
    loss = aggregate(per_token, mask, aggregation, max_tokens)
    with torch.no_grad():
        n = m.sum().clamp(min=1)
        low = ((ratio < 1 - clip_low) & (a < 0)).to(m.dtype) * m
        high = ((ratio > 1 + clip_high) & (a > 0)).to(m.dtype) * m
        r_masked = ratio.detach() * m
        metrics = {
            "clip_frac_low": float(low.sum() / n),
            "clip_frac_high": float(high.sum() / n),
            "ratio_mean": float(r_masked.sum() / n),
            "ratio_max": float(r_masked.max()) if m.any() else 1.0,
            "kl": kl_mean,
        }
    return loss, metrics


def overlong_penalty(lengths: torch.Tensor, max_tokens: int, buffer: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025), added to the reward:
    0 up to ``max_tokens - buffer`` tokens, then falling linearly to -1 at
    ``max_tokens`` (and -1 beyond):

        p(L) = 0                               L <= L_max - L_buf
               (L_max - L_buf - L) / L_buf     L_max - L_buf < L <= L_max
               -1                              L > L_max
    """
    if buffer < 1 or buffer > max_tokens:
        raise ValueError(f"buffer must be in [1, max_tokens={max_tokens}], got {buffer}")
    start = max_tokens - buffer
    L = lengths.to(torch.float64)
    p = ((start - L) / buffer).clamp(min=-1.0, max=0.0)
    return p.to(torch.float32)


def informative_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dynamic sampling (DAPO): a boolean per group, False when every answer in
    it got the same reward (its GRPO advantages are all 0: no signal). The
    caller drops those groups and refills the batch, counting them."""
    g = _check_groups(rewards, group_size)
    return (g.max(dim=1).values - g.min(dim=1).values) > 0


def mismatch(engine_logp: torch.Tensor, learner_logp: torch.Tensor, mask: torch.Tensor) -> Dict[str, float]:
    """How far the engine's behaviour log-probs are from the learner's
    recomputation of the same tokens before an update: the KL estimate k3 of
    KL(engine || learner) per token and the largest ratio learner/engine. ~0
    and 1 with F32 weights on both sides (the engine equals PyTorch within
    1e-4); larger with BF16 / int8 engines."""
    m = mask.to(learner_logp.dtype)
    n = m.sum().clamp(min=1)
    kl = kl_estimate(engine_logp, learner_logp, "k3")
    ratio = torch.exp((learner_logp - engine_logp) * m)
    return {"mismatch_kl": float((kl * m).sum() / n), "mismatch_ratio_max": float((ratio * m).max()) if m.any() else 1.0}


def truncated_is_weights(engine_logp: torch.Tensor, learner_old_logp: torch.Tensor, cap: float = 2.0) -> torch.Tensor:
    """Truncated importance sampling for an engine that is not the learner's
    exact policy (BF16 / int8 weights, or a stale version):

        w_t = min( exp(old_logp_t - engine_logp_t), C )

    multiplies each token's loss (detached). ``cap`` C >= 1."""
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")
    return torch.exp(learner_old_logp - engine_logp).clamp(max=cap).detach()


def token_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
              lam: float = 0.95) -> Tuple[torch.Tensor, torch.Tensor]:
    """PPO for language models: generalised advantage estimation over the
    tokens of each response (Schulman et al. 2016), with per-token rewards
    (usually the verifier's reward on the last token) and a value per token:

        delta_t = r_t + gamma * V_{t+1} - V_t      (V past the response's last token = 0)
        A_t     = delta_t + gamma * lam * A_{t+1}
        R_t     = A_t + V_t                          (the value target)

    ``mask`` (B, T) marks the response's tokens, which sit at the start of
    each row (padding after). Returns (advantages, returns), 0 on padding."""
    if not (0 <= gamma <= 1 and 0 <= lam <= 1):
        raise ValueError(f"gamma and lam must be in [0, 1], got {gamma}, {lam}")
    if rewards.shape != values.shape or rewards.shape != mask.shape or rewards.dim() != 2:
        raise ValueError(f"rewards, values and mask must share a (B, T) shape, got {tuple(rewards.shape)}, "
                         f"{tuple(values.shape)}, {tuple(mask.shape)}")
    m = mask.to(values.dtype)
    v = values.detach() * m
    r = rewards.to(values.dtype) * m
    adv = torch.zeros_like(v)
    next_v = torch.zeros(v.shape[0], dtype=v.dtype)
    next_a = torch.zeros(v.shape[0], dtype=v.dtype)
    for t in range(v.shape[1] - 1, -1, -1):
        delta = r[:, t] + gamma * next_v - v[:, t]
        a = (delta + gamma * lam * next_a) * m[:, t]
        adv[:, t] = a
        # Padding passes nothing back: the token before it is the last one.
        next_v = v[:, t] * m[:, t]
        next_a = a
    return adv, (adv + v) * m


def value_loss(values: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor, mask: torch.Tensor,
               clip: Optional[float] = 0.2) -> torch.Tensor:
    """PPO's clipped value loss, token-mean over the mask:

        V_clip = V_old + clip(V - V_old, -c, c)
        l_t    = 0.5 * max((V - R)^2, (V_clip - R)^2)      (c = None: 0.5 (V - R)^2)
    """
    err = (values - returns) ** 2
    if clip is not None:
        if clip <= 0:
            raise ValueError(f"clip must be > 0 or None, got {clip}")
        clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        err = torch.maximum(err, (clipped - returns) ** 2)
    return aggregate(0.5 * err, mask, "token-mean")
