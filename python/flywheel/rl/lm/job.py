"""The language-model RL job behind ``flywheel run CONFIG.toml`` when the
config has a ``[data]`` section (docs/rl.md, "Language models: the job").

    python -m flywheel.rl.lm.job examples/arith_grpo.toml [--run-dir D] [--deterministic]

One supervisor process starts the job as a child and restarts it when it
dies (kill -9, out of memory); the child resumes from its newest checkpoint:
weights, optimizer, prompt position (and the prompts in flight), RNG,
version counter. The child:

* reads prompts from the ``train`` table through :class:`flywheel.Loader`
  (deterministic shuffle, each prompt once per epoch);
* generates ``group_size`` answers per prompt with the C++ engine
  (:class:`flywheel.llm.Engine`), every token carrying the weight version
  that produced it;
* scores them in reward worker processes (:mod:`.reward_pool`);
* updates the policy with :class:`.learner.GRPOLearner` and swaps the new
  weights into the engine;
* evaluates greedy accuracy on the ``test`` table every ``eval_interval``
  updates; checkpoints every ``checkpoint_interval``.

``mode = "sync"`` alternates generation and training. ``mode = "async"``
generates in a thread while the learner trains; with ``partial_rollouts``
new weights land in the engine between decode steps (answers in progress
continue under the new version), otherwise when it drains. Trajectories
older than ``max_staleness`` versions (per token) are dropped or corrected
(decoupled objective), as ``stale`` says; both counted.

Run directory: config.toml, metrics.jsonl (one line per update), eval.jsonl,
job.log, checkpoints/update-NNNNNN/ (model/ in Hugging Face format + state.pt
+ lineage.json), result.json.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import config as lmconfig
from . import rollout

STAGES = ("generate", "reward", "train", "sync", "eval", "checkpoint", "wait")


def _log(msg: str) -> None:
    print(f"flywheel run: {msg}", flush=True)


# ----------------------------------------------------------------- prompts
class Prompts:
    """Prompt rows from the training table, each handed out once per epoch.
    ``take`` hands out rows; ``done`` marks them trained. The state holds the
    loader position, the rows handed out but not yet trained (given out again
    first after a resume) and the rows trained this epoch (lineage, and the
    check that none repeats)."""

    def __init__(self, path: str, prompt_col: str, answer_col: str, batch: int, seed: int, shuffle: bool):
        import flywheel
        self.table = flywheel.Table.open(path)
        self.version = self.table.version
        self.path = path
        schema = self.table.schema
        for col in (prompt_col, answer_col):
            if col not in schema:
                raise lmconfig.ConfigError(f"[data] train table {path} has no column {col!r} "
                                           f"(its columns: {', '.join(schema)})")
        self.prompt_col, self.answer_col = prompt_col, answer_col
        self.loader = flywheel.Loader(self.table, batch_size=batch, columns=[prompt_col, answer_col],
                                      shuffle=shuffle, seed=seed, num_threads=1, return_indices=True)
        self.epoch = 0
        self.buffer: List[Tuple[int, int, str, Any]] = []
        self.in_flight: Dict[Tuple[int, int], Tuple[int, int, str, Any]] = {}
        self.trained: Dict[int, List[int]] = {}
        self.requeue: List[Tuple[int, int, str, Any]] = []
        self.lock = threading.Lock()

    def take(self, n: int) -> List[Tuple[int, int, str, Any]]:
        with self.lock:
            out = []
            while len(out) < n:
                if self.requeue:
                    item = self.requeue.pop(0)
                elif self.buffer:
                    item = self.buffer.pop(0)
                else:
                    b = self.loader.next()
                    if b is None:
                        self.epoch += 1
                        continue
                    idx = np.asarray(b["__index__"]).tolist()
                    answers = b[self.answer_col]
                    for i, (p, a) in enumerate(zip(b[self.prompt_col], answers)):
                        # A chat column's conversation stays a list of dicts.
                        p = p.decode() if isinstance(p, bytes) else p if isinstance(p, list) else str(p)
                        a = a.item() if hasattr(a, "item") else a
                        a = a.decode() if isinstance(a, bytes) else a
                        self.buffer.append((self.epoch, int(idx[i]), p, a))
                    continue
                self.in_flight[(item[0], item[1])] = item
                out.append(item)
            return out

    def done(self, items: Sequence[Tuple[int, int, str, Any]]) -> None:
        with self.lock:
            for e, i, _, _ in items:
                self.in_flight.pop((e, i), None)
                self.trained.setdefault(e, []).append(i)
            # Keep the current epoch and the one before (a checkpoint's
            # lineage); older epochs are complete.
            for e in [e for e in self.trained if e < self.epoch - 1]:
                del self.trained[e]

    def state(self) -> Dict[str, Any]:
        with self.lock:
            pending = sorted(self.in_flight.values()) + self.requeue + self.buffer
            return {"loader": self.loader.state_dict(), "epoch": self.epoch,
                    "pending": [list(p) for p in pending], "trained": {str(k): v for k, v in self.trained.items()}}

    def restore(self, s: Dict[str, Any]) -> None:
        with self.lock:
            self.loader.load_state_dict(s["loader"])
            self.epoch = int(s["epoch"])
            self.requeue = [tuple(p) for p in s["pending"]]
            self.buffer, self.in_flight = [], {}
            self.trained = {int(k): list(v) for k, v in s["trained"].items()}


def read_column(path: str, columns: Sequence[str], limit: Optional[int] = None) -> Dict[str, list]:
    import flywheel
    t = flywheel.Table.open(path)
    for col in columns:
        if col not in t.schema:
            raise lmconfig.ConfigError(f"table {path} has no column {col!r} (its columns: {', '.join(t.schema)})")
    out: Dict[str, list] = {c: [] for c in columns}
    loader = flywheel.Loader(t, batch_size=4096, columns=list(columns), shuffle=False, num_threads=1)
    for b in loader:
        for c in columns:
            vals = b[c]
            out[c].extend(v.decode() if isinstance(v, bytes) else (v.item() if hasattr(v, "item") else v)
                          for v in vals)
        if limit is not None and len(out[columns[0]]) >= limit:
            break
    loader.close()
    if limit is not None:
        out = {c: v[:limit] for c, v in out.items()}
    return out


# ----------------------------------------------------------------- metrics
_GAUGES = ("reward_mean", "reward_std", "loss", "kl", "entropy", "clip_frac_low", "clip_frac_high", "ratio_mean",
           "ratio_max", "mismatch_kl", "mismatch_ratio_max", "response_len_mean", "response_len_max", "clipped_frac",
           "packing_efficiency", "grad_norm", "value_loss")


def prometheus_text(job: "Job") -> str:
    """The job's state in Prometheus text format (``/metrics``)."""
    lines = []

    def metric(name: str, kind: str, help_text: str, samples) -> None:
        lines.append(f"# HELP flywheel_lm_{name} {help_text}")
        lines.append(f"# TYPE flywheel_lm_{name} {kind}")
        for labels, value in samples:
            lab = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
            lines.append(f"flywheel_lm_{name}{lab} {float(value):.6g}")

    c = job.counters
    metric("updates_total", "counter", "Learner updates", [({}, job.update)])
    metric("version", "gauge", "Weight version in the engine", [({}, getattr(job, "version", 0))])
    metric("tokens_generated_total", "counter", "Response tokens generated", [({}, c["tokens_generated"])])
    metric("tokens_trained_total", "counter", "Response tokens in updates", [({}, c["tokens_trained"])])
    metric("stage_seconds_total", "counter", "Wall time by stage", [({"stage": k}, v) for k, v in job.times.items()
                                                                   if k in STAGES])
    metric("reward_failures_total", "counter", "Verifier failures by kind",
           [({"kind": k}, c[f"reward_failures_{k}"]) for k in ("raised", "timeout", "died")])
    metric("groups_total", "counter", "Groups left out of updates, by reason",
           [({"reason": r}, c[f"groups_{r}"]) for r in ("dropped_uniform", "stale_dropped", "stale_corrected")])
    metric("resumes_total", "counter", "Resumes from a checkpoint", [({}, c["resumes"])])
    metric("rollout_worker_restarts_total", "counter", "Rollout worker processes restarted after dying",
           [({}, c["rollout_worker_restarts"])])
    metric("lost_total", "counter", "Work lost to a rollout worker's death or the end of the run",
           [({"what": k}, c[k]) for k in ("groups_lost_worker", "answers_lost_worker", "answers_discarded",
                                          "groups_lost_at_stop")])
    metric("staleness_tokens", "gauge", "Trained tokens by staleness (learner version - token version)",
           [({"lag": str(k)}, v) for k, v in sorted(job.staleness.items())])
    last = getattr(job, "last_metrics", {}) or {}
    metric("update", "gauge", "The latest update's statistics",
           [({"stat": k}, last[k]) for k in _GAUGES if isinstance(last.get(k), (int, float))])
    if job.last_eval is not None:
        metric("eval_accuracy", "gauge", "Held-out greedy accuracy (latest evaluation)",
               [({}, job.last_eval["accuracy"])])
    return "\n".join(lines) + "\n"


