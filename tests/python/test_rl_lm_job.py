"""`flywheel run` on a language-model config (flywheel.rl.lm.job): bad input
refused before anything starts, a shrunk arithmetic run that raises held-out
accuracy, kill -9 of the job mid-run with exactly-once prompts, async runs
with partial rollouts, determinism, a hanging verifier, and the task
command."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("torch")

FLYWHEEL = os.environ.get("FLYWHEEL_BIN", "flywheel")


def _cli(*args, timeout=600, **kw):
    return subprocess.run([FLYWHEEL, *args], capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def arith(tmp_path_factory):
    """A small task: 1- and 2-digit additions, disjoint train / test."""
    d = tmp_path_factory.mktemp("arith")
    r = _cli("task", "make", "arith", str(d / "t"), "--train", "3000", "--test", "200", "--operators", "+",
             "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert "3000 problems" in r.stdout
    return str(d / "t")


def _config(path, data, **over):
    sections = {
        "run": {"seed": 1, "max_updates": 30, "eval_interval": 10, "checkpoint_interval": 10,
                "progress_interval_s": 1.0, "threads": 1},
        "data": {"train": f"{data}/train", "test": f"{data}/test", "eval_size": 200},
        "model": {"hidden_size": 64, "intermediate_size": 192, "layers": 2, "heads": 4, "kv_heads": 2,
                  "max_position_embeddings": 20},
        "sft": {"steps": 150, "batch_size": 64, "lr": 3e-3},
        "rollout": {"group_size": 8, "prompts_per_update": 16, "max_new_tokens": 5},
        "learner": {"algorithm": "grpo", "lr": 1e-4, "token_budget": 256},
        "reward": {},
    }
    for key, value in over.items():
        section, _, name = key.partition("__")
        if value is None:
            sections[section].pop(name, None)
        else:
            sections[section][name] = value
    lines = []
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        for k, v in keys.items():
            lines.append(f"{k} = {json.dumps(v) if not isinstance(v, bool) else str(v).lower()}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


def _run(cfg, run_dir, *extra, timeout=600):
    return _cli("run", cfg, "--run-dir", str(run_dir), *extra, timeout=timeout)


def _lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.parametrize("over, message", [
    ({"learner__algorithm": "ppo2"}, "[learner] algorithm = 'ppo2': expected one of"),
    ({"learner__clip_low": 0.2, "learner__clip_high": 0.01}, "clip range [1 - 0.2, 1 + 0.01] that makes no sense"),
    ({"learner__clip_low": 1.5}, "[learner] clip_low = 1.5: must be <= 1"),
    ({"data__prompt": "question"}, "has no column 'question'"),
    ({"model__max_position_embeddings": 8}, "does not fit the context"),
    ({"rollout__groupsize": 4}, "[rollout] groupsize: unknown key"),
    ({"learner__algorithm": "ppo", "learner__world_size": 2}, "data-parallel learners run GRPO"),
    ({"reward__verifier": "python", "reward__function": "no_such_module_xyz:score"}, "No module named"),
])
def test_bad_configs_are_refused_before_anything_starts(tmp_path, arith, over, message, capsys):
    # In process (the job's own entry point, without its supervisor): fast.
    from flywheel.rl.lm import job
    cfg = _config(tmp_path / "bad.toml", arith, **over)
    rc = job.main([cfg, "--run-dir", str(tmp_path / "run"), "--child"])
    err = capsys.readouterr().err
    assert rc == 2 and message in err, (rc, err)
    # Nothing trained: no checkpoint, no metrics.
    assert not os.path.exists(tmp_path / "run" / "checkpoints")
    assert not os.path.exists(tmp_path / "run" / "metrics.jsonl")


def test_a_bad_config_through_flywheel_run(tmp_path, arith):
    cfg = _config(tmp_path / "bad.toml", arith, learner__algorithm="ppo2")
    r = _run(cfg, tmp_path / "run", timeout=120)
    assert r.returncode == 2 and "[learner] algorithm = 'ppo2': expected one of" in r.stderr, r.stderr


def test_the_test_split_may_not_be_the_training_table(tmp_path, arith):
    cfg = _config(tmp_path / "bad.toml", arith, data__test=f"{arith}/train")
    r = _run(cfg, tmp_path / "run", timeout=60)
    assert r.returncode == 2 and "held-out split must never enter training" in r.stderr, r.stderr


def test_shrunk_grpo_run_raises_held_out_accuracy_and_records_lineage(tmp_path, arith):
    # The warm start leaves the model right on most problems but not all
    # (greedy); GRPO sharpens it within a few dozen updates.
    cat = tmp_path / "catalog"
    cfg = _config(tmp_path / "grpo.toml", arith, run__max_updates=30, sft__steps=1000,
                  rollout__prompts_per_update=32, run__catalog=str(cat))
    run = tmp_path / "run"
    r = _run(cfg, run)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((run / "result.json").read_text())
    assert res["reason"] == "max_updates" and res["updates"] == 30
    print(f"held-out accuracy {res['accuracy_start']:.3f} -> {res['accuracy_end']:.3f}")
    assert res["accuracy_end"] >= res["accuracy_start"] + 0.10, res
    assert "time split: generate" in r.stdout and "held-out accuracy" in r.stdout
    metrics = _lines(run / "metrics.jsonl")
    assert [m["update"] for m in metrics] == list(range(1, 31))
    m = next(m for m in metrics if m.get("updated"))
    for key in ("reward_mean", "reward_std", "loss", "entropy", "clip_frac_low", "clip_frac_high", "ratio_max",
                "mismatch_kl", "response_len_mean", "response_len_max", "clipped_frac", "tokens_generated",
                "tokens", "grad_norm"):
        assert key in m, key
    # F32 engine and learner: the behaviour log-probs are the learner's.
    assert max(m["mismatch_kl"] for m in metrics if m.get("updated")) < 1e-5
    evals = _lines(run / "eval.jsonl")
    assert [e["update"] for e in evals] == [0, 10, 20, 30]
    # Lineage: the newest checkpoint names the table version and the rows it
    # trained on, none twice within an epoch; the test table only as evaluation.
    ckpt = sorted((run / "checkpoints").iterdir())[-1]
    lin = json.loads((ckpt / "lineage.json").read_text())
    rows = lin["train"]["trained_rows"]["0"]
    assert len(rows) == 30 * 32 and len(set(rows)) == len(rows)
    assert lin["test"]["role"] == "evaluation only"
    assert (ckpt / "model" / "config.json").exists() and (ckpt / "model" / "flywheel_chars.json").exists()
    # flywheel lineage: only the training table trained the checkpoint (the
    # warm start's loader and the prompts' loader), not the held-out table.
    out = _cli("--catalog", str(cat), "lineage", "samples", str(ckpt / "model" / "model.safetensors"), "--json",
               timeout=60)
    assert out.returncode == 0, out.stderr
    sources = json.loads(out.stdout)[0]["sources"]
    assert {s["dataset"] for s in sources} == {"external/train"}
    assert all(s["detail"]["state"]["tables"][0]["uri"].endswith("/t/train") for s in sources)
    prompts = [s for s in sources if s["detail"]["state"]["seed"] == 1]  # the prompts' loader: [run] seed
    assert len(prompts) == 1 and prompts[0]["detail"]["state"]["consumed"] == 30 * 32
    # A finished run is not started over by accident.
    again = _run(cfg, run, timeout=60)
    assert again.returncode == 2 and "finished run" in again.stderr


def test_kill_9_mid_run_resumes_and_no_prompt_repeats_or_is_skipped(tmp_path, arith):
    # 3000 / 16 = 187.5 updates per epoch: 150 updates stay in epoch 0 (and
    # take long enough that the kill lands mid-run on a fast machine).
    n = 150
    cfg = _config(tmp_path / "kill.toml", arith, run__max_updates=n, run__checkpoint_interval=10,
                  run__eval_interval=1000, sft__steps=20)
    run = tmp_path / "run"
    p = subprocess.Popen([FLYWHEEL, "run", cfg, "--run-dir", str(run)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            ckpts = list((run / "checkpoints").glob("update-*")) if (run / "checkpoints").exists() else []
            if any(c.name >= "update-000020" and (c / "state.pt").exists() for c in ckpts):
                break
            time.sleep(0.2)
        # /metrics while it runs (Prometheus text, loopback).
        import re
        import urllib.request
        url = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", (run / "job.log").read_text()).group(1)
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        for name in ("flywheel_lm_updates_total", "flywheel_lm_tokens_generated_total",
                     'flywheel_lm_stage_seconds_total{stage="train"}', 'flywheel_lm_reward_failures_total{kind="timeout"}',
                     'flywheel_lm_update{stat="reward_mean"}', "flywheel_lm_staleness_tokens"):
            assert name in text, name
        status = json.loads(urllib.request.urlopen(url.replace("/metrics", "/"), timeout=10).read())
        assert status["update"] >= 20 and status["eval_curve"][0]["update"] == 0
        time.sleep(0.5)  # past the checkpoint: some updates are lost with the kill
        child = json.loads((run / "pids.json").read_text())["job"]
        os.kill(child, signal.SIGKILL)
        out, _ = p.communicate(timeout=400)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out
    assert "died of signal 9; resuming" in out and "resumed from" in out, out
    res = json.loads((run / "result.json").read_text())
    assert res["updates"] == n and res["counters"]["resumes"] == 1
    lin = json.loads((sorted((run / "checkpoints").iterdir())[-1] / "lineage.json").read_text())
    rows = lin["train"]["trained_rows"]["0"]
    assert len(rows) == n * 16, len(rows)
    assert len(set(rows)) == len(rows), "a prompt was trained on twice within the epoch"
    # None skipped: the rows trained are exactly the first n * 16 of the epoch's order.
    import flywheel
    order = flywheel.Loader(f"{arith}/train", batch_size=16, columns=["prompt"], seed=1, num_threads=1,
                            return_indices=True)
    first = [int(i) for _, b in zip(range(n), order) for i in b["__index__"]]
    assert sorted(first) == sorted(rows)
    metrics = _lines(run / "metrics.jsonl")
    assert metrics[-1]["update"] == n


def test_kill_9_of_a_rollout_worker_loses_its_groups_and_no_prompt(tmp_path, arith):
    """[rollout] workers = 2: the engine runs in two worker processes that
    write answers as replay items. One is stopped while it holds prompts,
    then killed: the job restarts it, counts the groups it lost, gives
    them out again, and trains every prompt of the epoch exactly once."""
    cfg = _config(tmp_path / "w.toml", arith, run__max_updates=30, run__checkpoint_interval=100,
                  run__eval_interval=1000, sft__steps=20, rollout__workers=2, rollout__worker_threads=1,
                  run__log_rollouts=4)
    run = tmp_path / "run"
    p = subprocess.Popen([FLYWHEEL, "run", cfg, "--run-dir", str(run)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (
                (run / "metrics.jsonl").exists() and len(_lines(run / "metrics.jsonl")) >= 5):
            time.sleep(0.1)
        victim = json.loads((run / "workers.json").read_text())["rollout_workers"][0]
        # Stopped, it keeps the prompts of the next update it is given
        # (each worker gets half); killed, they are lost.
        os.kill(victim, signal.SIGSTOP)
        time.sleep(2.0)
        os.kill(victim, signal.SIGKILL)
        out, _ = p.communicate(timeout=400)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out
    assert f"rollout worker {victim} died (signal 9)" in out, out
    res = json.loads((run / "result.json").read_text())
    c = res["counters"]
    assert res["updates"] == 30 and c["rollout_worker_restarts"] == 1, c
    assert c["groups_lost_worker"] >= 1, c
    assert json.loads((run / "workers.json").read_text())["rollout_workers"][0] != victim
    lin = json.loads((sorted((run / "checkpoints").iterdir())[-1] / "lineage.json").read_text())
    rows = lin["train"]["trained_rows"]["0"]
    assert len(rows) == len(set(rows)) == 30 * 16, len(rows)
    import flywheel
    order = flywheel.Loader(f"{arith}/train", batch_size=16, columns=["prompt"], seed=1, num_threads=1,
                            return_indices=True)
    assert sorted(int(i) for _, b in zip(range(30), order) for i in b["__index__"]) == sorted(rows)
    # The answers came back as replay items: prompt, response, per-token
    # log-probs and versions (logged as trained).
    t = _lines(run / "rollouts.jsonl")[0]
    assert t["prompt_ids"] and len(t["tokens"]) == len(t["logprobs"]) == len(t["versions"]) >= 1


def test_dynamic_sampling_refills_the_batch_with_informative_groups(tmp_path, arith):
    """[rollout] dynamic_sampling: groups whose rewards are all equal are
    dropped before the update and fresh prompts refill the batch (DAPO);
    the dropped prompts count as seen, none is given out twice."""
    cfg = _config(tmp_path / "ds.toml", arith, run__max_updates=8, run__eval_interval=1000, sft__steps=150,
                  rollout__dynamic_sampling=True, rollout__max_refill_rounds=2)
    run = tmp_path / "run"
    r = _run(cfg, run)
    assert r.returncode == 0, r.stdout + r.stderr
    c = json.loads((run / "result.json").read_text())["counters"]
    assert c["groups_dropped_uniform"] > 0 and c["groups_refilled"] > 0, c
    for m in _lines(run / "metrics.jsonl"):
        assert m["groups_dropped"] == 0  # the learner saw informative groups only
        assert 1 <= m["refill_rounds"] <= 2 or m["groups_uniform"] == 0, m
    lin = json.loads((sorted((run / "checkpoints").iterdir())[-1] / "lineage.json").read_text())
    rows = lin["train"]["trained_rows"]["0"]
    # Trained plus dropped: every prompt taken, once.
    assert len(rows) == len(set(rows)) == 8 * 16 + c["groups_refilled"], (len(rows), c)


@pytest.mark.parametrize("partial", [True, False])
def test_async_rollouts_bound_staleness(tmp_path, arith, partial):
    cfg = _config(tmp_path / "async.toml", arith, run__mode="async", run__max_staleness=1, run__stale="drop",
                  run__max_updates=25, sft__steps=100, rollout__max_new_tokens=5, run__partial_rollouts=partial,
                  run__log_rollouts=10000)
    run = tmp_path / "run"
    r = _run(cfg, run)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((run / "result.json").read_text())
    assert res["updates"] == 25
    lags = {int(k): v for k, v in res["staleness"].items()}
    # Generation ran ahead of training: some tokens were made by older versions...
    assert sum(v for k, v in lags.items() if k > 0) > 0, lags
    # ...and no trained group held a token more than max_staleness versions old.
    dropped = res["counters"].get("groups_stale_dropped", 0)
    assert all(k <= 1 for k in lags) or dropped > 0, (lags, dropped)
    assert res["accuracy_end"] >= res["accuracy_start"], res
    mixed = [t for t in _lines(run / "rollouts.jsonl") if len(set(t["versions"])) > 1]
    if partial:
        # Whether an answer is in the engine when new weights land depends on
        # timing (the engine's own test swaps mid-answer deterministically:
        # engine_test.cc); when one is, its later tokens carry the new version.
        assert all(t["versions"] == sorted(t["versions"]) for t in mixed)
    else:
        assert not mixed  # the engine drains before new weights land


def test_data_parallel_learners_in_the_job(tmp_path, arith):
    cfg = _config(tmp_path / "dp.toml", arith, learner__world_size=2, run__max_updates=4, run__eval_interval=4,
                  sft__steps=20, data__eval_size=50)
    run = tmp_path / "run"
    r = _run(cfg, run)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "data-parallel learners: 2 ranks (gloo)" in r.stdout
    res = json.loads((run / "result.json").read_text())
    assert res["updates"] == 4
    assert any(m.get("updated") for m in _lines(run / "metrics.jsonl"))

    # The same run under torchrun (two ranks it starts; rank 0 is the job):
    # the same weights.
    import flywheel
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(flywheel.__file__)),
           "FLYWHEEL_EXE": FLYWHEEL}
    run2 = tmp_path / "run-torchrun"
    r2 = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                         "-m", "flywheel.rl.lm.job", cfg, "--run-dir", str(run2)],
                        capture_output=True, text=True, timeout=600, env=env)
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert "data-parallel learners: 2 ranks (gloo, torchrun)" in r2.stdout
    from safetensors.numpy import load_file

    def final(d):
        return load_file(str(sorted((d / "checkpoints").iterdir())[-1] / "model" / "model.safetensors"))
    a, b = final(run), final(run2)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-6, err_msg=k)


def test_ppo_and_rloo_jobs_run(tmp_path, arith):
    for algorithm in ("ppo", "rloo"):
        cfg = _config(tmp_path / f"{algorithm}.toml", arith, learner__algorithm=algorithm, run__max_updates=3,
                      run__eval_interval=3, sft__steps=20, data__eval_size=50)
        run = tmp_path / algorithm
        r = _run(cfg, run)
        assert r.returncode == 0, r.stdout + r.stderr
        metrics = _lines(run / "metrics.jsonl")
        assert len(metrics) == 3
        if algorithm == "ppo":
            assert all("value_loss" in m for m in metrics)


def test_deterministic_sync_runs_repeat_exactly(tmp_path, arith):
    cfg = _config(tmp_path / "det.toml", arith, run__max_updates=5, run__eval_interval=5, sft__steps=20,
                  data__eval_size=50)
    outs = []
    for i in range(2):
        run = tmp_path / f"run{i}"
        r = _run(cfg, run, "--deterministic")
        assert r.returncode == 0, r.stdout + r.stderr
        metrics = _lines(run / "metrics.jsonl")
        for m in metrics:
            for k in ("wall_s", "elapsed_s"):
                m.pop(k)
        weights = (sorted((run / "checkpoints").iterdir())[-1] / "model" / "model.safetensors").read_bytes()
        outs.append((metrics, weights))
    assert outs[0][0] == outs[1][0]
    assert outs[0][1] == outs[1][1]


def test_a_hanging_verifier_gives_the_timeout_value(tmp_path, arith):
    mod = tmp_path / "slow_verifier.py"
    mod.write_text("import time\n"
                   "def score(text, answer):\n"
                   "    if text.endswith('7'):\n"
                   "        time.sleep(60)\n"
                   "    return 1.0 if text == str(answer) else 0.0\n")
    cfg = _config(tmp_path / "hang.toml", arith, run__max_updates=3, run__eval_interval=1000, sft__steps=20,
                  reward__verifier="python", reward__function="slow_verifier:score", reward__timeout_s=0.5,
                  reward__failure_value=-1.0, reward__workers=2)
    run = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    r = _cli("run", cfg, "--run-dir", str(run), env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((run / "result.json").read_text())
    assert res["counters"].get("reward_failures_timeout", 0) > 0, res["counters"]


def test_task_command_refuses_to_overwrite_and_explains_itself(tmp_path, arith):
    r = _cli("task", "make", "arith", arith, "--train", "10", "--test", "5")
    assert r.returncode == 2 and "exists" in r.stderr
    r = _cli("task", "make", "arith", "--help")
    assert r.returncode == 0 and "--operators" in r.stdout
    r = _cli("task", "make", "arith", str(tmp_path / "x"), "--train", "100000", "--test", "5", "--digits", "1")
    assert r.returncode == 2 and "use more digits" in r.stderr


def test_calculator_environment_answers_between_turns():
    from flywheel.rl.lm import textenv
    env = textenv.make("calculator", max_calls=1)
    env.reset("12 + 37 * 4 = ", 160)
    assert env.step("37*4=") == ("148 ", False)
    assert env.step("37*4=148 160=") == (None, True)  # one call per episode
    env.reset("1 - 2 = ", -1)
    assert env.step("1 - 2 =") == ("-1 ", False)
    assert env.step("12") == (None, True)
    with pytest.raises(ValueError, match="unknown text environment"):
        textenv.make("shell")


def test_multi_turn_episodes_store_a_loss_mask_and_only_policy_tokens_get_loss(tmp_path, arith):
    cfg = _config(tmp_path / "tool.toml", arith, rollout__tool="calculator", rollout__max_turns=2,
                  rollout__max_new_tokens=16, model__max_position_embeddings=32, run__max_updates=3,
                  run__eval_interval=3, run__log_rollouts=10000, sft__steps=150)
    run = tmp_path / "run"
    r = _run(cfg, run)
    assert r.returncode == 0, r.stdout + r.stderr
    rollouts = _lines(run / "rollouts.jsonl")
    assert len(rollouts) == 3 * 16 * 8
    calls = [t for t in rollouts if not all(t["loss_mask"])]
    assert calls, "no trajectory called the calculator"
    from flywheel.rl.lm.chars import CharTokenizer
    from flywheel.rl.lm.textenv import _EXPR
    tok = CharTokenizer()
    for t in calls:
        mask, toks = t["loss_mask"], t["tokens"]
        assert len(mask) == len(toks) == len(t["logprobs"]) == len(t["versions"])
        first = mask.index(False)
        last = len(mask) - 1 - mask[::-1].index(False)
        assert all(not m for m in mask[first:last + 1])       # one reply, contiguous
        assert tok.decode(toks[:first]).endswith("=")         # after the policy asked
        reply = tok.decode(toks[first:last + 1])
        a, op, b = _EXPR.search(tok.decode(toks[:first])).groups()
        assert reply.endswith(" ") and int(reply) == {"+": int(a) + int(b), "-": int(a) - int(b),
                                                      "*": int(a) * int(b)}[op]
        assert all(lp == 0.0 for lp in t["logprobs"][first:last + 1])
    assert sum(m.get("tool_calls", 0) for m in _lines(run / "metrics.jsonl")) == len(calls)
    # The warm start on worked examples taught the policy to call the tool.
    assert len(calls) > len(rollouts) // 2, len(calls)


def test_masked_tokens_get_no_loss():
    """The learner's loss and gradient do not depend on masked tokens'
    behaviour log-probs (the environment's tokens)."""
    import torch
    from flywheel import llm
    from flywheel.rl.lm.learner import GRPOLearner, Rollout
    cfg = llm.LlamaConfig(vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    grads = []
    for env_logp in (0.0, -7.0):
        torch.manual_seed(0)
        model = llm.Transformer(cfg)
        learner = GRPOLearner(model, torch.optim.SGD(model.parameters(), lr=0.0), group_size=2)
        rolls = [Rollout(prompt=[1, 5, 6], response=[7, 8, 9, 10], behaviour_logprobs=[-1.0, env_logp, env_logp, -2.0],
                         reward=float(k), group=0, loss_mask=[True, False, False, True]) for k in range(2)]
        m = learner.step(rolls)
        grads.append((m["loss"], [p.grad.clone() for p in model.parameters()]))
    assert grads[0][0] == grads[1][0]
    assert all(torch.equal(a, b) for a, b in zip(grads[0][1], grads[1][1]))


def test_launchers_are_recognised_and_a_missing_rendezvous_is_named(monkeypatch):
    from flywheel.rl.lm import config as lmconfig
    from flywheel.rl.lm.job import launched_by
    for k in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
              "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    assert launched_by() is None
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    with pytest.raises(lmconfig.ConfigError, match="mpirun as rank 1 of 4, but MASTER_ADDR and MASTER_PORT are not"):
        launched_by()
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert launched_by() == ("mpirun", 1, 4)
    assert os.environ["RANK"] == "1" and os.environ["WORLD_SIZE"] == "4"  # what env:// reads
