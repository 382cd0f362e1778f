"""`flywheel run`: the launcher end to end (server + learner + actors), its
supervision (kill -9 an actor or the learner), resume, Ctrl-C, determinism,
mpirun roles and configuration errors. Each run is tiny (a few seconds)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")
from flywheel import _core  # noqa: E402

pytestmark = pytest.mark.skipif(not getattr(_core, "replay_service_available", False),
                                reason="built without gRPC")

BIN = os.environ.get("FLYWHEEL_BIN", "flywheel")

TINY = """
[run]
seed = 3
max_updates = {max_updates}
checkpoint_interval = 2
progress_interval_s = 0.5
[env]
id = "CartPole-v1"
num_envs = 4
[actor]
count = {actors}
unroll_length = 16
[policy]
hidden = [16]
[learner]
algorithm = "{algorithm}"
epochs = 1
minibatches = 1
"""


def write_config(tmp_path, max_updates=5, actors=1, algorithm="ppo", extra=""):
    path = tmp_path / "run.toml"
    path.write_text(TINY.format(max_updates=max_updates, actors=actors, algorithm=algorithm) + extra)
    return str(path)


def start(config, run_dir, *args):
    return subprocess.Popen([BIN, "run", config, "--run-dir", str(run_dir), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finish(proc, timeout=120):
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def metrics(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def wait_for(cond, timeout=60, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def pids(run_dir):
    try:
        with open(os.path.join(run_dir, "pids.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def test_run_trains_writes_the_run_dir_and_stops_at_the_limit(tmp_path):
    cfg = write_config(tmp_path, max_updates=6, actors=2)
    run_dir = tmp_path / "run"
    rc, out = finish(start(cfg, run_dir))
    assert rc == 0, out
    assert "max_updates 6 reached" in out
    assert "learner time:" in out and "actor time:" in out
    lines = metrics(run_dir)
    assert [m["update"] for m in lines] == [1, 2, 3, 4, 5, 6]
    # On-policy: two actors, one unroll each per version, never stale.
    assert all(m["staleness"]["dropped"] == 0 for m in lines)
    assert lines[-1]["env_steps"] == 6 * 2 * 16 * 4
    assert lines[-1]["staleness"]["lags"] == {"0": 12}
    result = json.loads((run_dir / "result.json").read_text())
    assert result["updates"] == 6 and result["solved"] is False
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["actor_totals"]["env_steps"] >= 6 * 2 * 16 * 4
    assert (run_dir / "config.toml").read_text() == open(cfg).read()
    assert sorted(os.listdir(run_dir / "checkpoints"))[-1] == "learner-00000006.pt"
    # A finished run is not silently resumed (it would stop at once)...
    rc, out = finish(start(cfg, run_dir))
    assert rc == 4, out
    assert "holds a finished run" in out and "--fresh" in out
    # ...--fresh starts over.
    rc, out = finish(start(cfg, run_dir, "--fresh"))
    assert rc == 0, out
    assert [m["update"] for m in metrics(run_dir)] == [1, 2, 3, 4, 5, 6]


def test_bad_config_is_refused_with_its_location(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[env]\nid = "CartPole-v1"\nnum_envs = 0\n')
    rc, out = finish(start(str(cfg), tmp_path / "run"))
    assert rc == 2, out
    assert "bad.toml:3:12: num_envs = 0 must be in [1, 65536]" in out
    cfg.write_text('[env]\nid = "CartPole-v1"\n[learner]\nlearning_rate = 0.1\n')
    rc, out = finish(start(str(cfg), tmp_path / "run2"))
    assert rc == 2, out
    assert "learning_rate" in out  # the learner names the unknown key


def test_kill_9_an_actor_it_is_restarted_and_training_finishes(tmp_path):
    cfg = write_config(tmp_path, max_updates=40, actors=2)
    run_dir = str(tmp_path / "run")
    proc = start(cfg, run_dir)
    wait_for(lambda: len(metrics(run_dir)) >= 2, what="two updates")
    victim = pids(run_dir)["actors"][0]["pid"]
    os.kill(victim, signal.SIGKILL)
    rc, out = finish(proc)
    assert rc == 0, out
    assert "actor 0 died (signal 9" in out and "restarting it" in out
    summary = json.loads(open(os.path.join(run_dir, "summary.json")).read())
    assert summary["actor_restarts"] == 1
    # Both actors feed every on-policy batch: updates after the kill prove
    # the restarted actor delivered.
    assert metrics(run_dir)[-1]["update"] == 40


def test_kill_9_the_learner_it_resumes_from_its_checkpoint_with_staleness_intact(tmp_path):
    cfg = write_config(tmp_path, max_updates=400, actors=2)
    run_dir = str(tmp_path / "run")
    proc = start(cfg, run_dir)
    ckpts = os.path.join(run_dir, "checkpoints")
    wait_for(lambda: os.path.isdir(ckpts) and any(n.endswith(".pt") for n in os.listdir(ckpts))
             and len(metrics(run_dir)) >= 5,
             what="a learner checkpoint")
    os.kill(pids(run_dir)["learner"], signal.SIGKILL)
    rc, out = finish(proc)
    assert rc == 0, out
    assert "learner died (signal 9" in out and "resuming it from its last checkpoint" in out
    with open(os.path.join(run_dir, "learner.log")) as f:
        log = f.read()
    assert "learner: resumed from" in log
    resumed_at = int(log.split("learner: resumed from ")[1].split("(update ")[1].split(",")[0])
    lines = metrics(run_dir)
    first = [m for m in lines if m["starts"] == 1]
    second = [m for m in lines if m["starts"] == 2]
    assert first and second and all(m["starts"] in (1, 2) for m in lines)
    # The resumed learner continues the numbering from its checkpoint...
    assert second[0]["update"] == resumed_at + 1
    assert [m["update"] for m in second] == list(range(resumed_at + 1, 401))
    ckpt_line = next(m for m in first if m["update"] == resumed_at)
    # ...and its staleness counters and progress start from the checkpoint's,
    # not from zero.
    after = second[0]
    for k in ("seen", "used", "dropped", "downweighted"):
        assert after["staleness"][k] >= ckpt_line["staleness"][k]
    assert after["staleness"]["seen"] > ckpt_line["staleness"]["seen"]
    for lag, n in ckpt_line["staleness"]["lags"].items():
        assert after["staleness"]["lags"][lag] >= n
    assert after["env_steps"] > ckpt_line["env_steps"]
    assert after["version"] > first[-1]["version"]  # versions only grow across the restart
    assert lines[-1]["update"] == 400
    summary = json.loads(open(os.path.join(run_dir, "summary.json")).read())
    assert summary["learner_restarts"] == 1


def test_ctrl_c_checkpoints_and_the_same_command_resumes(tmp_path):
    cfg = write_config(tmp_path, max_updates=100000, actors=1)
    run_dir = str(tmp_path / "run")
    proc = start(cfg, run_dir)
    wait_for(lambda: len(metrics(run_dir)) >= 3, what="three updates")
    proc.send_signal(signal.SIGINT)
    rc, out = finish(proc, timeout=60)
    assert rc == 130, out
    assert "interrupted" in out and "resume with the same command" in out
    stopped_at = metrics(run_dir)[-1]["update"]
    with open(os.path.join(run_dir, "learner.log")) as f:
        assert f"learner: stopped at update {stopped_at}" in f.read()
    # Same command, a higher limit: continues from the checkpoint.
    cfg = write_config(tmp_path, max_updates=stopped_at + 3, actors=1)
    rc, out = finish(start(cfg, run_dir))
    assert rc == 0, out
    assert metrics(run_dir)[-1]["update"] == stopped_at + 3
    with open(os.path.join(run_dir, "learner.log")) as f:
        assert f"resumed from {run_dir}/checkpoints/learner-{stopped_at:08d}.pt" in f.read()


def _curve(run_dir):
    drop = {"time", "elapsed_s", "times"}
    return [{k: v for k, v in m.items() if k not in drop} for m in metrics(run_dir)]


@pytest.mark.parametrize("algorithm", ["ppo", "impala"])
def test_deterministic_runs_give_identical_learning_curves(tmp_path, algorithm):
    cfg = write_config(tmp_path, max_updates=8, actors=3, algorithm=algorithm)
    curves = []
    for i in range(2):
        run_dir = tmp_path / f"run{i}"
        rc, out = finish(start(cfg, run_dir, "--deterministic"))
        assert rc == 0, out
        curves.append(_curve(run_dir))
    assert len(curves[0]) == 8
    assert curves[0] == curves[1]
    # Not trivially equal: the policy changed along the way.
    assert curves[0][0]["value_loss"] != curves[0][-1]["value_loss"]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI (openmpi-bin) not installed")
def test_mpirun_two_processes_head_and_actor(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = write_config(tmp_path, max_updates=4, actors=1)
    run_dir = tmp_path / "run"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    proc = subprocess.run(["mpirun", "-n", "2", BIN, "run", cfg, "--run-dir", str(run_dir), "--port", str(port)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout
    assert "max_updates 4 reached" in proc.stdout
    assert "actor 0: stopped" in proc.stdout  # rank 1 ran the actor and ended when the table closed
    assert f"127.0.0.1:{port}" in proc.stdout
    assert [m["update"] for m in metrics(run_dir)] == [1, 2, 3, 4]
    # Under mpirun the head needs a fixed port.
    proc = subprocess.run(["mpirun", "-n", "2", BIN, "run", cfg, "--run-dir", str(tmp_path / "r2")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60, env=env)
    assert proc.returncode != 0
    assert "needs a fixed port" in proc.stdout


def test_run_metrics_show_progress_returns_lag_and_stage_times(tmp_path):
    """The supervisor's /metrics (what `flywheel serve --scrape` charts)."""
    import re
    import urllib.request
    # Long enough to be running when scraped (the learner no longer spends
    # seconds importing torch._dynamo, and 400 tiny updates can end the run
    # before the actor's first stats file); SIGINT ends it below.
    cfg = write_config(tmp_path, max_updates=100000, actors=1)
    proc = start(cfg, tmp_path / "run")
    try:
        url = None
        for _ in range(50):
            line = proc.stdout.readline()
            m = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", line)
            if m:
                url = m.group(1)
                break
        assert url, "no metrics URL printed"

        def scrape():
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            out = {}
            for ln in text.splitlines():
                if ln and not ln.startswith("#"):
                    key, value = ln.rsplit(" ", 1)
                    out[key] = float(value)
            return out

        def progressed():
            s = scrape()
            # The actors' figures come from their stats files, written every few seconds.
            return s if s.get("flywheel_run_learner_updates_total", 0) >= 3 and \
                "flywheel_run_mean_return" in s and s.get("flywheel_run_actor_env_steps_total", 0) > 0 else None

        s = wait_for(progressed, timeout=90, what="three updates, a mean return and actor steps on /metrics")
        assert s["flywheel_run_env_steps_total"] >= 3 * 16 * 4
        assert s['flywheel_run_policy_lag{stat="max"}'] >= s['flywheel_run_policy_lag{stat="median"}'] >= 0
        assert s["flywheel_run_mean_return"] > 0
        assert s['flywheel_run_learner_stage_seconds_total{stage="update"}'] > 0
        assert s['flywheel_run_actor_stage_seconds_total{stage="step"}'] > 0
        assert s["flywheel_run_actors_up"] == 1
        assert any(k.startswith("flywheel_replay_inserts_total") and v > 0 for k, v in s.items())
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
