"""Every subsystem registers its metrics in the process registry: drive each
one a known amount in this process and read the exact figures back from the
Prometheus exposition (``flywheel.metrics_text()``)."""

import json
import re
import threading

import numpy as np
import pytest

import flywheel
from flywheel import envs, replay

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape():
    """{(name, frozenset(labels)): value} and {name: type} of the exposition."""
    samples, types = {}, {}
    for line in flywheel.metrics_text().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples, types


def value(samples, name, **labels):
    want = set(labels.items())
    hits = [v for (n, ls), v in samples.items() if n == name and want <= set(ls)]
    assert hits, f"no series {name}{labels}"
    return sum(hits)


def test_ingest_and_table_writes_are_counted(tmp_path):
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in range(1000)))
    before, _ = scrape()
    flywheel.ingest(str(src), str(tmp_path / "t"))
    after, types = scrape()

    def delta(name, **labels):
        try:
            old = value(before, name, **labels)
        except AssertionError:
            old = 0.0
        return value(after, name, **labels) - old

    assert delta("flywheel_ingest_rows_total", format="jsonl") == 1000
    assert delta("flywheel_ingest_bytes_total", format="jsonl") == src.stat().st_size
    assert delta("flywheel_ingest_files_total", format="jsonl", outcome="ok") == 1
    assert delta("flywheel_table_rows_written_total") == 1000
    assert delta("flywheel_table_commits_total") >= 1
    assert types["flywheel_ingest_rows_total"] == "counter"
    assert types["flywheel_table_commit_seconds"] == "histogram"


def test_loader_stage_times_are_exposed(tmp_path):
    t = flywheel.Table.create(str(tmp_path / "img"), {"x": "int64", "v": "float32[64]"})
    t.append({"x": np.arange(20000, dtype=np.int64), "v": np.ones((20000, 64), np.float32)})
    loader = flywheel.Loader(t.path, batch_size=500, seed=1, num_threads=2)
    rows = sum(len(b["x"]) for b in loader)
    s = loader.stats()
    samples, types = scrape()
    assert rows == 20000
    assert value(samples, "flywheel_loader_rows_total", table=t.path) == 20000
    assert types["flywheel_loader_stage_seconds_total"] == "counter"
    assert value(samples, "flywheel_loader_instances", table=t.path) == 1
    stages = {dict(ls)["stage"]: v for (n, ls), v in samples.items()
              if n == "flywheel_loader_stage_seconds_total" and dict(ls).get("table") == t.path}
    assert set(stages) == {"io", "decode", "transform", "assemble", "consumer_wait", "idle"}
    # The series hold what the loader's own statistics say, refreshed at the
    # scrape (the workers keep reading the next epoch ahead meanwhile, so the
    # worker stages may only have grown since stats()).
    assert stages["consumer_wait"] == pytest.approx(s["consumer_wait_seconds"], abs=1e-3)
    for stage in ("io", "decode", "transform", "assemble"):
        assert s[f"{stage}_seconds"] - 1e-6 <= stages[stage] <= s[f"{stage}_seconds"] + 0.5, stage
    assert all(v >= 0 for v in stages.values())
    del loader
    __import__("gc").collect()
    samples, _ = scrape()
    assert value(samples, "flywheel_loader_instances", table=t.path) == 0


def test_replay_tables_expose_size_capacity_and_blocked_callers():
    name = "metrics_blocked"
    table = replay.Table(name, max_size=50, rate_limiter=replay.RateLimiter.min_size(3))
    got = []
    sampler = threading.Thread(target=lambda: got.append(replay.Sampler(table).sample(1, timeout=30)))
    sampler.start()
    deadline = __import__("time").monotonic() + 30
    while True:  # the sampler is blocked by the rate limiter
        samples, _ = scrape()
        if value(samples, "flywheel_replay_blocked_callers", table=name, op="sample") == 1:
            break
        assert __import__("time").monotonic() < deadline, "the blocked sampler never showed"
    assert value(samples, "flywheel_replay_max_size", table=name) == 50
    # Blocked time is live: it grows while the sampler still waits.
    first = value(samples, "flywheel_replay_blocked_seconds_total", table=name, op="sample")
    __import__("time").sleep(0.3)
    samples, _ = scrape()
    assert value(samples, "flywheel_replay_blocked_seconds_total", table=name, op="sample") >= first + 0.25
    with replay.Writer([table]) as w:
        for i in range(3):
            w.append({"x": np.float32(i)})
            w.create_item(name, 1.0, {"x": 1}, timeout=30)
    sampler.join(30)
    assert got
    samples, _ = scrape()
    assert value(samples, "flywheel_replay_inserts_total", table=name) == 3
    assert value(samples, "flywheel_replay_samples_total", table=name) >= 1
    assert value(samples, "flywheel_replay_size", table=name) == 3
    assert value(samples, "flywheel_replay_blocked_callers", table=name, op="sample") == 0
    assert value(samples, "flywheel_replay_sample_blocked_seconds_count", table=name) >= 1


def test_env_steps_are_counted():
    before, _ = scrape()
    pool = envs.make("CartPole-v1", num_envs=4)
    pool.reset(seed=0)
    for _ in range(25):
        pool.step(np.zeros(4, np.int64))
    after, _ = scrape()
    old = 0.0
    try:
        old = value(before, "flywheel_env_steps_total", env="CartPole-v1")
    except AssertionError:
        pass
    assert value(after, "flywheel_env_steps_total", env="CartPole-v1") - old == 100


def test_flywheel_metrics_0_turns_updates_off():
    import os
    import subprocess
    import sys
    code = ("import flywheel, numpy as np\n"
            "from flywheel import envs\n"
            "p = envs.make('CartPole-v1', num_envs=2); p.reset(seed=0); p.step(np.zeros(2, np.int64))\n"
            "print([l for l in flywheel.metrics_text().splitlines() if l.startswith('flywheel_env_steps_total')])\n")
    for setting, want in (("0", " 0']"), ("1", " 2']")):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "FLYWHEEL_METRICS": setting})
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip().endswith(want), (setting, r.stdout)
