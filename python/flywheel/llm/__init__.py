"""Language-model policies (docs/llm.md): one Llama-style transformer
definition in PyTorch with Hugging Face-format checkpoints.

    from flywheel import llm
    model = llm.Transformer(llm.LlamaConfig(vocab_size=256, hidden_size=64, ...))
    llm.save(model, "ckpt/")        # config.json + model.safetensors
    same = llm.load("ckpt/")        # also loads what transformers saved
"""

from .checkpoint import load, load_state, save
from .config import LlamaConfig
from .model import Transformer

__all__ = ["LlamaConfig", "Transformer", "load", "load_state", "save"]
