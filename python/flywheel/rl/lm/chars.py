"""A character tokenizer for small tasks trained from scratch (the arithmetic
task of :mod:`flywheel.rl.lm.tasks`): one id per character of a fixed
alphabet, plus ``<pad>`` (0), ``<s>`` (1) and ``</s>`` (2). Saved beside a
checkpoint as ``flywheel_chars.json`` so that a run that resumes, and
``flywheel.rl.lm.job``'s evaluation, decode exactly as training did.
"""

from __future__ import annotations

import json
import os
from typing import List, Sequence

FILE = "flywheel_chars.json"
ARITH_ALPHABET = "0123456789+-*= "
PAD, BOS, EOS = 0, 1, 2


class CharTokenizer:
    def __init__(self, alphabet: str = ARITH_ALPHABET):
        if len(set(alphabet)) != len(alphabet) or not alphabet:
            raise ValueError(f"alphabet must be non-empty characters without repeats, got {alphabet!r}")
        self.alphabet = alphabet
        self._ids = {ch: i + 3 for i, ch in enumerate(alphabet)}
        self.bos_token_id, self.eos_token_id, self.pad_token_id = BOS, EOS, PAD

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet) + 3

    def encode(self, text: str, add_special_tokens: bool = False) -> List[int]:
        try:
            ids = [self._ids[ch] for ch in text]
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} of {text!r} is not in the tokenizer's alphabet "
                             f"{self.alphabet!r}") from None
        return [BOS] + ids if add_special_tokens else ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        out = []
        for i in ids:
            i = int(i)
            if i >= 3 and i - 3 < len(self.alphabet):
                out.append(self.alphabet[i - 3])
            elif not skip_special_tokens:
                out.append({PAD: "<pad>", BOS: "<s>", EOS: "</s>"}.get(i, f"<{i}>"))
        return "".join(out)

    def save(self, directory: str) -> str:
        path = os.path.join(directory, FILE)
        with open(path, "w") as f:
            json.dump({"alphabet": self.alphabet}, f)
        return path

    @classmethod
    def load(cls, directory: str) -> "CharTokenizer":
        with open(os.path.join(directory, FILE)) as f:
            return cls(json.load(f)["alphabet"])
