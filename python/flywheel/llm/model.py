"""One decoder-only transformer definition (PyTorch), used by the learner and
mirrored by the rollout engine. Parameter names are Hugging Face's
``LlamaForCausalLM`` state-dict names, so checkpoints move between the two
without renaming. docs/llm.md writes each block out as a formula.

    x_0 = E[tokens]
    for each layer l:
        h   = x + W_o · Attn(RoPE(W_q · n(x)), RoPE(W_k · n(x)), W_v · n(x))   n = RMSNorm
        x'  = h + W_down · (silu(W_gate · n(h)) ⊙ (W_up · n(h)))
    logits = W_out · RMSNorm(x_L)        (W_out = E with tie_word_embeddings)

RMSNorm(x) = w ⊙ x / sqrt(mean(x²) + eps), computed in float32.
RoPE rotates dimension pairs (i, i + d/2) of each head by position · θ^(-2i/d)
(Hugging Face's "rotate half" layout). Attention is causal; grouped-query
heads share key/value heads (num_attention_heads / num_key_value_heads each).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn
import torch.nn.functional as F

from .config import LlamaConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def rotary_tables(config: LlamaConfig, positions: torch.Tensor, dtype: torch.dtype):
    """cos and sin of shape (*positions.shape, head_dim) for the given
    integer positions."""
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    freqs = positions.float()[..., None] * inv_freq.to(positions.device)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (batch, heads, seq, head_dim); cos/sin: (batch, seq, head_dim)."""
    return x * cos[:, None] + _rotate_half(x) * sin[:, None]


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * c.head_dim, bias=c.attention_bias)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=c.attention_bias)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=c.attention_bias)
        self.o_proj = nn.Linear(c.num_attention_heads * c.head_dim, c.hidden_size, bias=c.attention_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: Optional[torch.Tensor]) -> torch.Tensor:
        b, s, _ = x.shape
        c = self.c
        q = self.q_proj(x).view(b, s, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        groups = c.num_attention_heads // c.num_key_value_heads
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        out = (probs @ v).transpose(1, 2).reshape(b, s, c.num_attention_heads * c.head_dim)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class _Body(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class Transformer(nn.Module):
    """Causal language model. ``forward(input_ids, attention_mask=None,
    position_ids=None, segment_ids=None)`` returns logits (batch, seq, vocab).

    ``attention_mask`` (batch, seq; 1 = token, 0 = padding) masks padded
    keys; with it and no ``position_ids``, positions count real tokens only,
    so left-padded prompts get the positions they would have alone.
    ``segment_ids`` (batch, seq) packs several sequences in a row
    (:mod:`flywheel.rl.lm.packing`): a token attends only to earlier tokens
    of its own segment (-1 marks padding), and without ``position_ids`` each
    segment's positions start at 0, so a packed sequence computes exactly
    what it would alone."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config.validate()
        self.model = _Body(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                position_ids: Optional[torch.Tensor] = None,
                segment_ids: Optional[torch.Tensor] = None, return_hidden: bool = False):
        """Logits (batch, seq, vocab); with ``return_hidden`` also the final
        normalised hidden states (batch, seq, hidden), e.g. for a value head."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, seq), got shape {tuple(input_ids.shape)}")
        b, s = input_ids.shape
        if s > self.config.max_position_embeddings and segment_ids is None:
            raise ValueError(f"sequence of {s} tokens exceeds max_position_embeddings "
                             f"({self.config.max_position_embeddings})")
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= self.config.vocab_size):
            raise ValueError(f"token ids must be in [0, {self.config.vocab_size}), got "
                             f"[{int(input_ids.min())}, {int(input_ids.max())}]")
        x = self.model.embed_tokens(input_ids)
        if segment_ids is not None and segment_ids.shape != input_ids.shape:
            raise ValueError(f"segment_ids must have input_ids' shape {tuple(input_ids.shape)}, "
                             f"got {tuple(segment_ids.shape)}")
        if position_ids is None and segment_ids is not None:
            # Position within the segment: index minus the segment's first index.
            idx = torch.arange(s, device=input_ids.device).expand(b, s)
            starts = torch.ones_like(segment_ids, dtype=torch.bool)
            starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
            first = torch.where(starts, idx, torch.zeros_like(idx)).cummax(dim=1).values
            position_ids = idx - first
        if position_ids is None:
            if attention_mask is not None:
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
            else:
                position_ids = torch.arange(s, device=input_ids.device).expand(b, s)
        if segment_ids is not None and position_ids.numel() and int(position_ids.max()) >= self.config.max_position_embeddings:
            raise ValueError(f"a packed sequence of {int(position_ids.max()) + 1} tokens exceeds "
                             f"max_position_embeddings ({self.config.max_position_embeddings})")
        cos, sin = rotary_tables(self.config, position_ids, x.dtype)
        causal = torch.ones(s, s, dtype=torch.bool, device=input_ids.device).tril()
        mask = causal[None, None].expand(b, 1, s, s)
        if attention_mask is not None:
            mask = mask & attention_mask.bool()[:, None, None, :]
        if segment_ids is not None:
            same = segment_ids[:, :, None] == segment_ids[:, None, :]
            # Padding (-1) attends to itself only, so its rows stay finite.
            mask = mask & (same & (segment_ids[:, None, :] >= 0) | torch.eye(s, dtype=torch.bool,
                                                                             device=input_ids.device))[:, None]
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        h = self.model.norm(x)
        return (self.lm_head(h), h) if return_hidden else self.lm_head(h)
