"""Verifiable rewards (docs/rl.md, "Language models"): pure functions from a
response text (and the reference answer) to a float.

* :func:`numeric_answer` -- 1.0 when the response's final number equals the
  answer (``\\boxed{...}`` or "answer: X" preferred, else the last number in
  the text), else 0.0.
* :func:`format_reward` -- 1.0 when the response matches a regular
  expression, else 0.0.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Optional, Union

_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?"
_BOXED = re.compile(r"\\boxed\{\s*(" + _NUMBER + r")\s*\}")
_ANSWER = re.compile(r"answer\s*(?:is|:|=)?\s*\**\s*(" + _NUMBER + r")", re.IGNORECASE)
_ANY = re.compile(_NUMBER)


def _value(text: str) -> Optional[Fraction]:
    try:
        return Fraction(text.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def extract_number(response: str) -> Optional[Fraction]:
    """The number a response gives as its answer: the last ``\\boxed{N}``, else
    the last "answer: N" / "answer is N", else the last number in the text;
    None when there is none. Thousands separators and fractions are read
    exactly (``1,234`` = 1234, ``3/4`` = 0.75)."""
    for pattern in (_BOXED, _ANSWER):
        found = pattern.findall(response)
        if found:
            return _value(found[-1])
    found = _ANY.findall(response)
    return _value(found[-1]) if found else None


def numeric_answer(response: str, answer: Union[int, float, str, Fraction]) -> float:
    """1.0 when the response's answer equals ``answer`` exactly (as a number:
    ``"42.0"`` equals 42), else 0.0."""
    got = extract_number(response)
    if got is None:
        return 0.0
    if isinstance(answer, float):
        if not math.isfinite(answer):
            return 0.0
        want = Fraction(answer).limit_denominator(10 ** 9)
    elif isinstance(answer, str):
        want = _value(answer.strip())
        if want is None:
            raise ValueError(f"reference answer {answer!r} is not a number")
    else:
        want = Fraction(answer)
    return 1.0 if got == want else 0.0


def format_reward(response: str, pattern: Union[str, "re.Pattern[str]"]) -> float:
    """1.0 when ``pattern`` matches the whole response (``re.fullmatch``,
    DOTALL), else 0.0."""
    rx = re.compile(pattern, re.DOTALL) if isinstance(pattern, str) else pattern
    return 1.0 if rx.fullmatch(response) else 0.0
