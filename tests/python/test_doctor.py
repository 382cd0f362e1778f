"""End-to-end runs of `flywheel doctor` (FLYWHEEL_BIN): machine limits, a
loader run on a small table, and scraping a job's /metrics."""

import json
import math
import os
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

import flywheel
from conftest import MetricsHandler

BIN = os.environ.get("FLYWHEEL_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="FLYWHEEL_BIN is not set")

WORKER_STAGES = ("io", "decode", "transform", "assemble")
BOTTLENECKS = WORKER_STAGES + ("loader", "trainer", "balanced")


def doctor(*args, timeout=120):
    t0 = time.monotonic()
    r = subprocess.run([BIN, "doctor", *map(str, args)], capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - t0


def positive(v):
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def make_table(path, rows=20000):
    t = flywheel.Table.create(path, "id:int64, emb:float32[16]")
    t.append({"id": np.arange(rows), "emb": np.random.default_rng(0).random((rows, 16), dtype=np.float32)})
    return t


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_doctor_quick_json_measures_every_limit(tmp_path):
    r, took = doctor("--json", "--quick", "--dir", tmp_path)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    m = j["machine"]
    assert positive(m["memcpy_gbps"]) and positive(m["page_cache_gbps"]), m
    assert m["dir"] == str(tmp_path) and m["file_bytes"] == 64 << 20
    if m["disk_gbps"] is None:  # e.g. a tmpfs, or a cache doctor could not get around: said so
        assert any(n.startswith("disk read not measured: ") for n in m["notes"]), m
    else:
        assert positive(m["disk_gbps"]) and m["disk_method"] in ("fadvise", "o_direct")
    if j["grpc"] is not None:
        g = j["grpc"]
        assert positive(g["insert_mbps"]) and positive(g["sample_mbps"])
        assert g["items"] == 32 and g["item_bytes"] == 1 << 20
    else:
        assert j["grpc_note"]
    assert j["loaders"] == [] and j["bottleneck"] is None
    assert "flywheel doctor: measuring memcpy" in r.stderr  # progress goes to stderr
    assert not any(p.name.startswith(".flywheel-doctor-") for p in tmp_path.iterdir())  # temp file removed
    assert took < 30, f"--quick took {took:.1f} s"


def test_doctor_on_a_table_names_the_bottleneck(tmp_path):
    path = str(tmp_path / "t")
    make_table(path)
    r, _ = doctor("--json", "--quick", "--dir", tmp_path, "--table", path, "--seconds", "0.5",
                  "--batch-size", "64", "--num-threads", "1")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert len(j["loaders"]) == 1
    l = j["loaders"][0]
    assert l["source"] == "loader" and l["num_threads"] == 1
    assert "batch 64" in l["config"]
    assert l["bottleneck"] in BOTTLENECKS and l["explanation"]
    assert j["bottleneck"] == {"stage": l["bottleneck"], "explanation": l["explanation"]}
    assert l["rows"] > 0 and l["bytes"] == l["rows"] * (8 + 16 * 4)
    assert l["wall_seconds"] >= 0.5
    assert [s["stage"] for s in l["stages"]] == list(WORKER_STAGES) + ["consumer_wait", "idle"]
    for s in l["stages"]:
        assert s["seconds"] >= 0 and s["fraction_of_wall"] >= 0, s
        if s["stage"] in WORKER_STAGES:
            assert s["share_of_worker_time"] is None or 0 <= s["share_of_worker_time"] <= 1 + 1e-9
            for lim in s["limits"]:
                assert lim["name"] in ("page_cache", "disk", "memcpy") and lim["fraction"] >= 0
        else:
            assert s["fraction_of_wall"] <= 1.05 and s["limits"] == []
    # this loader is consumed as fast as possible: nearly all its work is its own
    worker = [s for s in l["stages"] if s["stage"] in WORKER_STAGES]
    assert sum(s["seconds"] for s in worker) > 0

    text, _ = doctor("--quick", "--dir", tmp_path, "--table", path, "--seconds", "0.3", "--no-shuffle")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.rstrip("\n").splitlines()
    assert lines[-1].startswith("bottleneck: ") and " \u2014 " in lines[-1], lines[-1]
    assert any(line.split()[:1] == ["consumer_wait"] for line in lines)
    assert "in order" in text.stdout


def test_doctor_bad_table_and_usage_fail_clearly(tmp_path):
    missing = str(tmp_path / "no-such-table")
    r, _ = doctor("--quick", "--dir", tmp_path, "--table", missing)
    assert r.returncode != 0 and missing in r.stderr, r.stderr
    assert r.stderr.startswith("flywheel: error: ")

    for args, text in [(["--size-mb", "0"], "--size-mb"),
                       (["--seconds", "-1"], "--seconds"),
                       (["--scrape", "ftp://127.0.0.1/metrics"], "http://"),
                       (["--batch-size", "8"], "--table"),
                       (["--scrape", "http://127.0.0.1:1/metrics", "--num-threads", "2"], "--scrape")]:
        r, _ = doctor("--quick", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert text in r.stderr, (args, r.stderr)


def test_doctor_scrape_of_an_unreachable_url_fails_with_a_message():
    url = f"http://127.0.0.1:{free_port()}/metrics"
    r, took = doctor("--quick", "--scrape", url)
    assert r.returncode == 1, r.stderr
    assert f"cannot scrape {url}" in r.stderr, r.stderr
    assert r.stdout == ""
    assert took < 20


def test_doctor_scrape_without_flywheel_metrics_says_so(metrics_server):
    MetricsHandler.body = "# TYPE other_total counter\nother_total 1\n"
    r, _ = doctor("--quick", "--scrape", metrics_server + "/metrics")
    assert r.returncode == 1 and "no loader metrics at " + metrics_server + "/metrics" in r.stderr, r.stderr
    r, _ = doctor("--quick", "--scrape", metrics_server + "/nothing-here")
    assert r.returncode == 1 and "HTTP status 404" in r.stderr, r.stderr


def test_doctor_scrape_of_a_running_loader(tmp_path, metrics_server):
    path = str(tmp_path / "t")
    make_table(path, rows=50000)
    loader = flywheel.Loader(path, batch_size=128, num_threads=1)
    stop = threading.Event()

    def consume():
        while not stop.is_set():
            loader.next()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    try:
        r, _ = doctor("--json", "--quick", "--dir", tmp_path, "--scrape", metrics_server + "/metrics",
                      "--seconds", "1")
    finally:
        stop.set()
        thread.join(timeout=30)
    if "flywheel_loader_stage_seconds_total" not in flywheel.metrics_text():
        # A loader without per-stage metrics: doctor names what is missing.
        assert r.returncode == 1, r.stdout
        assert "flywheel_loader_stage_seconds_total" in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["scrape_url"] == metrics_server + "/metrics"
    mine = [l for l in j["loaders"] if l["table"].rstrip("/").endswith(os.path.basename(path))]
    assert mine, j["loaders"]
    l = mine[0]
    assert l["source"] == "scrape" and l["rows"] > 0 and l["wall_seconds"] >= 1
    assert l["bottleneck"] in BOTTLENECKS
    assert all(s["fraction_of_wall"] >= 0 for s in l["stages"])


def test_doctor_scrape_of_a_replay_server_reports_its_tables(tmp_path):
    if subprocess.run([BIN, "replay", "--help"], capture_output=True).returncode != 0:
        pytest.skip("built without the replay service")
    cfg = tmp_path / "tables.toml"
    cfg.write_text('port = 0\n[[table]]\nname = "doctor_q"\npreset = "queue"\nmax_size = 10\n')
    proc = subprocess.Popen([BIN, "replay", "serve", "--config", cfg], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for _ in range(10):
            line = proc.stdout.readline()
            if "metrics on " in line:
                url = line.strip().rsplit(" ", 1)[-1]
                break
        assert url and url.startswith("http://127.0.0.1:"), line
        r, _ = doctor("--json", "--quick", "--dir", tmp_path, "--scrape", url, "--seconds", "0.5")
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["loaders"] == []
    assert any("no loader metrics" in n for n in j["notes"]), j["notes"]
    q = [t for t in j["replay"] if t["table"] == "doctor_q"]
    assert q, j["replay"]
    assert q[0]["inserts"] == 0 and q[0]["blocked"] is None and q[0]["wall_seconds"] >= 0.5
    assert j["bottleneck"]["stage"] == "none" and "doctor_q" in j["bottleneck"]["explanation"]
