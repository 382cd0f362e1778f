"""The configuration of a language-model RL run (``flywheel run
examples/arith_grpo.toml``; docs/rl.md, "Language models: the job"). Every key,
its default and its check live in :data:`SCHEMA`; :func:`load` refuses a
misspelt key, a value of the wrong type or out of range, naming file, section
and key, before anything starts.
"""

from __future__ import annotations

import os
import tomllib
from typing import Any, Callable, Dict, Optional, Tuple


class ConfigError(ValueError):
    pass


def _one_of(*choices: str) -> Callable[[Any], Optional[str]]:
    return lambda v: None if v in choices else f"expected one of {', '.join(repr(c) for c in choices)}"


def _range(lo: Optional[float] = None, hi: Optional[float] = None, lo_open: bool = False
           ) -> Callable[[Any], Optional[str]]:
    def check(v):
        if lo is not None and (v <= lo if lo_open else v < lo):
            return f"must be {'>' if lo_open else '>='} {lo}"
        if hi is not None and v > hi:
            return f"must be <= {hi}"
        return None
    return check


_ANY = None
# section -> key -> (type, default, check)
SCHEMA: Dict[str, Dict[str, Tuple[type, Any, Optional[Callable[[Any], Optional[str]]]]]] = {
    "run": {
        "name": (str, "", _ANY),
        "run_dir": (str, "", _ANY),
        "seed": (int, 0, _range(0)),
        "mode": (str, "sync", _one_of("sync", "async")),
        "max_updates": (int, 100, _range(1)),
        "max_seconds": (float, 900.0, _range(0, lo_open=True)),
        "checkpoint_interval": (int, 20, _range(1)),
        "eval_interval": (int, 10, _range(1)),
        "progress_interval_s": (float, 5.0, _range(0, lo_open=True)),
        "max_staleness": (int, 1, _range(0)),
        "stale": (str, "drop", _one_of("drop", "correct")),
        "partial_rollouts": (bool, True, _ANY),
        "catalog": (str, "", _ANY),
        "threads": (int, 0, _range(0)),
        "log_rollouts": (int, 0, _range(0)),
        "metrics_port": (int, 0, _range(-1, 65535)),
        "dashboard_port": (int, 0, _range(-1, 65535)),
    },
    "data": {
        "train": (str, "", _ANY),
        "test": (str, "", _ANY),
        "prompt": (str, "prompt", _ANY),
        "answer": (str, "answer", _ANY),
        "template": (str, "plain", _one_of("plain", "chat")),
        "system": (str, "", _ANY),
        "instruction": (str, "", _ANY),
        "eval_size": (int, 500, _range(1)),
        "shuffle": (bool, True, _ANY),
    },
    "model": {
        "checkpoint": (str, "", _ANY),
        "tokenizer": (str, "chars", _one_of("chars")),
        "hidden_size": (int, 128, _range(8)),
        "intermediate_size": (int, 384, _range(8)),
        "layers": (int, 2, _range(1)),
        "heads": (int, 4, _range(1)),
        "kv_heads": (int, 2, _range(1)),
        "max_position_embeddings": (int, 32, _range(4)),
        "engine_dtype": (str, "f32", _one_of("f32", "bf16", "int8")),
    },
    "sft": {
        "steps": (int, 0, _range(0)),
        "batch_size": (int, 64, _range(1)),
        "lr": (float, 3e-3, _range(0, lo_open=True)),
    },
    "rollout": {
        "group_size": (int, 8, _range(2)),
        "prompts_per_update": (int, 16, _range(1)),
        "max_new_tokens": (int, 8, _range(1)),
        "temperature": (float, 1.0, _range(0, lo_open=True)),
        "top_p": (float, 1.0, _range(0, 1, lo_open=True)),
        "tool": (str, "", _one_of("", "calculator")),
        "max_turns": (int, 2, _range(1, 16)),
        "workers": (int, 0, _range(0, 64)),
        "dynamic_sampling": (bool, False, _ANY),
        "max_refill_rounds": (int, 3, _range(1, 100)),
        "worker_threads": (int, 0, _range(0)),
    },
    "reward": {
        "verifier": (str, "numeric", _one_of("numeric", "format", "numeric+format", "python")),
        "function": (str, "", _ANY),
        "pattern": (str, "", _ANY),
        "format_weight": (float, 0.2, _range(0)),
        "timeout_s": (float, 5.0, _range(0, lo_open=True)),
        "memory_mb": (int, 1024, _range(0)),
        "workers": (int, 1, _range(1, 64)),
        "failure_value": (float, 0.0, _ANY),
        "overlong_buffer": (int, 0, _range(0)),
    },
    "learner": {
        "algorithm": (str, "grpo", _one_of("grpo", "dr_grpo", "rloo", "ppo")),
        "lr": (float, 1e-3, _range(0, lo_open=True)),
        "clip_low": (float, 0.2, _range(0, 1)),
        "clip_high": (float, 0.28, _range(0)),
        "kl_coef": (float, 0.0, _range(0)),
        "kl_estimator": (str, "k3", _one_of("k1", "k2", "k3")),
        "aggregation": (str, "", _one_of("", "token-mean", "seq-mean", "seq-mean-token-sum")),
        "sequence_ratio": (bool, False, _ANY),
        "token_budget": (int, 1024, _range(8)),
        "max_grad_norm": (float, 1.0, _range(0)),
        "drop_uninformative": (bool, True, _ANY),
        "tis_cap": (float, 0.0, _ANY),
        "weight_decay": (float, 0.0, _range(0)),
        "world_size": (int, 1, _range(1, 64)),
        # PPO only
        "value_coef": (float, 0.5, _range(0)),
        "gamma": (float, 1.0, _range(0, 1)),
        "gae_lambda": (float, 0.95, _range(0, 1)),
        "value_clip": (float, 0.2, _range(0)),
        "ppo_epochs": (int, 2, _range(1, 64)),
        "value_lr": (float, 0.0, _range(0)),
    },
}


