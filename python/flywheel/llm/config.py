"""The decoder-only transformer's configuration, read from and written to
Hugging Face's ``config.json`` (``LlamaConfig`` field names), so a flywheel
checkpoint directory is one ``transformers`` loads and the other way round.
docs/llm.md."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Union


@dataclasses.dataclass
class LlamaConfig:
    """Llama-style decoder: token embedding, RMSNorm, rotary position
    embeddings, grouped-query attention, SwiGLU MLP, optional tied output
    embedding. Field names and defaults are Hugging Face's."""

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: Optional[int] = None  # None: = num_attention_heads (no grouping)
    head_dim: Optional[int] = None  # None: hidden_size // num_attention_heads
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    hidden_act: str = "silu"
    attention_bias: bool = False
    mlp_bias: bool = False
    bos_token_id: Optional[int] = 1
    eos_token_id: Optional[Union[int, List[int]]] = 2
    pad_token_id: Optional[int] = None
    torch_dtype: str = "float32"
    # Keys of config.json this class does not model, kept so that a load and
    # save round trip loses nothing (e.g. "transformers_version").
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)

    # Keys written by transformers that carry no meaning for the model here.
    _IGNORED = ("architectures", "model_type", "transformers_version", "use_cache", "initializer_range",
                "pretraining_tp", "attention_dropout", "dtype")

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None and self.num_attention_heads:
            self.head_dim = self.hidden_size // self.num_attention_heads

    # ------------------------------------------------------------ checks
    def validate(self) -> "LlamaConfig":
        """Raises ValueError naming the first field that makes no sense."""
        def need(ok: bool, field: str, why: str) -> None:
            if not ok:
                raise ValueError(f"config.json: {field} = {getattr(self, field)!r}: {why}")
        for f in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "max_position_embeddings"):
            v = getattr(self, f)
            need(isinstance(v, int) and not isinstance(v, bool) and v > 0, f, "must be a positive integer")
        need(self.num_attention_heads % self.num_key_value_heads == 0, "num_key_value_heads",
             f"must divide num_attention_heads ({self.num_attention_heads})")
        need(self.head_dim % 2 == 0, "head_dim", "must be even (rotary embeddings rotate pairs)")
        need(isinstance(self.rms_norm_eps, (int, float)) and 0 < self.rms_norm_eps < 1, "rms_norm_eps",
             "must be in (0, 1)")
        need(isinstance(self.rope_theta, (int, float)) and self.rope_theta > 1, "rope_theta", "must be > 1")
        need(self.hidden_act == "silu", "hidden_act", "only silu (SwiGLU) is supported")
        need(self.torch_dtype in ("float32", "bfloat16", "float16"), "torch_dtype",
             "must be float32, bfloat16 or float16")
        for f in ("bos_token_id", "pad_token_id"):
            v = getattr(self, f)
            need(v is None or (isinstance(v, int) and 0 <= v < self.vocab_size), f,
                 f"must be a token id below vocab_size ({self.vocab_size})")
        eos = self.eos_token_id if isinstance(self.eos_token_id, list) else [self.eos_token_id]
        need(all(e is None or (isinstance(e, int) and 0 <= e < self.vocab_size) for e in eos), "eos_token_id",
             f"must be token ids below vocab_size ({self.vocab_size})")
        scaling = self.extra.get("rope_scaling")
        if scaling not in (None, {}):
            raise ValueError(f"config.json: rope_scaling = {scaling!r}: not supported yet (plain rotary only)")
        return self

    @property
    def num_parameters(self) -> int:
        """Parameters of the model this configures."""
        h, q, kv = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        per_layer = h * q + 2 * h * kv + q * h + 3 * h * self.intermediate_size + 2 * h
        out = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_hidden_layers * per_layer + h + out

    # ------------------------------------------------------------ config.json
    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "LlamaConfig":
        if not isinstance(d, dict):
            raise ValueError(f"config.json: expected an object, got {type(d).__name__}")
        mt = d.get("model_type", "llama")
        if mt not in ("llama", "mistral", "qwen2"):
            raise ValueError(f"config.json: model_type = {mt!r}: only Llama-style decoders (llama) are supported")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in d.items() if k in names}
        if "torch_dtype" not in known and isinstance(d.get("dtype"), str):
            known["torch_dtype"] = d["dtype"]
        extra = {k: v for k, v in d.items() if k not in names and k not in cls._IGNORED}
        # transformers 5 writes the rotary settings as rope_parameters.
        rope = extra.pop("rope_parameters", None)
        if rope is not None:
            if not isinstance(rope, dict) or rope.get("rope_type", "default") != "default":
                raise ValueError(f"config.json: rope_parameters = {rope!r}: only plain rotary embeddings "
                                 f"(rope_type default) are supported")
            if "rope_theta" in rope:
                known["rope_theta"] = rope["rope_theta"]
        return cls(**known, extra=extra).validate()

    def to_dict(self) -> Dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        d.update(self.extra)
        # Both spellings: rope_theta (transformers 4) and rope_parameters (5).
        d["rope_parameters"] = {"rope_theta": self.rope_theta, "rope_type": "default"}
        d["architectures"] = ["LlamaForCausalLM"]
        d["model_type"] = "llama"
        return d

    @classmethod
    def load(cls, path: str) -> "LlamaConfig":
        """From ``path``/config.json (or the file ``path``)."""
        f = os.path.join(path, "config.json") if os.path.isdir(path) else path
        try:
            with open(f) as fh:
                d = json.load(fh)
        except json.JSONDecodeError as e:
            raise ValueError(f"{f}: not valid JSON: {e}") from None
        try:
            return cls.from_dict(d)
        except ValueError as e:
            raise ValueError(f"{f}: {e}") from None

    def save(self, directory: str) -> str:
        os.makedirs(directory, exist_ok=True)
        f = os.path.join(directory, "config.json")
        with open(f, "w") as fh:
            json.dump(self.to_dict(), fh, indent=2, sort_keys=True)
            fh.write("\n")
        return f
