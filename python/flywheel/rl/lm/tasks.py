"""Tasks with verifiable answers for RL on language models (docs/rl.md,
"Language models").

:func:`make_arith` writes multi-digit arithmetic problems into two flywheel
tables, ``train`` and ``test``, with columns ``prompt`` (string) and
``answer`` (int64). The split is by problem: a problem (its operands and
operator) appears in at most one split, so held-out accuracy measures
problems the policy never trained on. Deterministic in ``seed``.
"""

from __future__ import annotations

import os
import random
from typing import Dict, List, Tuple

OPERATORS = ("+", "-", "*")


def arith_problems(n: int, seed: int = 0, digits: int = 2, operators: Tuple[str, ...] = OPERATORS
                   ) -> List[Tuple[str, int]]:
    """``n`` distinct problems ``("a op b = ", answer)``, operands with up to
    ``digits`` digits (multiplication: up to ``digits - 1`` for the second
    operand when digits > 1, keeping answers short)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 1 <= digits <= 9:
        raise ValueError(f"digits must be in [1, 9], got {digits}")
    bad = [o for o in operators if o not in OPERATORS]
    if bad or not operators:
        raise ValueError(f"operators must be a non-empty subset of {OPERATORS}, got {operators}")
    hi = 10 ** digits - 1
    space = len(operators) * (hi + 1) ** 2
    if n > space // 2:
        raise ValueError(f"{n} distinct problems asked of a space of about {space}: use more digits")
    rng = random.Random(seed)
    seen = set()
    out: List[Tuple[str, int]] = []
    while len(out) < n:
        op = rng.choice(operators)
        a = rng.randint(0, hi)
        b = rng.randint(0, hi if op != "*" or digits == 1 else 10 ** (digits - 1) - 1)
        if (a, op, b) in seen:
            continue
        seen.add((a, op, b))
        answer = a + b if op == "+" else a - b if op == "-" else a * b
        out.append((f"{a} {op} {b} = ", answer))
    return out


def make_arith(directory: str, train: int, test: int, seed: int = 0, digits: int = 2,
               operators: Tuple[str, ...] = OPERATORS) -> Dict[str, str]:
    """Writes ``directory/train`` and ``directory/test`` (flywheel tables,
    columns ``prompt``, ``answer``) with ``train`` and ``test`` distinct
    problems; returns the two paths. Refuses to overwrite existing tables."""
    import numpy as np

    import flywheel

    problems = arith_problems(train + test, seed=seed, digits=digits, operators=tuple(operators))
    paths = {}
    for name, rows in (("train", problems[:train]), ("test", problems[train:])):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            raise FileExistsError(f"{path} exists; choose another directory")
        t = flywheel.Table.create(path, {"prompt": "string", "answer": "int64"})
        if rows:
            t.append({"prompt": [p for p, _ in rows], "answer": np.array([a for _, a in rows], dtype=np.int64)},
                     properties={"task": "arith", "seed": seed, "digits": digits, "split": name,
                                 "operators": "".join(operators)})
        paths[name] = path
    return paths


def main(argv=None) -> int:
    """``flywheel task make arith OUT --train N --test M [--digits D]
    [--operators +-*] [--seed S]``."""
    import argparse
    import sys
    ap = argparse.ArgumentParser(prog="flywheel task make arith",
                                 description="Write arithmetic problems into OUT/train and OUT/test "
                                             "(columns prompt, answer); no problem is in both.")
    ap.add_argument("task", choices=["arith"], help=argparse.SUPPRESS)
    ap.add_argument("out", help="folder for the two tables (must not hold them yet)")
    ap.add_argument("--train", type=int, required=True, help="training problems")
    ap.add_argument("--test", type=int, required=True, help="held-out problems")
    ap.add_argument("--digits", type=int, default=2, help="operand digits (default 2)")
    ap.add_argument("--operators", default="".join(OPERATORS), help="subset of +-* (default all)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        paths = make_arith(a.out, a.train, a.test, seed=a.seed, digits=a.digits, operators=tuple(a.operators))
    except (ValueError, FileExistsError) as e:
        print(f"flywheel task make arith: {e}", file=sys.stderr)
        return 2
    print(f"flywheel task make arith: {a.train} problems in {paths['train']}, {a.test} in {paths['test']} "
          f"(digits {a.digits}, operators {a.operators}, seed {a.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
