"""Tokenization for flywheel's language models: Hugging Face ``tokenizers``
on a checkpoint's ``tokenizer.json``, with the chat template from its
``tokenizer_config.json`` rendered by Jinja (as transformers renders it). The
engine takes and returns token ids; this is where text becomes ids and back.

    tok = llm.Tokenizer.from_pretrained("ckpt/")
    ids = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], add_generation_prompt=True)
    text = tok.decode(ids)
"""

import json
import os
from typing import Dict, List, Optional, Sequence

from tokenizers import Tokenizer as _HFTokenizer


class Tokenizer:
    """Text <-> token ids for one checkpoint folder."""

    def __init__(self, tokenizer_json: str, config: Optional[dict] = None):
        if not os.path.exists(tokenizer_json):
            raise FileNotFoundError(f"{tokenizer_json} does not exist (a checkpoint folder needs tokenizer.json)")
        self._tok = _HFTokenizer.from_file(tokenizer_json)
        self.config = dict(config or {})
        self.chat_template: Optional[str] = self.config.get("chat_template")
        self.add_bos = bool(self.config.get("add_bos_token", False))

        def special(name):
            text = self.config.get(name)
            if isinstance(text, dict):  # transformers' AddedToken form
                text = text.get("content")
            return (text, self._tok.token_to_id(text)) if text else (None, None)

        self.bos_token, self.bos_token_id = special("bos_token")
        self.eos_token, self.eos_token_id = special("eos_token")
        self.pad_token, self.pad_token_id = special("pad_token")

    @classmethod
    def from_pretrained(cls, directory: str) -> "Tokenizer":
        cfg_path = os.path.join(directory, "tokenizer_config.json")
        config = {}
        if os.path.exists(cfg_path):
            with open(cfg_path, encoding="utf-8") as f:
                config = json.load(f)
        jinja = os.path.join(directory, "chat_template.jinja")  # transformers 5 writes it beside
        if "chat_template" not in config and os.path.exists(jinja):
            with open(jinja, encoding="utf-8") as f:
                config["chat_template"] = f.read()
        return cls(os.path.join(directory, "tokenizer.json"), config)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> List[int]:
        """Token ids of ``text``; special tokens written in it (``<|im_start|>``)
        become their ids. ``add_special_tokens`` prepends BOS where the model's
        config asks for it."""
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if add_special_tokens and self.add_bos and self.bos_token_id is not None:
            ids = [self.bos_token_id] + ids
        return ids

    def encode_batch(self, texts: Sequence[str]) -> List[List[int]]:
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def render_chat(self, messages: List[Dict[str, str]], add_generation_prompt: bool = False) -> str:
        """The chat template applied to ``messages`` (the text, before tokenization)."""
        if not self.chat_template:
            raise ValueError("this checkpoint has no chat template (tokenizer_config.json 'chat_template')")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"message {i} must be a dict with 'role' and 'content', got {m!r}")
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template).render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "", eos_token=self.eos_token or "")

    def apply_chat_template(self, messages: List[Dict[str, str]], add_generation_prompt: bool = False) -> List[int]:
        """Token ids of the chat template applied to ``messages``."""
        return self.encode(self.render_chat(messages, add_generation_prompt))
