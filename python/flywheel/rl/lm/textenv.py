"""Text environments for multi-turn episodes (docs/rl.md, "Multi-turn
episodes"): between two turns of the policy, an environment reads what the
policy wrote and answers with text that is appended to the context. Only the
policy's own tokens get loss; the environment's tokens are stored with a
loss mask of 0 (and a behaviour log-prob of 0).

The interface is the env pool's, with text in and out::

    env.reset(prompt, answer)                  # a new episode
    reply, done = env.step(turn_text)          # the policy's turn -> the env's answer

:class:`Calculator` is the tool of the arithmetic task: a turn that ends
with ``=`` after an expression (``37*4=``) is answered with its value and a
space (``148 ``); any other turn ends the episode.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Tuple

_EXPR = re.compile(r"(-?\d{1,12})\s*([-+*])\s*(-?\d{1,12})\s*=$")


class TextEnv:
    """What the job needs of a text environment."""

    stop = "="  # the text that ends a policy turn asking the env to act

    def reset(self, prompt: str, answer: Any) -> None:
        raise NotImplementedError

    def step(self, turn_text: str) -> Tuple[Optional[str], bool]:
        """The env's reply to the policy's turn (None when it has none) and
        whether the episode is over."""
        raise NotImplementedError


class Calculator(TextEnv):
    def __init__(self, max_calls: int = 1):
        if max_calls < 1:
            raise ValueError(f"max_calls must be >= 1, got {max_calls}")
        self.max_calls = max_calls
        self.calls = 0

    def reset(self, prompt: str, answer: Any) -> None:
        self.calls = 0

    def step(self, turn_text: str) -> Tuple[Optional[str], bool]:
        m = _EXPR.search(turn_text)
        if m is None or self.calls >= self.max_calls:
            return None, True
        self.calls += 1
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        value = a + b if op == "+" else a - b if op == "-" else a * b
        return f"{value} ", False


ENVS = {"calculator": Calculator}


def make(name: str, **kw) -> TextEnv:
    try:
        return ENVS[name](**kw)
    except KeyError:
        raise ValueError(f"unknown text environment {name!r}; choose one of {', '.join(ENVS)}") from None