def parse(text: str, source: str = "<config>") -> Dict[str, Dict[str, Any]]:
    """The checked configuration with every default filled in."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: {e}") from None
    unknown = sorted(set(raw) - set(SCHEMA))
    if unknown:
        raise ConfigError(f"{source}: unknown section [{unknown[0]}]; sections are "
                          + ", ".join(f"[{s}]" for s in SCHEMA))
    out: Dict[str, Dict[str, Any]] = {}
    for section, keys in SCHEMA.items():
        given = raw.get(section, {})
        if not isinstance(given, dict):
            raise ConfigError(f"{source}: [{section}] must be a table")
        bad = sorted(set(given) - set(keys))
        if bad:
            raise ConfigError(f"{source}: [{section}] {bad[0]}: unknown key; [{section}] takes {', '.join(keys)}")
        sec = {}
        for key, (typ, default, check) in keys.items():
            v = given.get(key, default)
            if typ is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
                raise ConfigError(f"{source}: [{section}] {key} = {v!r}: expected {typ.__name__}")
            why = check(v) if check else None
            if why:
                raise ConfigError(f"{source}: [{section}] {key} = {v!r}: {why}")
            sec[key] = v
        out[section] = sec
    _cross_checks(out, source)
    if not out["run"]["name"]:
        out["run"]["name"] = os.path.splitext(os.path.basename(source))[0] or "lm"
    return out


def _cross_checks(c: Dict[str, Dict[str, Any]], source: str) -> None:
    def fail(section: str, key: str, why: str):
        raise ConfigError(f"{source}: [{section}] {key} = {c[section][key]!r}: {why}")

    lr = c["learner"]
    if lr["clip_high"] < lr["clip_low"] * 0.5 or lr["clip_high"] >= 10:
        fail("learner", "clip_high", f"a clip range [1 - {lr['clip_low']}, 1 + {lr['clip_high']}] that makes no "
             "sense: clip_high is at least clip_low / 2 (DAPO's clip-higher sets it above clip_low) and below 10")
    if lr["world_size"] > 1 and lr["algorithm"] == "ppo":
        fail("learner", "world_size", "data-parallel learners run GRPO, Dr. GRPO or RLOO (PPO whitens per batch)")
    if c["rollout"]["tool"] and c["run"]["mode"] != "sync":
        fail("rollout", "tool", "multi-turn episodes run in mode = \"sync\"")
    if c["rollout"]["dynamic_sampling"] and c["run"]["mode"] == "async" and not c["rollout"]["workers"]:
        fail("rollout", "dynamic_sampling", "refills in mode = \"sync\" or with rollout workers ([rollout] workers)")
    if lr["tis_cap"] and lr["tis_cap"] < 1:
        fail("learner", "tis_cap", "must be 0 (off) or >= 1")
    for key in ("train", "test"):
        if not c["data"][key]:
            raise ConfigError(f"{source}: [data] {key}: missing (a flywheel table path)")
    if os.path.abspath(c["data"]["train"]) == os.path.abspath(c["data"]["test"]):
        fail("data", "test", "is the training table; the held-out split must never enter training")
    rw = c["reward"]
    if rw["verifier"] == "python" and ":" not in rw["function"]:
        fail("reward", "function", "verifier = \"python\" needs function = \"module:name\"")
    if rw["verifier"] in ("format", "numeric+format") and not rw["pattern"]:
        fail("reward", "pattern", f"verifier = \"{rw['verifier']}\" needs a regular expression")
    if rw["verifier"] != "python" and rw["function"]:
        fail("reward", "function", "is only read with verifier = \"python\"")
    m = c["model"]
    if not m["checkpoint"]:
        if m["hidden_size"] % m["heads"] or m["heads"] % m["kv_heads"]:
            fail("model", "heads", "hidden_size must divide by heads and heads by kv_heads")
    if c["data"]["template"] == "chat" and not m["checkpoint"]:
        fail("data", "template", "a chat template needs a [model] checkpoint with one")
    if c["run"]["threads"] == 0:
        c["run"]["threads"] = os.cpu_count() or 1


def load(path: str) -> Dict[str, Dict[str, Any]]:
    if not os.path.exists(path):
        raise ConfigError(f"{path}: no such file")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    c = parse(text, path)
    base = os.path.dirname(os.path.abspath(path))
    # Paths in the file are relative to the directory it is run from, as
    # flywheel run's classic configs; the config's own folder is tried next.
    for section, key in (("data", "train"), ("data", "test"), ("model", "checkpoint")):
        v = os.path.expandvars(os.path.expanduser(c[section][key])) if c[section][key] else ""
        c[section][key] = v
        if v and not os.path.isabs(v) and not os.path.exists(v) and os.path.exists(os.path.join(base, v)):
            c[section][key] = os.path.join(base, v)
    return c
