"""Language-model policies (docs/llm.md): one Llama-style transformer
definition in PyTorch with Hugging Face-format checkpoints.

    from flywheel import llm
    model = llm.Transformer(llm.LlamaConfig(vocab_size=256, hidden_size=64, ...))
    llm.save(model, "ckpt/")        # config.json + model.safetensors
    same = llm.load("ckpt/")        # also loads what transformers saved
    tok = llm.Tokenizer.from_pretrained("ckpt/")  # tokenizer.json + chat template
    eng = llm.Engine("ckpt/")       # the C++ rollout engine
    out = eng.generate([tok.encode("Hi")], max_new_tokens=32)

`flywheel llm import FILE.gguf DIR` makes such a folder from a GGUF file;
`llm.smollm2_path()` is the real model `make model` imports.
"""

from .checkpoint import load, load_state, save
from .config import LlamaConfig
from .engine import Engine
from .model import Transformer
from .tokenizer import Tokenizer


def smollm2_path():
    """The folder `make model` imports SmolLM2-135M-Instruct into
    ($FLYWHEEL_MODELS, default ~/.cache/flywheel/models), or None when it has
    not been imported on this machine."""
    import os
    models = os.environ.get("FLYWHEEL_MODELS") or os.path.join(os.path.expanduser("~"), ".cache", "flywheel", "models")
    path = os.path.join(models, "smollm2-135m-instruct")
    return path if os.path.exists(os.path.join(path, ".flywheel-complete")) else None


__all__ = ["Engine", "LlamaConfig", "Tokenizer", "Transformer", "load", "load_state", "save", "smollm2_path"]
