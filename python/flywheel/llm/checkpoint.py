"""Checkpoints in Hugging Face format: a directory with ``config.json`` and
``model.safetensors`` (or, past ``max_shard_bytes``, ``model-0000K-of-0000N
.safetensors`` shards with ``model.safetensors.index.json``). transformers'
``LlamaForCausalLM.from_pretrained(dir)`` loads what ``save`` writes, and
``load`` reads what transformers' ``save_pretrained`` writes."""

from __future__ import annotations

import json
import os
from typing import Dict, Optional

import torch

from .config import LlamaConfig
from .model import Transformer

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


def save(model: Transformer, directory: str, max_shard_bytes: int = 5 << 30) -> Dict[str, str]:
    """Writes ``model`` to ``directory``; returns tensor name -> file."""
    from safetensors.torch import save_file
    if max_shard_bytes < 1:
        raise ValueError(f"max_shard_bytes must be positive, got {max_shard_bytes}")
    os.makedirs(directory, exist_ok=True)
    model.config.save(directory)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # the embedding, stored once (as transformers does)
    shards, current, size = [], {}, 0
    for name in sorted(state):
        nbytes = state[name].numel() * state[name].element_size()
        if current and size + nbytes > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name] = state[name]
        size += nbytes
    shards.append(current)
    where: Dict[str, str] = {}
    if len(shards) == 1:
        save_file(shards[0], os.path.join(directory, SINGLE), metadata={"format": "pt"})
        return {k: SINGLE for k in shards[0]}
    total = 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, os.path.join(directory, fname), metadata={"format": "pt"})
        for k, v in shard.items():
            where[k] = fname
            total += v.numel() * v.element_size()
    with open(os.path.join(directory, INDEX), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": where}, f, indent=2, sort_keys=True)
    return where


def load_state(directory: str) -> Dict[str, torch.Tensor]:
    """Every tensor of the checkpoint in ``directory`` (single file or shards)."""
    from safetensors.torch import load_file
    index = os.path.join(directory, INDEX)
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.exists(os.path.join(directory, SINGLE)):
        files = [SINGLE]
    else:
        raise FileNotFoundError(f"{directory}: no {SINGLE} or {INDEX}")
    state: Dict[str, torch.Tensor] = {}
    for fname in files:
        state.update(load_file(os.path.join(directory, fname)))
    return state


def load(directory: str, dtype: Optional[torch.dtype] = torch.float32) -> Transformer:
    """The model saved in ``directory`` by ``save`` or by transformers.
    Raises ValueError naming tensors that are missing, unexpected or of the
    wrong shape for the config."""
    config = LlamaConfig.load(directory)
    model = Transformer(config)
    state = load_state(directory)
    want = model.state_dict()
    if config.tie_word_embeddings:
        state.setdefault("lm_head.weight", state.get("model.embed_tokens.weight"))
    missing = sorted(k for k in want if k not in state or state[k] is None)
    unexpected = sorted(k for k in state if k not in want and not k.endswith("rotary_emb.inv_freq"))
    if missing or unexpected:
        raise ValueError(f"{directory}: tensors do not match config.json: missing {missing[:5]}"
                         f"{' ...' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}"
                         f"{' ...' if len(unexpected) > 5 else ''}")
    for k, v in want.items():
        if tuple(state[k].shape) != tuple(v.shape):
            raise ValueError(f"{directory}: tensor {k} has shape {tuple(state[k].shape)}, "
                             f"config.json implies {tuple(v.shape)}")
    model.load_state_dict({k: state[k] for k in want}, strict=True)
    if dtype is not None:
        model = model.to(dtype)
    return model.eval()