def serve_metrics(job: "Job", port: int):
    """``/metrics`` (Prometheus) and ``/`` (the latest update and the held-out
    curve as JSON) on 127.0.0.1, in a daemon thread; returns the server."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path == "/metrics":
                body, kind = prometheus_text(job).encode(), "text/plain; version=0.0.4"
            elif self.path in ("/", "/status"):
                curve = []
                path = os.path.join(job.run_dir, "eval.jsonl")
                if os.path.exists(path):
                    with open(path) as f:
                        curve = [{k: e[k] for k in ("update", "accuracy", "elapsed_s")} for e in map(json.loads, f)]
                body = json.dumps({"update": job.update, "last": getattr(job, "last_metrics", {}),
                                   "eval_curve": curve, "times": job.times}, default=str).encode()
                kind = "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, name="flywheel-metrics", daemon=True).start()
    return server


def start_dashboard(metrics_url: str, port: int) -> Optional[subprocess.Popen]:
    """``flywheel serve`` charting this job's ``/metrics`` (the binary that
    started the job: FLYWHEEL_EXE, else ``flywheel`` on the PATH), a child
    that dies with the job. Prints its address; None when there is no
    binary."""
    exe = os.environ.get("FLYWHEEL_EXE") or shutil.which("flywheel")
    if not exe or not os.access(exe, os.X_OK):
        _log("no flywheel binary found (FLYWHEEL_EXE): no dashboard; /metrics is served")
        return None
    import ctypes  # noqa: F401 (imported here, not in the forked child: _die_with_parent uses it)

    from .reward_pool import _die_with_parent
    parent = os.getpid()
    proc = subprocess.Popen([exe, "serve", "--port", str(port), "--scrape", metrics_url, "--interval", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: _die_with_parent(parent))

    def relay():
        for line in proc.stdout:
            if "dashboard on" in line:
                _log(line.strip().replace("flywheel serve: ", ""))
    threading.Thread(target=relay, name="flywheel-dashboard-log", daemon=True).start()
    return proc


# ------------------------------------------------------------------ reward
def _make_verifier(rc: Dict[str, Any]):
    """fn(response_text, answer) -> float for the reward pool (module-level
    state only: the pool forks)."""
    import functools
    import importlib
    import re

    from . import rewards
    if rc["verifier"] == "numeric":
        return rewards.numeric_answer
    if rc["verifier"] == "format":
        return functools.partial(_format_only, re.compile(rc["pattern"], re.DOTALL))
    if rc["verifier"] == "numeric+format":
        return functools.partial(_numeric_and_format, re.compile(rc["pattern"], re.DOTALL), rc["format_weight"])
    module, _, name = rc["function"].partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise lmconfig.ConfigError(f"[reward] function = {rc['function']!r}: {e}") from None
    if not callable(fn):
        raise lmconfig.ConfigError(f"[reward] function = {rc['function']!r} is not callable")
    return fn


def _format_only(rx, response: str, answer: Any) -> float:
    from .rewards import format_reward
    return format_reward(response, rx)


def _numeric_and_format(rx, weight: float, response: str, answer: Any) -> float:
    from .rewards import format_reward, numeric_answer
    return numeric_answer(response, answer) + weight * format_reward(response, rx)


# --------------------------------------------------------------------- job
class Job:
    def __init__(self, cfg: Dict[str, Dict[str, Any]], run_dir: str, deterministic: bool = False):
        self.cfg, self.run_dir, self.deterministic = cfg, run_dir, deterministic
        self.times = {s: 0.0 for s in STAGES}
        self.counters: Counter = Counter()
        self.staleness: Counter = Counter()
        self.update = 0
        self.last_eval: Optional[Dict[str, Any]] = None
        self.first_eval: Optional[Dict[str, Any]] = None
        self._stop = threading.Event()
        self._catalog_run = None
        self._weights: Optional[Tuple[Dict[str, Any], int]] = None
        self.workers = None

    # ------------------------------------------------------------ set-up
    def setup(self) -> None:
        """Everything that can refuse the configuration, before any work."""
        import torch

        from ... import llm
        from .chars import CharTokenizer
        c = self.cfg
        torch.set_num_threads(c["run"]["threads"])
        d, m = c["data"], c["model"]
        for key in ("train", "test"):
            if not os.path.isdir(d[key]):
                raise lmconfig.ConfigError(f"[data] {key} = {d[key]!r}: no such table")
        if m["checkpoint"]:
            if not os.path.isdir(m["checkpoint"]):
                raise lmconfig.ConfigError(f"[model] checkpoint = {m['checkpoint']!r}: no such folder")
            if os.path.exists(os.path.join(m["checkpoint"], "flywheel_chars.json")):
                self.tok = CharTokenizer.load(m["checkpoint"])
            else:
                self.tok = llm.Tokenizer.from_pretrained(m["checkpoint"])
            self.model_config = llm.LlamaConfig.load(os.path.join(m["checkpoint"], "config.json"))
        else:
            self.tok = CharTokenizer()
            self.model_config = self._new_config()
        self.eos = self.tok.eos_token_id
        # Held-out problems: read once, every prompt checked against the context.
        test = read_column(d["test"], [d["prompt"], d["answer"]], d["eval_size"])
        self.test_texts = list(test[d["prompt"]])
        self.test_prompts = [self.encode(p) for p in self.test_texts]
        self.test_answers = test[d["answer"]]
        if not self.test_prompts:
            raise lmconfig.ConfigError(f"[data] test = {d['test']!r}: the table is empty")
        train = read_column(d["train"], [d["prompt"]])
        ctx = self.model_config.max_position_embeddings
        room = ctx - c["rollout"]["max_new_tokens"]
        for split, prompts in (("train", map(self.encode, train[d["prompt"]])), ("test", self.test_prompts)):
            for i, ids in enumerate(prompts):
                if len(ids) > room:
                    raise lmconfig.ConfigError(
                        f"[data] {split} row {i}: prompt of {len(ids)} tokens does not fit the context: "
                        f"max_position_embeddings {ctx} - max_new_tokens {c['rollout']['max_new_tokens']} = {room}")
        if not train[d["prompt"]]:
            raise lmconfig.ConfigError(f"[data] train = {d['train']!r}: the table is empty")
        self.verifier = _make_verifier(c["reward"])
        self.prompts = Prompts(d["train"], d["prompt"], d["answer"], c["rollout"]["prompts_per_update"],
                               c["run"]["seed"], d["shuffle"])

    def encode(self, text: Any) -> List[int]:
        """Prompt token ids: a ``prompt`` string (with the instruction, then
        the chat template or plain), or a ``messages`` chat column's
        conversation (``list<struct<role: string, content: string>>``, read
        through the Loader as a list of dicts), which the chat template
        renders as is (the [data] system message first when it has none; the
        instruction prefixes its first user turn)."""
        d = self.cfg["data"]
        if isinstance(text, list):
            if not hasattr(self.tok, "apply_chat_template"):
                raise lmconfig.ConfigError(f"[data] prompt = {d['prompt']!r} is a chat column; it needs a "
                                           "[model] checkpoint whose tokenizer has a chat template")
            msgs = [dict(m) for m in text]
            if d["system"] and not any(m.get("role") == "system" for m in msgs):
                msgs.insert(0, {"role": "system", "content": d["system"]})
            if d["instruction"]:
                for m in msgs:
                    if m.get("role") == "user":
                        m["content"] = d["instruction"] + (m.get("content") or "")
                        break
            return self.tok.apply_chat_template(msgs, add_generation_prompt=True)
        text = d["instruction"] + text if d["instruction"] else text
        if d["template"] == "chat":
            msgs = ([{"role": "system", "content": d["system"]}] if d["system"] else []) + \
                   [{"role": "user", "content": text}]
            return self.tok.apply_chat_template(msgs, add_generation_prompt=True)
        return self.tok.encode(text, add_special_tokens=True)

    def decode(self, ids: Sequence[int]) -> str:
        return rollout.decode(self.tok, self.eos, ids)

    # ------------------------------------------------------------ state
    def checkpoints(self) -> List[str]:
        root = os.path.join(self.run_dir, "checkpoints")
        if not os.path.isdir(root):
            return []
        return sorted(os.path.join(root, n) for n in os.listdir(root)
                      if n.startswith("update-") and os.path.exists(os.path.join(root, n, "state.pt")))

    def save(self) -> str:
        import torch

        t0 = time.monotonic()
        root = os.path.join(self.run_dir, "checkpoints")
        final = os.path.join(root, f"update-{self.update:06d}")
        tmp = final + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        self._save_model(os.path.join(tmp, "model"))
        prompts = self.prompts.state()
        state = {"update": self.update, "version": self.version, "optimizer": self.optimizer.state_dict(),
                 "torch_rng": torch.get_rng_state(), "py_rng": random.getstate(), "prompts": prompts,
                 "counters": dict(self.counters), "staleness": dict(self.staleness), "times": self.times,
                 "first_eval": self.first_eval, "last_eval": self.last_eval, "sft_done": True,
                 "value_head": self.value_head.state_dict() if self.value_head is not None else None}
        torch.save(state, os.path.join(tmp, "state.pt"))
        lineage = {"train": {"table": os.path.abspath(self.prompts.path), "version": self.prompts.version,
                             "epoch": prompts["epoch"], "trained_rows": prompts["trained"],
                             "in_flight": len(prompts["pending"])},
                   "test": {"table": os.path.abspath(self.cfg["data"]["test"]), "rows": len(self.test_prompts),
                            "role": "evaluation only"},
                   "update": self.update, "version": self.version}
        with open(os.path.join(tmp, "lineage.json"), "w") as f:
            json.dump(lineage, f)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        if self._catalog_run is not None:
            self._catalog_run.log_artifact(os.path.join(final, "model", "model.safetensors"))
        # The newest three, and update 0 (the warm start, the baseline of every curve).
        for old in self.checkpoints()[1:-3]:
            shutil.rmtree(old, ignore_errors=True)
        self.times["checkpoint"] += time.monotonic() - t0
        return final

    def _save_model(self, directory: str) -> None:
        from ... import llm
        llm.save(self.model, directory)
        src = self.cfg["model"]["checkpoint"]
        if hasattr(self.tok, "alphabet"):
            self.tok.save(directory)
        elif src:
            for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                         "generation_config.json"):
                if os.path.exists(os.path.join(src, name)):
                    shutil.copy(os.path.join(src, name), directory)

    def restore(self) -> bool:
        import torch

        from ... import llm
        ckpts = self.checkpoints()
        if not ckpts:
            return False
        path = ckpts[-1]
        state = torch.load(os.path.join(path, "state.pt"), weights_only=False)
        self.model.load_state_dict(llm.load_state(os.path.join(path, "model")), strict=False)
        if self.value_head is not None and state.get("value_head") is not None:
            self.value_head.load_state_dict(state["value_head"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["py_rng"])
        self.prompts.restore(state["prompts"])
        self.update, self.version = state["update"], state["version"]
        self.counters = Counter(state["counters"])
        self.staleness = Counter({int(k): v for k, v in state["staleness"].items()})
        self.times = dict(state["times"])
        self.first_eval, self.last_eval = state["first_eval"], state["last_eval"]
        self.counters["resumes"] += 1
        _log(f"resumed from {path} (update {self.update}, version {self.version}, "
             f"{len(state['prompts']['pending'])} prompts in flight given out again)")
        return True

    # ------------------------------------------------------------- model
    def setup_model_only(self) -> None:
        """The model (from the checkpoint, or new), the value head (PPO) and
        the optimizer; no data, engine or rewards (data-parallel helpers)."""
        import torch

        from ... import llm
        from .chars import CharTokenizer
        c = self.cfg
        torch.manual_seed(c["run"]["seed"])
        random.seed(c["run"]["seed"])
        if c["model"]["checkpoint"]:
            self.model = llm.load(c["model"]["checkpoint"])
        else:
            self.tok = CharTokenizer()
            self.model = llm.Transformer(self.model_config if hasattr(self, "model_config") else self._new_config())
            # Hugging Face's Llama initialisation: N(0, initializer_range) for
            # every matrix and the embedding (tied to the output here).
            with torch.no_grad():
                for name, p in self.model.named_parameters():
                    if p.dim() == 2:
                        p.normal_(0.0, 0.02)
        lc = c["learner"]
        groups = [{"params": list(self.model.parameters())}]
        self.value_head = None
        if lc["algorithm"] == "ppo":
            # PPO's critic: a linear map of the final hidden state, zero at the start.
            self.value_head = torch.nn.Linear(self.model.config.hidden_size, 1)
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
            groups.append({"params": list(self.value_head.parameters()), "lr": lc["value_lr"] or lc["lr"] * 10})
        self.optimizer = torch.optim.AdamW(groups, lr=lc["lr"], weight_decay=lc["weight_decay"])
        self.version = 0

    def _new_config(self):
        from ... import llm
        m = self.cfg["model"]
        return llm.LlamaConfig(
            vocab_size=self.tok.vocab_size, hidden_size=m["hidden_size"], intermediate_size=m["intermediate_size"],
            num_hidden_layers=m["layers"], num_attention_heads=m["heads"], num_key_value_heads=m["kv_heads"],
            max_position_embeddings=m["max_position_embeddings"], bos_token_id=1, eos_token_id=2,
            tie_word_embeddings=True).validate()

    def make_learner(self, resumed: bool) -> None:
        from ... import llm
        from .learner import GRPOLearner, PPOLearner
        c, lc = self.cfg, self.cfg["learner"]
        ref = None
        if lc["kl_coef"]:
            # The reference is the policy the RL phase started from: the warm
            # start (update 0, kept), also after a resume.
            import copy
            ref = llm.load(os.path.join(self.checkpoints()[0], "model")) if resumed else copy.deepcopy(self.model)
            ref.eval()
        common = dict(clip_low=lc["clip_low"], clip_high=lc["clip_high"], token_budget=lc["token_budget"],
                      max_grad_norm=lc["max_grad_norm"], temperature=c["rollout"]["temperature"])
        if self.value_head is not None:
            self.learner = PPOLearner(self.model, self.optimizer, self.value_head, c["rollout"]["group_size"],
                                      gamma=lc["gamma"], lam=lc["gae_lambda"], value_coef=lc["value_coef"],
                                      value_clip=lc["value_clip"] or None, epochs=lc["ppo_epochs"], **common)
        else:
            self.learner = GRPOLearner(
                self.model, self.optimizer, c["rollout"]["group_size"], algorithm=lc["algorithm"],
                aggregation=lc["aggregation"] or None, sequence_ratio=lc["sequence_ratio"],
                drop_uninformative=lc["drop_uninformative"], ref_model=ref, kl_coef=lc["kl_coef"],
                kl_estimator=lc["kl_estimator"], tis_cap=lc["tis_cap"] or None, **common)

    def build(self) -> bool:
        from ... import llm
        c = self.cfg
        self.setup_model_only()
        resumed = self.restore()
        if not resumed and c["sft"]["steps"]:
            self.sft()
        self.make_learner(resumed)
        if not resumed:
            # The optimizer of the RL phase starts fresh after the warm start.
            self.optimizer.state.clear()
        init = os.path.join(self.run_dir, "engine-init")
        shutil.rmtree(init, ignore_errors=True)
        self._save_model(init)
        self.engine = llm.Engine(init, dtype=c["model"]["engine_dtype"], threads=c["run"]["threads"],
                                 max_running=1024, max_step_tokens=2048, kv_cache_bytes=256 << 20,
                                 version=self.version)
        self.workers = None
        if c["rollout"]["workers"]:
            from .workers import RolloutWorkers
            self.workers = RolloutWorkers(self.config_path, self.run_dir, c["rollout"]["workers"], init,
                                          self.version, c["rollout"]["group_size"])
            _log(f"{c['rollout']['workers']} rollout worker processes, replay and weights on "
                 f"{self.workers.server.address}")
        from .reward_pool import RewardPool
        rc = c["reward"]
        self.pool = RewardPool(self.verifier, workers=rc["workers"], timeout=rc["timeout_s"],
                               memory_mb=rc["memory_mb"] or None, failure_value=rc["failure_value"])
        return resumed

    def sft(self) -> None:
        """A short supervised warm start: cross-entropy on the answer tokens of
        training problems (prompt, then the answer written out, then EOS)."""
        import flywheel
        import torch
        sc, d = self.cfg["sft"], self.cfg["data"]
        t0 = time.monotonic()
        opt = torch.optim.AdamW(self.model.parameters(), lr=sc["lr"])
        # Linear warm-up over the first 100 steps, then constant.
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))
        loader = flywheel.Loader(d["train"], batch_size=sc["batch_size"], columns=[d["prompt"], d["answer"]],
                                 seed=self.cfg["run"]["seed"] + 7919, num_threads=1)
        it = iter(())
        losses = []
        self.model.train()
        for step in range(sc["steps"]):
            b = next(it, None)
            if b is None:
                it = iter(loader)
                b = next(it)
            seqs, masks = [], []
            for p, a in zip(b[d["prompt"]], b[d["answer"]]):
                p = p.decode() if isinstance(p, bytes) else str(p)
                a = a.item() if hasattr(a, "item") else a
                prompt = self.encode(p)
                if self.cfg["rollout"]["tool"] == "calculator":
                    # A worked example with the tool: the policy writes the
                    # expression and "=", the calculator's reply (no loss),
                    # then the answer.
                    call = self.tok.encode(p.replace(" ", "").rstrip("=") + "=")
                    reply = self.tok.encode(f"{a} ")
                    final = self.tok.encode(str(a)) + [self.eos]
                    seqs.append(prompt + call + reply + final)
                    masks.append([False] * len(prompt) + [True] * len(call) + [False] * len(reply)
                                 + [True] * len(final))
                    continue
                target = self.tok.encode(str(a)) + [self.eos]
                seqs.append(prompt + target)
                masks.append([False] * len(prompt) + [True] * len(target))
            t = max(len(s) for s in seqs)
            ids = torch.zeros(len(seqs), t, dtype=torch.long)
            mask = torch.zeros(len(seqs), t, dtype=torch.bool)
            for i, (s, mk) in enumerate(zip(seqs, masks)):
                ids[i, :len(s)] = torch.as_tensor(s)
                mask[i, :len(s)] = torch.as_tensor(mk)
            logits = self.model(ids)
            # Token j is predicted at position j - 1.
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                     ids[:, 1:].reshape(-1), reduction="none")
            m = mask[:, 1:].reshape(-1).float()
            loss = (loss * m).sum() / m.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
        loader.close()
        self.times["sft_s"] = time.monotonic() - t0
        _log(f"SFT warm start: {sc['steps']} steps of {sc['batch_size']} in {self.times['sft_s']:.1f} s, "
             f"loss {np.mean(losses[:10]):.3f} -> {np.mean(losses[-10:]):.3f}")

    # ------------------------------------------------------------ rollout
    def _sample_params(self) -> Dict[str, Any]:
        return rollout.sample_params(self.cfg["rollout"], self.eos)

    def generate_sync(self, items, salt: int = 0) -> List[List[Dict[str, Any]]]:
        g = self.cfg["rollout"]["group_size"]
        seed = (self.cfg["run"]["seed"] * 1_000_003 + self.update * 7919 + salt * 104_729) % (1 << 62)
        if self.cfg["rollout"]["tool"]:
            out = self.generate_turns([p for _, _, p, _ in items], [a for _, _, _, a in items], g, seed,
                                      self.cfg["rollout"]["temperature"])
            return [out[k * g:(k + 1) * g] for k in range(len(items))]
        prompts = [self.encode(p) for _, _, p, _ in items]
        out = self.engine.generate(prompts, n=g, seed=seed, **self._sample_params())
        return [[dict(o, prompt_ids=prompts[k]) for o in out[k * g:(k + 1) * g]] for k in range(len(items))]

    def generate_turns(self, texts: Sequence[str], answers: Sequence[Any], n: int, seed: int,
                       temperature: float) -> List[Dict[str, Any]]:
        return rollout.turns(self.engine, self.tok, self.cfg["rollout"], self.eos, [self.encode(t) for t in texts],
                             texts, answers, n, seed, temperature)

    def score(self, items, groups) -> Tuple[List[float], Dict[str, float]]:
        """Rewards of every answer (scored here, or by the rollout worker
        that made it: ``o["reward"]``), overlong shaping, response-length
        statistics, and the trajectories to log."""
        rc = self.cfg["reward"]
        texts, answers = [], []
        for (_, _, _, a), group in zip(items, groups):
            for o in group:
                texts.append(self.decode(o["tokens"]))
                answers.append(a)
        if all("reward" in o for group in groups for o in group):
            rewards = [o["reward"] for group in groups for o in group]
            for o in (o for group in groups for o in group):
                for k, v in o["failures"].items():
                    self.counters[f"reward_failures_{k}"] += v
        else:
            before = dict(self.pool.failures)
            rewards = self.pool.score(list(zip(texts, answers)))
            for k, v in self.pool.failures.items():
                self.counters[f"reward_failures_{k}"] += v - before.get(k, 0)
        mnt = self.cfg["rollout"]["max_new_tokens"]
        lengths = [len(o["tokens"]) for group in groups for o in group]
        if rc["overlong_buffer"]:
            import torch

            from .losses import overlong_penalty
            pen = overlong_penalty(torch.tensor(lengths, dtype=torch.float32), mnt, rc["overlong_buffer"])
            rewards = [r + float(p) for r, p in zip(rewards, pen)]
        clipped = [o["finish_reason"] == "length" for group in groups for o in group]
        extra = {"response_len_mean": float(np.mean(lengths)), "response_len_max": float(max(lengths)),
                 "clipped_frac": float(np.mean(clipped))}
        if self.cfg["rollout"]["tool"]:
            extra["tool_calls"] = sum(o.get("tool_calls", 0) for group in groups for o in group)
        n_log = self.cfg["run"]["log_rollouts"]
        if n_log:
            # A sample of the update's trajectories as trained: ids, the loss
            # mask (0 on the environment's tokens), versions, text, reward.
            with open(os.path.join(self.run_dir, "rollouts.jsonl"), "a") as f:
                flat = [o for group in groups for o in group]
                for o, text, r in list(zip(flat, texts, rewards))[:n_log]:
                    f.write(json.dumps({"update": self.update + 1, "prompt_ids": o["prompt_ids"],
                                        "tokens": o["tokens"], "loss_mask": o.get("loss_mask") or
                                        [True] * len(o["tokens"]), "versions": o["versions"],
                                        "logprobs": o["logprobs"], "text": text, "reward": r}) + "\n")
        return rewards, extra

    def dynamic_sampling(self, items, groups, rewards, extra, more):
        """DAPO's dynamic sampling (``[rollout] dynamic_sampling``): groups
        whose rewards are all equal carry no GRPO signal; they are dropped
        (their prompts count as seen this epoch) and ``more(n)`` (n fresh
        prompts and their groups) refills the batch, for at most
        ``max_refill_rounds`` rounds. Returns the informative groups, their
        rewards, the metrics and the seconds spent generating refills."""
        r = self.cfg["rollout"]
        if not r["dynamic_sampling"]:
            return items, groups, rewards, extra, 0.0
        g, ppu = r["group_size"], r["prompts_per_update"]
        kept_items, kept_groups, kept_rewards, uniform, sampled = [], [], [], [], list(rewards)

        def sift(its, grs, rws):
            for k, (it, gr) in enumerate(zip(its, grs)):
                rs = rws[k * g:(k + 1) * g]
                if max(rs) - min(rs) > 1e-9:
                    kept_items.append(it)
                    kept_groups.append(gr)
                    kept_rewards.extend(rs)
                else:
                    uniform.append(it)
        sift(items, groups, rewards)
        rounds, gen_s = 0, 0.0
        while len(kept_items) < ppu and rounds < r["max_refill_rounds"] and not self._stop.is_set():
            n = ppu - len(kept_items)
            t0 = time.monotonic()
            its, grs = more(n)
            gen_s += time.monotonic() - t0
            if len(its) < n:
                break  # stopping
            rws, _ = self.score(its, grs)
            sampled.extend(rws)
            self.counters["groups_refilled"] += n
            sift(its, grs, rws)
            rounds += 1
        self.counters["groups_dropped_uniform"] += len(uniform)
        self.prompts.done(uniform)
        if len(kept_items) < ppu:
            self.counters["updates_short_after_refill"] += 1
        extra = dict(extra, reward_mean_sampled=float(np.mean(sampled)), refill_rounds=rounds,
                     groups_uniform=len(uniform))
        return kept_items, kept_groups, kept_rewards, extra, gen_s

    def evaluate(self) -> Dict[str, Any]:
        """Greedy accuracy on the held-out split with the engine's current weights."""
        from .rewards import numeric_answer
        t0 = time.monotonic()
        if self.workers is not None and self._weights is not None and \
                self.engine.weight_version != self._weights[1]:
            self.engine.update_weights_from_arrays(*self._weights)  # rollout workers hold the newest
        if self.cfg["rollout"]["tool"]:
            out = self.generate_turns(self.test_texts, self.test_answers, 1, 0, 0.0)
        else:
            out = self.engine.generate(self.test_prompts, max_new_tokens=self.cfg["rollout"]["max_new_tokens"],
                                       temperature=0.0, stop_ids=[self.eos])
        texts = [self.decode(o["tokens"]) for o in out]
        correct = [numeric_answer(t, a) for t, a in zip(texts, self.test_answers)]
        rewards = self.pool.score(list(zip(texts, self.test_answers)))
        ev = {"update": self.update, "version": self.version, "accuracy": float(np.mean(correct)),
              "reward_mean": float(np.mean(rewards)), "n": len(texts),
              "elapsed_s": round(time.monotonic() - self.start + self.elapsed_before, 2),
              "example": {"response": texts[0], "answer": str(self.test_answers[0])}}
        if self.first_eval is None:
            self.first_eval = ev
        self.last_eval = ev
        with open(os.path.join(self.run_dir, "eval.jsonl"), "a") as f:
            f.write(json.dumps(ev) + "\n")
        self.times["eval"] += time.monotonic() - t0
        return ev

    # ------------------------------------------------------------- train
    def train_on(self, items, groups, rewards, extra: Dict[str, Any]) -> Dict[str, Any]:
        from .learner import Rollout
        c = self.cfg
        rollouts, correct = [], []
        max_stale = c["run"]["max_staleness"]
        kept_items, dropped = [], 0
        k = 0
        for gi, (item, group) in enumerate(zip(items, groups)):
            lags = [self.version - v for o in group for v in o["versions"]]
            for lag in lags:
                self.staleness[lag] += 1
            stale = bool(lags) and max(lags) > max_stale
            if stale and c["run"]["stale"] == "drop":
                dropped += 1
                k += len(group)
                continue
            kept_items.append(item)
            for o in group:
                rollouts.append(Rollout(prompt=o["prompt_ids"], response=o["tokens"], behaviour_logprobs=o["logprobs"],
                                        reward=rewards[k], group=gi, versions=o["versions"],
                                        loss_mask=o.get("loss_mask")))
                correct.append(stale)
                k += 1
        self.counters["groups_stale_dropped"] += dropped
        self.counters["groups_stale_corrected"] += sum(correct) // c["rollout"]["group_size"]
        metrics: Dict[str, Any] = {}
        if rollouts:
            # Answers cut at max_new_tokens without EOS: train on the tokens there are.
            metrics = self.learner_step(rollouts, correct if any(correct) else None)
        self.prompts.done(items)
        self.counters["groups_dropped_uniform"] += int(metrics.get("groups_dropped", 0))
        metrics.update(extra)
        metrics["groups_stale_dropped"] = dropped
        return metrics

    # ---------------------------------------------------- data parallel
    def start_data_parallel(self) -> None:
        """``[learner] world_size = N``: N - 1 helper processes join this one
        under torch.distributed (gloo); each update's groups are split
        between the ranks and the gradients summed (GRPOLearner), so the
        step is the one a single learner takes on the whole batch."""
        import torch.distributed as dist
        self.world = self.cfg["learner"]["world_size"]
        self.helpers: List[subprocess.Popen] = []
        if self.world == 1:
            return
        launcher = launched_by()
        if launcher is not None:
            # torchrun / mpirun started the other ranks (on this or other hosts).
            init_method = "env://"
        else:
            init = os.path.join(self.run_dir, f"dist-init-{os.getpid()}-{time.monotonic_ns()}")
            init_method = "file://" + init
            for rank in range(1, self.world):
                self.helpers.append(subprocess.Popen(
                    [sys.executable, "-m", "flywheel.rl.lm.job", self.config_path, "--run-dir", self.run_dir,
                     "--learner-rank", str(rank), "--dist-init", init_method, "--child"]))
        dist.init_process_group("gloo", init_method=init_method, rank=0, world_size=self.world)
        # Every rank starts from this one's weights and optimizer state.
        dist.broadcast_object_list([{"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}],
                                   src=0)
        _log(f"data-parallel learners: {self.world} ranks (gloo{', ' + launcher[0] if launcher else ''})")

    def learner_step(self, rollouts, correct):
        if getattr(self, "world", 1) == 1:
            return self.learner.step(rollouts, correct=correct)
        import torch.distributed as dist
        dist.broadcast_object_list([(rollouts, correct)], src=0)
        mine, flags = _shard(rollouts, correct, self.cfg["rollout"]["group_size"], 0, self.world)
        return self.learner.step(mine, correct=flags)

    def stop_data_parallel(self) -> None:
        if getattr(self, "world", 1) == 1:
            return
        import torch.distributed as dist
        dist.broadcast_object_list([None], src=0)
        for h in self.helpers:
            h.wait(timeout=60)
        dist.destroy_process_group()

    def publish(self) -> None:
        """The next version's weights, for the engine (``self._weights``)."""
        self.version += 1
        self._weights = (self.learner.weights(), self.version)

    # --------------------------------------------------------------- run
    def log(self, metrics: Dict[str, Any], tokens_generated: int, wall: float) -> None:
        line = {"update": self.update, "version": self.version, "epoch": self.prompts.epoch,
                "tokens_generated": tokens_generated, "wall_s": round(wall, 4),
                "elapsed_s": round(time.monotonic() - self.start + self.elapsed_before, 2)}
        line.update({k: (round(v, 6) if isinstance(v, float) else v) for k, v in metrics.items()})
        with open(os.path.join(self.run_dir, "metrics.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")

    def run(self) -> int:
        c = self.cfg
        self.setup()
        self.start = time.monotonic()
        self.elapsed_before = 0.0
        from ... import catalog as _catalog
        if c["run"]["catalog"]:
            _catalog.use(c["run"]["catalog"])  # this process's catalog: the Loader's lineage goes there too
        cat = _catalog.default_catalog()
        with _catalog.run(f"flywheel run {c['run']['name']}", params={"config": c}, catalog=cat) as crun:
            self._catalog_run = crun if crun.id is not None else None
            if self._catalog_run is not None:
                import flywheel
                crun.add_input(flywheel.Table.open(c["data"]["test"]), {"role": "evaluation only"})
            resumed = self.build()
            self._dashboard = None
            if c["run"]["metrics_port"] >= 0:
                srv = serve_metrics(self, c["run"]["metrics_port"])
                url = f"http://127.0.0.1:{srv.server_address[1]}/metrics"
                _log(f"metrics on {url}")
                if c["run"]["dashboard_port"] >= 0:
                    self._dashboard = start_dashboard(url, c["run"]["dashboard_port"])
            self.elapsed_before = self.times.get("elapsed_s", 0.0)
            if self.first_eval is None:
                ev = self.evaluate()
                _log(f"held-out greedy accuracy at the start: {ev['accuracy']:.3f} on {ev['n']} problems")
            if not resumed:
                self.save()
            self.start_data_parallel()
            handler = lambda *_: self._stop.set()  # noqa: E731
            signal.signal(signal.SIGTERM, handler)
            signal.signal(signal.SIGINT, handler)
            try:
                if self.workers is not None:
                    reason = self.loop_workers()
                else:
                    reason = self.loop_async() if c["run"]["mode"] == "async" else self.loop_sync()
            except BaseException:
                if self.workers is not None:
                    self.workers.close()
                raise
            self.stop_data_parallel()
            ev = self.evaluate() if self.last_eval is None or self.last_eval["update"] != self.update else self.last_eval
            self.save()
            self.finish(reason, ev)
        return 0

    def _done(self) -> Optional[str]:
        c = self.cfg["run"]
        if self._stop.is_set():
            return "stopped"
        if self.update >= c["max_updates"]:
            return "max_updates"
        if time.monotonic() - self.start + self.elapsed_before >= c["max_seconds"]:
            return "max_seconds"
        return None

    def _after_update(self, metrics, tokens_generated, wall) -> None:
        c = self.cfg["run"]
        self.update += 1
        self.counters["tokens_generated"] += tokens_generated
        self.counters["tokens_trained"] += int(metrics.get("tokens", 0))
        self.times["elapsed_s"] = time.monotonic() - self.start + self.elapsed_before
        if self.update % c["eval_interval"] == 0:
            ev = self.evaluate()
            metrics["eval_accuracy"] = ev["accuracy"]
        self.log(metrics, tokens_generated, wall)
        self.last_metrics = metrics
        if self.update % c["checkpoint_interval"] == 0:
            self.save()
        now = time.monotonic()
        if now >= self._next_progress:
            self._next_progress = now + c["progress_interval_s"]
            el = now - self.start
            acc = f", held-out accuracy {self.last_eval['accuracy']:.3f} (update {self.last_eval['update']})" \
                if self.last_eval else ""
            _log(f"update {self.update} (v{self.version}, epoch {self.prompts.epoch}): reward "
                 f"{metrics.get('reward_mean', 0):.3f}{acc}; {self.counters['tokens_generated'] / max(el, 1e-9):.0f} "
                 f"tokens/s generated, {self.counters['tokens_trained'] / max(el, 1e-9):.0f} trained")

    def loop_sync(self) -> str:
        c = self.cfg
        self._next_progress = time.monotonic() + c["run"]["progress_interval_s"]
        while True:
            reason = self._done()
            if reason:
                return reason
            t0 = time.monotonic()
            items = self.prompts.take(c["rollout"]["prompts_per_update"])
            groups = self.generate_sync(items)
            t1 = time.monotonic()
            rewards, extra = self.score(items, groups)
            ntok = sum(len(o["tokens"]) for g in groups for o in g)
            refills = 0

            def more(n):
                nonlocal ntok, refills
                refills += 1  # each refill samples with seeds of its own
                its = self.prompts.take(n)
                grs = self.generate_sync(its, refills)
                ntok += sum(len(o["tokens"]) for g in grs for o in g)
                return its, grs
            items, groups, rewards, extra, refill_s = self.dynamic_sampling(items, groups, rewards, extra, more)
            t2 = time.monotonic()
            metrics = self.train_on(items, groups, rewards, extra)
            t3 = time.monotonic()
            self.publish()
            arrays, version = self._weights
            self.engine.update_weights_from_arrays(arrays, version)
            t4 = time.monotonic()
            for stage, dt in (("generate", t1 - t0 + refill_s), ("reward", t2 - t1 - refill_s), ("train", t3 - t2),
                              ("sync", t4 - t3)):
                self.times[stage] += dt
            self._after_update(metrics, ntok, t4 - t0)

    def loop_async(self) -> str:
        """Generation in a thread (the engine releases the GIL), training here."""
        c = self.cfg
        ppu, g = c["rollout"]["prompts_per_update"], c["rollout"]["group_size"]
        lead = max(1, c["run"]["max_staleness"]) * ppu
        done_q: "queue.Queue" = queue.Queue(maxsize=lead)
        self._weights = None
        pending_weights: Dict[str, Any] = {}
        gen_error: List[BaseException] = []
        gen_tokens = [0]
        lock = threading.Lock()

        def generator():
            try:
                requests: Dict[int, Tuple[Any, List[int], List[Dict[str, Any]]]] = {}
                n_submit = 0
                while not self._stop.is_set():
                    with lock:
                        w = pending_weights.pop("w", None)
                    held = False
                    if w is not None and (c["run"]["partial_rollouts"] or not requests):
                        self.engine.update_weights_from_arrays(*w)
                    elif w is not None:
                        # Without partial rollouts the engine drains first:
                        # no new prompts until the new weights are in.
                        held = True
                        with lock:
                            pending_weights.setdefault("w", w)
                    # Generation runs at most max_staleness updates ahead of
                    # the learner (groups waiting + groups in the engine), so
                    # that what it makes is not too old to train on.
                    while not held and len(requests) < ppu and done_q.qsize() + len(requests) < lead:
                        item = self.prompts.take(1)[0]
                        ids = self.encode(item[2])
                        seed = (c["run"]["seed"] * 1_000_003 + n_submit * 7919) % (1 << 62)
                        n_submit += 1
                        rid = self.engine.submit(ids, n=g, seed=seed, **self._sample_params())
                        requests[rid] = (item, ids, [])
                    if not requests:
                        time.sleep(0.002)
                        continue
                    self.engine.step()
                    for o in self.engine.take_finished():
                        item, ids, outs = requests[o["request_id"]]
                        o["prompt_ids"] = ids
                        outs.append(o)
                        gen_tokens[0] += len(o["tokens"])
                        if len(outs) == g:
                            del requests[o["request_id"]]
                            outs.sort(key=lambda x: x["sample"])
                            while not self._stop.is_set():
                                try:
                                    done_q.put((item, outs), timeout=0.1)
                                    break
                                except queue.Full:
                                    continue
            except BaseException as e:  # noqa: BLE001 (reported by the learner loop)
                gen_error.append(e)
                self._stop.set()

        th = threading.Thread(target=generator, name="flywheel-generate", daemon=True)
        th.start()
        self._next_progress = time.monotonic() + c["run"]["progress_interval_s"]
        reason = None
        try:
            while True:
                reason = self._done()
                if reason:
                    break
                t0 = time.monotonic()
                batch = []
                while len(batch) < ppu and not self._stop.is_set():
                    try:
                        batch.append(done_q.get(timeout=0.1))
                    except queue.Empty:
                        continue
                if len(batch) < ppu:
                    continue
                t1 = time.monotonic()
                items = [b[0] for b in batch]
                groups = [b[1] for b in batch]
                rewards, extra = self.score(items, groups)
                t2 = time.monotonic()
                metrics = self.train_on(items, groups, rewards, extra)
                t3 = time.monotonic()
                self.publish()
                with lock:
                    pending_weights["w"] = self._weights
                t4 = time.monotonic()
                for stage, dt in (("wait", t1 - t0), ("reward", t2 - t1), ("train", t3 - t2), ("sync", t4 - t3)):
                    self.times[stage] += dt
                with lock:
                    ntok, gen_tokens[0] = gen_tokens[0], 0
                self._after_update(metrics, ntok, t4 - t0)
        finally:
            stop_reason = self._stop.is_set()
            self._stop.set()
            th.join()
            if gen_error:
                raise gen_error[0]
            if not stop_reason:
                self._stop.clear()
            # Answers still in the engine or the queue are lost; their prompts
            # stay in flight and are given out again after a resume.
            self.counters["groups_lost_at_stop"] += done_q.qsize()
            if self._weights:  # the evaluation at the end uses the newest weights
                self.engine.update_weights_from_arrays(*self._weights)
        return reason or "stopped"

    def loop_workers(self) -> str:
        """Generation in rollout worker processes (``[rollout] workers``):
        prompts go out to them, finished groups come back as replay items
        with their rewards, new weights go out through the weight service.
        ``sync``: one update's prompts at a time, generated with the newest
        weights. ``async``: up to ``max_staleness`` updates' prompts out
        while the learner trains."""
        c = self.cfg
        ppu = c["rollout"]["prompts_per_update"]
        sync = c["run"]["mode"] == "sync"
        lead = ppu if sync else max(1, c["run"]["max_staleness"]) * ppu
        W = self.workers
        seed0 = c["run"]["seed"] * 1_000_003
        n_submit = self.update * ppu
        self._next_progress = time.monotonic() + c["run"]["progress_interval_s"]

        def give_out(n: int) -> None:
            nonlocal n_submit
            for _ in range(n):
                item = self.prompts.take(1)[0]
                W.submit(item, self.encode(item[2]), item[3], (seed0 + n_submit * 7919) % (1 << 62),
                         self.version if sync else 0)
                n_submit += 1
        reason = None
        while reason is None:
            reason = self._done()
            if reason:
                break
            t0 = time.monotonic()
            give_out(lead - W.in_flight())
            batch = W.take(ppu, self._stop)
            for k, v in W.take_counters().items():
                self.counters[k] += v
            if len(batch) < ppu:
                continue
            if not sync:
                give_out(lead - W.in_flight())  # the workers go on generating while this batch trains
            batch.sort(key=lambda b: b[0])  # in the order given out: sync runs repeat exactly
            t1 = time.monotonic()
            items = [b[1][0] for b in batch]
            groups = [b[2] for b in batch]
            rewards, extra = self.score(items, groups)
            ntok = sum(len(o["tokens"]) for g in groups for o in g)

            def more(n):
                nonlocal ntok
                give_out(n)
                got = W.take(n, self._stop)
                got.sort(key=lambda b: b[0])
                ntok += sum(len(o["tokens"]) for b in got for o in b[2])
                return [b[1][0] for b in got], [b[2] for b in got]
            items, groups, rewards, extra, refill_s = self.dynamic_sampling(items, groups, rewards, extra, more)
            t2 = time.monotonic()
            metrics = self.train_on(items, groups, rewards, extra)
            t3 = time.monotonic()
            self.publish()
            W.publish(*self._weights)
            t4 = time.monotonic()
            for stage, dt in (("generate" if sync else "wait", t1 - t0 + refill_s), ("reward", t2 - t1 - refill_s),
                              ("train", t3 - t2), ("sync", t4 - t3)):
                self.times[stage] += dt
            self._after_update(metrics, ntok, t4 - t0)
        # Groups still out are lost; their prompts stay in flight and are
        # given out again after a resume.
        self.counters["groups_lost_at_stop"] += W.in_flight()
        return reason

    def finish(self, reason: str, ev: Dict[str, Any]) -> None:
        wall = time.monotonic() - self.start + self.elapsed_before
        first = self.first_eval or ev
        result = {"reason": reason, "updates": self.update, "version": self.version,
                  "accuracy_start": first["accuracy"], "accuracy_end": ev["accuracy"],
                  "reward_start": first["reward_mean"], "reward_end": ev["reward_mean"],
                  "held_out": ev["n"], "wall_s": round(wall, 1), "sft_s": round(self.times.get("sft_s", 0.0), 1),
                  "times": {s: round(self.times[s], 2) for s in STAGES},
                  "counters": dict(self.counters),
                  "staleness": {str(k): v for k, v in sorted(self.staleness.items())},
                  "tokens_per_s_trained": self.counters["tokens_trained"] / max(wall, 1e-9),
                  "tokens_per_s_generated": self.counters["tokens_generated"] / max(wall, 1e-9)}
        with open(os.path.join(self.run_dir, "result.json"), "w") as f:
            json.dump(result, f, indent=1)
        total = sum(self.times[s] for s in STAGES) or 1.0
        split = ", ".join(f"{s} {100 * self.times[s] / total:.0f}%" for s in STAGES if self.times[s] > 0)
        _log(f"{reason} after {self.update} updates, {wall:.0f} s: held-out accuracy "
             f"{first['accuracy']:.3f} -> {ev['accuracy']:.3f} on {ev['n']} problems")
        _log(f"time split: {split}")
        self.pool.close()
        if self.workers is not None:
            self.workers.close()
        if getattr(self, "_dashboard", None) is not None:
            self._dashboard.terminate()
            self._dashboard.wait(timeout=10)


def _shard(rollouts, correct, group_size: int, rank: int, world: int):
    """Rank ``rank``'s share of whole groups (contiguous, sizes within one)."""
    n = len(rollouts) // group_size
    lo, hi = rank * n // world * group_size, (rank + 1) * n // world * group_size
    return rollouts[lo:hi], (correct[lo:hi] if correct is not None else None)


def launched_by() -> Optional[Tuple[str, int, int]]:
    """``(launcher, rank, world size)`` when torchrun or mpirun started this
    process as one of several ranks, else None. torchrun sets RANK,
    WORLD_SIZE, MASTER_ADDR and MASTER_PORT; under mpirun (Open MPI's
    OMPI_COMM_WORLD_*, or PMI_RANK / PMI_SIZE) MASTER_ADDR and MASTER_PORT
    must be given (``mpirun -x MASTER_ADDR=host0 -x MASTER_PORT=29500``)."""
    env = os.environ
    for launcher, rk, ws in (("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                             ("mpirun", "PMI_RANK", "PMI_SIZE"),
                             ("torchrun", "RANK", "WORLD_SIZE")):
        if rk in env and ws in env and int(env[ws]) > 1:
            missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
            if missing:
                raise lmconfig.ConfigError(f"started by {launcher} as rank {env[rk]} of {env[ws]}, but "
                                           f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                                           "not set (the address of rank 0, for torch.distributed)")
            env.setdefault("RANK", env[rk])
            env.setdefault("WORLD_SIZE", env[ws])
            return launcher, int(env[rk]), int(env[ws])
    return None


def learner_helper(cfg: Dict[str, Dict[str, Any]], config_path: str, run_dir: str, rank: int,
                   init_method: str) -> int:
    """Rank ``rank`` > 0 of a data-parallel learner: the model and optimizer
    of rank 0, then one GRPO step on its share of each update's groups."""
    import torch
    import torch.distributed as dist

    job = Job(cfg, run_dir)
    job.config_path = config_path
    torch.set_num_threads(cfg["run"]["threads"])
    job.setup_model_only()
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=cfg["learner"]["world_size"])
    box = [None]
    dist.broadcast_object_list(box, src=0)
    job.model.load_state_dict(box[0]["model"])
    job.optimizer.load_state_dict(box[0]["optimizer"])
    job.make_learner(resumed=True)
    while True:
        box = [None]
        dist.broadcast_object_list(box, src=0)
        if box[0] is None:
            break
        rollouts, correct = box[0]
        mine, flags = _shard(rollouts, correct, cfg["rollout"]["group_size"], rank, cfg["learner"]["world_size"])
        job.learner.step(mine, correct=flags)
    dist.destroy_process_group()
    return 0


# -------------------------------------------------------------- supervisor
def supervise(argv: List[str], run_dir: str, max_restarts: int = 5) -> int:
    """Runs the job as a child process, restarting it (it resumes from its
    newest checkpoint) when it dies of a signal it did not ask for."""
    restarts = 0
    log_path = os.path.join(run_dir, "job.log")
    while True:
        cmd = [sys.executable, "-m", "flywheel.rl.lm.job", *argv, "--child"]
        with open(log_path, "a") as log:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
            with open(os.path.join(run_dir, "pids.json"), "w") as f:
                json.dump({"supervisor": os.getpid(), "job": proc.pid, "restarts": restarts}, f)

            def forward(signum, _frame, p=proc):
                p.send_signal(signum)
            signal.signal(signal.SIGINT, forward)
            signal.signal(signal.SIGTERM, forward)

            def copy(out=proc.stdout, log=log):
                for line in out:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                    log.write(line)
                    log.flush()
            # A reader thread: the pipe may outlive the job (a process it
            # started), so the job's exit, not the pipe's end, is waited for.
            reader = threading.Thread(target=copy, daemon=True)
            reader.start()
            rc = proc.wait()
            reader.join(timeout=2.0)
        if rc >= 0:
            return rc
        if restarts >= max_restarts:
            _log(f"the job died of signal {-rc} {restarts + 1} times; giving up (log: {log_path})")
            return 1
        restarts += 1
        _log(f"the job died of signal {-rc}; resuming it from its newest checkpoint (restart {restarts})")
        time.sleep(min(0.5 * restarts, 5.0))


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="flywheel run", description="RL for language models (docs/rl.md)")
    ap.add_argument("config")
    ap.add_argument("--run-dir", default="")
    ap.add_argument("--deterministic", action="store_true",
                    help="one thread, fixed seeds (sync mode): identical metrics and weights run to run")
    ap.add_argument("--max-updates", type=int, default=0, help="override [run] max_updates")
    ap.add_argument("--fresh", action="store_true", help="delete the run directory first (default: resume)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--learner-rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--dist-init", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        cfg = lmconfig.load(args.config)
    except lmconfig.ConfigError as e:
        print(f"flywheel run: {e}", file=sys.stderr)
        return 2
    if args.max_updates:
        cfg["run"]["max_updates"] = args.max_updates
    if args.deterministic:
        if cfg["run"]["mode"] != "sync":
            print("flywheel run: --deterministic needs [run] mode = \"sync\"", file=sys.stderr)
            return 2
        cfg["run"]["threads"] = 1
    run_dir = args.run_dir or cfg["run"]["run_dir"] or os.path.join("runs", cfg["run"]["name"])
    try:
        launcher = launched_by()
    except lmconfig.ConfigError as e:
        print(f"flywheel run: {e}", file=sys.stderr)
        return 2
    if launcher is not None:
        # One rank of torchrun / mpirun: the launcher supervises (torchrun
        # --max-restarts); rank 0 is the job, the others its learner helpers.
        name, rank, world = launcher
        cfg["learner"]["world_size"] = world
        if cfg["learner"]["algorithm"] == "ppo":
            print("flywheel run: data-parallel learners run GRPO, Dr. GRPO or RLOO (PPO whitens per batch)",
                  file=sys.stderr)
            return 2
        if rank > 0:
            return learner_helper(cfg, args.config, run_dir, rank, "env://")
        args.child = True
        os.makedirs(run_dir, exist_ok=True)
        shutil.copy(args.config, os.path.join(run_dir, "config.toml"))
    if not args.child and os.path.isdir(run_dir):
        ours = os.path.exists(os.path.join(run_dir, "config.toml")) or not os.listdir(run_dir)
        if args.fresh:
            if not ours:
                print(f"flywheel run: --fresh: {run_dir} is not a flywheel run directory; not deleting it",
                      file=sys.stderr)
                return 2
            shutil.rmtree(run_dir)
        elif os.path.exists(os.path.join(run_dir, "result.json")):
            print(f"flywheel run: {run_dir} holds a finished run (see its result.json); pass --fresh to start "
                  "over or --run-dir for a new one", file=sys.stderr)
            return 2
    os.makedirs(run_dir, exist_ok=True)
    if not args.child:
        shutil.copy(args.config, os.path.join(run_dir, "config.toml"))
        fwd = [args.config, "--run-dir", run_dir] + (["--deterministic"] if args.deterministic else []) + \
              (["--max-updates", str(args.max_updates)] if args.max_updates else [])
        return supervise(fwd, run_dir)
    if args.learner_rank:
        from .reward_pool import _die_with_parent
        _die_with_parent(os.getppid())
        return learner_helper(cfg, args.config, run_dir, args.learner_rank, args.dist_init)
    job = Job(cfg, run_dir, args.deterministic)
    job.config_path = args.config
    try:
        return job.run()
    except lmconfig.ConfigError as e:
        print(f"flywheel run: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
