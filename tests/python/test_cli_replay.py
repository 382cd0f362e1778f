"""End-to-end runs of `flywheel replay serve|info|checkpoint` (FLYWHEEL_BIN)."""

import json
import os
import re
import signal
import subprocess
import time

import pytest

BIN = os.environ.get("FLYWHEEL_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="FLYWHEEL_BIN is not set")


def fw(*args, check=True, timeout=60):
    r = subprocess.run([BIN, "replay", *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"flywheel replay {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}")
    return r


class Serve:
    """`flywheel replay serve` in the background; the address from its first line."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([BIN, "replay", "serve", *map(str, args)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = [self.proc.stdout.readline()]
        m = re.search(r" on (127\.0\.0\.1:\d+)$", self.lines[0].strip())
        if not m:
            self.proc.kill()
            raise AssertionError(f"serve did not start: {self.lines[0]!r} {self.proc.stderr.read()}")
        self.address = m.group(1)

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=60)
        self.lines += out.splitlines()
        return self.proc.returncode, err


def write_config(tmp_path, extra=""):
    cfg = tmp_path / "tables.toml"
    cfg.write_text(f"""
port = 0
checkpoint_dir = "{tmp_path / 'ckpt'}"
{extra}
[[table]]
name = "replay"
sampler = {{ kind = "prioritized", priority_exponent = 0.6 }}
rate_limiter = {{ kind = "min_size", min_size = 2 }}
signature = {{ obs = "float32[4]" }}

[[table]]
name = "queue"
preset = "queue"
max_size = 100
""")
    return cfg


def test_serve_info_checkpoint_and_restart(tmp_path):
    cfg = write_config(tmp_path)
    s = Serve("--config", cfg)
    try:
        assert "replay (0 items), queue (0 items)" in s.lines[0]
        info = json.loads(fw("info", s.address, "--json").stdout)
        assert info[0]["address"] == s.address
        tables = {t["name"]: t for t in info[0]["tables"]}
        assert tables["replay"]["sampler"] == "Prioritized(priority_exponent=0.6)"
        assert tables["replay"]["min_size_to_sample"] == 2
        assert tables["queue"]["max_times_sampled"] == 1
        assert tables["queue"]["max_diff"] == 100
        # The text form explains what blocks sampling, with the numbers.
        text = fw("info", s.address).stdout
        assert f"server {s.address}" in text
        assert "sample: blocked: inserts - deletes = 0 < min_size_to_sample = 2" in text
        out = fw("checkpoint", s.address).stdout
        assert re.search(rf"{s.address}: checkpoint 1: 0 items", out), out
    finally:
        rc, err = s.stop(signal.SIGTERM)
    assert rc == 0, err
    assert any("final checkpoint 2" in l for l in s.lines), s.lines
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["00000000000000000001", "00000000000000000002"]

    # A restarted server resumes from the newest checkpoint; --port overrides the config.
    s2 = Serve("--config", cfg, "--port", "0", "--no-final-checkpoint")
    try:
        assert s2.proc.stdout.readline().strip() == "flywheel replay: restored checkpoint 2"
    finally:
        rc, _ = s2.stop(signal.SIGINT)
    assert rc == 0
    assert any("interrupted, stopping" in l for l in s2.lines)
    assert len(os.listdir(tmp_path / "ckpt")) == 2  # no final checkpoint this time


def test_config_errors_name_file_line_and_column(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[[table]]\nname = "t"\nsampler = "random"\n')
    r = fw("serve", "--config", cfg, check=False)
    assert r.returncode == 2
    assert f"{cfg}:3:11: sampler: unknown selector \"random\"" in r.stderr
    r = fw("serve", "--config", tmp_path / "missing.toml", check=False)
    assert r.returncode == 3 and "missing.toml" in r.stderr
    r = fw("serve", check=False)
    assert r.returncode == 2 and "--config is required" in r.stderr


def test_example_config_serves(tmp_path):
    example = fw("serve", "--example-config").stdout
    assert "[[table]]" in example and "preset = \"queue\"" in example
    cfg = tmp_path / "example.toml"
    cfg.write_text(example.replace("port = 9000", "port = 0")
                   .replace('checkpoint_dir = "replay-checkpoints"', f'checkpoint_dir = "{tmp_path / "ck"}"'))
    s = Serve("--config", cfg, "--no-final-checkpoint")
    assert "replay (0 items), queue (0 items)" in s.lines[0]
    rc, err = s.stop()
    assert rc == 0, err


def test_non_loopback_and_unreachable_servers_are_refused(tmp_path):
    cfg = write_config(tmp_path)
    r = fw("serve", "--config", cfg, "--host", "0.0.0.0", check=False)
    assert r.returncode == 2 and "not loopback" in r.stderr
    start = time.monotonic()
    r = fw("info", "127.0.0.1:1", "--timeout", "2", check=False)
    assert r.returncode != 0 and "127.0.0.1:1" in r.stderr
    assert time.monotonic() - start < 30
    assert "--help" not in r.stderr
    help_text = fw("serve", "--help").stdout
    assert "--checkpoint-interval" in help_text and "--example-config" in help_text


def test_kill_9_mid_checkpoint_restarts_from_the_previous_complete_one(tmp_path):
    """`flywheel replay serve` with frequent checkpoints of a table big enough
    that checkpoints take a while, killed with SIGKILL at random moments: every
    restart serves a complete checkpoint holding exactly the items inserted."""
    import random

    import numpy as np

    from flywheel import _core, replay
    if not _core.replay_service_available:
        pytest.skip("built without the gRPC replay service")
    cfg = tmp_path / "tables.toml"
    ckpt = tmp_path / "ckpt"
    cfg.write_text(f'port = 0\ncheckpoint_dir = "{ckpt}"\ncheckpoint_interval_s = 0.05\n'
                   f'checkpoint_keep_last = 2\n[[table]]\nname = "t"\nmax_size = 100000\n')
    n = 4000
    s = Serve("--config", cfg)
    with replay.Client(s.address) as client, client.writer(chunk_length=8) as w:
        for i in range(n):
            w.append({"obs": np.full(256, i, np.float32)})
            w.create_item("t", 1.0, {"obs": 1}, timeout=30)
        w.flush(timeout=60)
    # Wait until one checkpoint holds everything, so every later one does too.
    deadline = time.monotonic() + 60
    while True:
        done = [d for d in sorted(os.listdir(ckpt)) if (ckpt / d / "CHECKPOINT").exists()]
        if done and json.loads((ckpt / done[-1] / "CHECKPOINT").read_text())["num_items"] == n:
            break
        assert time.monotonic() < deadline, "no complete checkpoint of all items"
        time.sleep(0.05)
    rng = random.Random(7)
    incomplete_seen = kills = 0
    while kills < 4 or (incomplete_seen == 0 and kills < 40):
        kills += 1
        time.sleep(rng.uniform(0.0, 0.3))
        s.proc.kill()  # SIGKILL, quite likely mid-checkpoint (they run back to back)
        s.proc.communicate(timeout=60)
        listing = sorted(os.listdir(ckpt))
        complete = [d for d in listing if (ckpt / d / "CHECKPOINT").exists()]
        incomplete_seen += len(listing) - len(complete)
        s = Serve("--config", cfg)
        line = s.proc.stdout.readline().strip()
        assert line == f"flywheel replay: restored checkpoint {int(complete[-1])}", (line, listing)
        assert f"t ({n} items)" in s.lines[0]
    rc, err = s.stop()
    assert rc == 0, err
    # At least one kill landed mid-checkpoint (an unmarked directory was left).
    assert incomplete_seen >= 1, f"{kills} kills, none mid-checkpoint"


def test_serve_exposes_prometheus_metrics_and_dumps_waits_on_sigusr1(tmp_path):
    import urllib.request
    s = Serve("--config", write_config(tmp_path))
    try:
        line = s.proc.stdout.readline()
        while "metrics on" not in line and line:
            line = s.proc.stdout.readline()
        m = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)$", line.strip())
        assert m, line
        with urllib.request.urlopen(m.group(1), timeout=10) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = r.read().decode()
        # Prometheus text: HELP/TYPE lines and samples of flywheel's own metrics.
        assert "# TYPE " in text and "flywheel_" in text
        for ln in text.splitlines():
            if ln and not ln.startswith("#"):
                name, value = ln.rsplit(" ", 1)
                float(value)  # every sample line ends in a number
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(m.group(1).replace("/metrics", "/nope"), timeout=10)
        assert e.value.code == 404
        s.proc.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
    finally:
        code, err = s.stop()
    assert code == 0
    assert "SIGUSR1: who waits on what" in err and "wait(s) in progress" in err, err


@pytest.mark.parametrize("insert_log", ["none", "write", "always"])
def test_kill_9_loses_acknowledged_items_only_without_the_insert_log(tmp_path, insert_log):
    """150 items acknowledged, a checkpoint after the first 100, then kill -9:
    without the insert log the restarted server has the checkpoint's 100
    (docs/replay.md, "Durability"); with it, all 150."""
    import numpy as np

    from flywheel import _core, replay
    if not _core.replay_service_available:
        pytest.skip("built without the gRPC replay service")
    cfg = tmp_path / "tables.toml"
    cfg.write_text(f'port = 0\ncheckpoint_dir = "{tmp_path / "ckpt"}"\n[[table]]\nname = "t"\nmax_size = 1000\n')
    s = Serve("--config", cfg, "--insert-log", insert_log)
    with replay.Client(s.address) as client, client.writer(chunk_length=4) as w:
        for i in range(150):
            w.append({"obs": np.full(8, i, np.float32)})
            w.create_item("t", 1.0, {"obs": 1}, timeout=30)
            if i == 99:
                w.flush(timeout=30)
                fw("checkpoint", s.address)
        w.flush(timeout=30)  # every item acknowledged
    s.proc.kill()
    s.proc.communicate(timeout=60)
    s = Serve("--config", cfg, "--insert-log", insert_log, "--no-final-checkpoint")
    try:
        want = 100 if insert_log == "none" else 150
        assert f"t ({want} items)" in s.lines[0], s.lines[0]
        if insert_log != "none":
            lines = [s.proc.stdout.readline().strip() for _ in range(2)]
            assert any("50 items re-inserted" in l for l in lines), lines
    finally:
        s.stop()
