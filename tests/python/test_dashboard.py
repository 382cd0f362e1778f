"""`flywheel serve`: the dashboard in headless Chromium (playwright-core from
bench/peers, Debian's chromium), over live jobs: a `flywheel replay serve`
process with a client inserting and sampling, and this process's own
registry (a loader, an EnvPool, a local replay table) served on loopback.
The page must load, its charts must update, the table browser and the
lineage view must show the catalog's datasets; screenshots are saved to
build/test-artifacts/ (FLYWHEEL_TEST_ARTIFACTS)."""

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import flywheel
from flywheel import _core, envs, replay

BIN = os.environ.get("FLYWHEEL_BIN")
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "browser" / "dashboard.mjs"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not BIN, reason="FLYWHEEL_BIN is not set")


def browser_or_skip():
    missing = [what for what, ok in [
        ("node", shutil.which("node")),
        ("chromium", os.path.exists(CHROMIUM)),
        ("playwright-core (make deps)", (ROOT / "bench/peers/node_modules/playwright-core").is_dir()),
    ] if not ok]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"the browser test needs {', '.join(missing)}: `make deps` installs them")
        pytest.skip(f"missing {', '.join(missing)} (`make deps` installs them)")


def fw(*args, timeout=120):
    r = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"flywheel {' '.join(map(str, args))}: {r.stderr}"
    return r.stdout


class Background:
    """A flywheel command in the background; `url` is the first http URL it prints."""

    def __init__(self, args, pattern):
        self.proc = subprocess.Popen([BIN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(pattern, line)
            if m:
                self.match = m
                return
        self.proc.kill()
        raise AssertionError(f"flywheel {args[0]} did not start: {self.lines} {self.proc.stderr.read()}")

    def interrupt(self, timeout=120):
        """Ctrl-C, as a user stops a run; killed if it has not ended in `timeout` s."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return self.proc.returncode, err


def workload(stop, table_path, replay_address):
    """Loader epochs, env steps, and replay traffic (local and remote) until `stop`."""
    pool = envs.make("CartPole-v1", num_envs=4)
    pool.reset(seed=0)
    local = replay.Table("dashboard_local", max_size=200, rate_limiter=replay.RateLimiter.min_size(1))
    sampler = replay.Sampler(local)
    loader = flywheel.Loader(table_path, batch_size=256, seed=0, num_threads=1)
    with replay.Client(replay_address) as client, client.writer(chunk_length=4) as remote, \
            replay.Writer([local]) as w:
        i = 0
        while not stop.is_set():
            for b in loader:  # one epoch
                if stop.is_set():
                    break
            pool.step(np.zeros(4, np.int64))
            w.append({"x": np.float32(i)})
            w.create_item("dashboard_local", 1.0, {"x": 1}, timeout=30)
            sampler.sample(1, timeout=30)
            remote.append({"obs": np.full(4, i, np.float32)})
            remote.create_item("replay", 1.0, {"obs": 1}, timeout=30)
            if i % 4 == 3:
                client.sample("replay", 2, timeout=30)
            i += 1
            time.sleep(0.02)


def test_dashboard_in_chromium(tmp_path, metrics_server):
    browser_or_skip()
    catalog = tmp_path / "catalog"
    src = tmp_path / "images.jsonl"
    src.write_text("".join(json.dumps({"id": i, "label": i % 10}) + "\n" for i in range(5000)))
    # Lineage: file -> ingest -> ns/images -> export -> parquet -> ingest -> ns/derived.
    fw("--catalog", catalog, "ingest", src, "ns/images")
    fw("--catalog", catalog, "export", "ns/images", tmp_path / "images.parquet")
    fw("--catalog", catalog, "ingest", tmp_path / "images.parquet", "ns/derived")
    listing = dict(line.split("\t") for line in fw("--catalog", catalog, "catalog", "datasets").splitlines())
    images = listing["ns/images"]

    cfg = tmp_path / "tables.toml"
    cfg.write_text('port = 0\n[[table]]\nname = "replay"\nmax_size = 500\n'
                   'rate_limiter = { kind = "min_size", min_size = 2 }\nsignature = { obs = "float32[4]" }\n')
    replay_server = Background(["replay", "serve", "--config", cfg], r"metrics on (http://127\.0\.0\.1:\d+/metrics)")
    address = re.search(r" on (127\.0\.0\.1:\d+)$", replay_server.lines[0].strip()).group(1)
    own_url = metrics_server + "/metrics"  # this process: loader, EnvPool, local replay
    stop = threading.Event()
    errors = []

    def run():
        try:
            workload(stop, images, address)
        except Exception as e:  # reported by the test below
            errors.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    dash = Background(["--catalog", catalog, "serve", "--port", "0", "--interval", "0.5",
                       "--scrape", replay_server.match.group(1), "--scrape", own_url],
                      r"dashboard on (http://127\.0\.0\.1:\d+/)")
    try:
        url = dash.match.group(1)
        status = json.load(urllib.request.urlopen(url + "api/status", timeout=10))
        assert status["catalog"] is True and len(status["targets"]) == 3
        # Every target, `flywheel replay serve` and this process included, was
        # scraped and accepted by the strict Prometheus parser.
        deadline = time.monotonic() + 30
        while not all(t["up"] for t in status["targets"]):
            assert time.monotonic() < deadline, status["targets"]
            time.sleep(0.2)
            status = json.load(urllib.request.urlopen(url + "api/status", timeout=10))
        tables = json.load(urllib.request.urlopen(url + "api/tables", timeout=10))
        assert {t["name"] for t in tables["tables"]} == {"ns/images", "ns/derived"}
        detail = json.load(urllib.request.urlopen(url + "api/table?name=ns%2Fimages", timeout=10))
        assert detail["rows"] == 5000 and [c["name"] for c in detail["schema"]] == ["id", "label"]
        lineage = json.load(urllib.request.urlopen(url + "api/lineage?node=ns%2Fderived&direction=up", timeout=10))
        kinds = {n["kind"] for n in lineage["nodes"]}
        assert {"dataset", "run", "file"} <= kinds, lineage
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "api/table?name=nope", timeout=10)
        assert e.value.code == 404

        out_dir = Path(os.environ.get("FLYWHEEL_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))
        out_dir.mkdir(parents=True, exist_ok=True)
        shot = out_dir / "dashboard.png"
        for p in out_dir.glob("dashboard*.png"):
            p.unlink()
        cmd = ["node", str(SCRIPT), "--url", url, "--screenshot", str(shot), "--timeout-ms", "60000",
               "--expect-chart", "chart-throughput", "--expect-chart", "chart-replay-fill",
               "--expect-chart", "chart-rate-limiter", "--expect-chart", "chart-loader-stalls",
               "--expect-table", "ns/images", "--expect-lineage", "ns/derived"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=150,
                           env={**os.environ, "CHROMIUM": CHROMIUM})
        assert r.returncode == 0, f"browser check failed:\n{r.stderr}\n{r.stdout}"
        found = json.loads(r.stdout.strip().splitlines()[-1])
        assert found["ok"] and not found["page_errors"]
        for chart in ("chart-throughput", "chart-loader-stalls"):
            assert found["charts"][chart]["later"]["draws"] > found["charts"][chart]["first"]["draws"]
        assert len(found["lineage"]["nodes"]) >= 5
        for p in (shot, out_dir / "dashboard-tables.png", out_dir / "dashboard-lineage.png"):
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10000, p
        assert not errors, errors
    finally:
        stop.set()
        worker.join(60)
        code, err = dash.stop()
        replay_server.stop()
    assert code == 0, err


def _charts_live(url, screenshot, charts):
    """The browser check (tests/browser/dashboard.mjs) of `charts` on the
    page at `url`: each fills and keeps updating, no page errors; returns its
    summary and the screenshot's path."""
    out_dir = Path(os.environ.get("FLYWHEEL_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))
    out_dir.mkdir(parents=True, exist_ok=True)
    shot = out_dir / screenshot
    cmd = ["node", str(SCRIPT), "--url", url, "--screenshot", str(shot), "--timeout-ms", "90000"]
    for c in charts:
        cmd += ["--expect-chart", c]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env={**os.environ, "CHROMIUM": CHROMIUM})
    assert r.returncode == 0, f"browser check failed:\n{r.stderr}\n{r.stdout}"
    found = json.loads(r.stdout.strip().splitlines()[-1])
    assert found["ok"] and not found["page_errors"]
    return found, shot


RUN_CONFIG = """
[run]
seed = 3
max_updates = 2000
checkpoint_interval = 50
progress_interval_s = 1
[env]
id = "CartPole-v1"
num_envs = 4
[actor]
count = 1
unroll_length = 16
[policy]
hidden = [16]
[learner]
algorithm = "ppo"
epochs = 1
minibatches = 1
"""


def test_flywheel_run_serves_its_own_dashboard_with_returns_and_policy_lag(tmp_path):
    browser_or_skip()
    pytest.importorskip("torch")
    if not getattr(_core, "replay_service_available", False):
        pytest.skip("built without gRPC")
    cfg = tmp_path / "run.toml"
    cfg.write_text(RUN_CONFIG)
    run = Background(["run", cfg, "--run-dir", tmp_path / "run"], r"dashboard on (http://127\.0\.0\.1:\d+/)")
    try:
        url = run.match.group(1)
        found, shot = _charts_live(url, "run-dashboard.png",
                                   ["chart-throughput", "chart-returns", "chart-policy-lag", "chart-replay-fill"])
        assert found["charts"]["chart-returns"]["later"]["points"] > 0
        # The run's own /metrics, scraped by its dashboard through the strict parser.
        status = json.load(urllib.request.urlopen(url + "api/status", timeout=10))
        assert [t["up"] for t in status["targets"]] == [True], status
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        run.interrupt()


def test_serve_browses_a_warehouse_without_a_catalog(tmp_path):
    wh = tmp_path / "wh"
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(10)))
    fw("ingest", src, wh / "a")
    fw("ingest", src, wh / "team" / "b")
    fw("ingest", src, wh / "team" / "b")
    (wh / "not_a_table").mkdir()
    dash = Background(["serve", "--port", "0", "--warehouse", wh], r"dashboard on (http://127\.0\.0\.1:\d+/)")
    try:
        url = dash.match.group(1)

        def get(path):
            try:
                with urllib.request.urlopen(url + path, timeout=10) as r:
                    return r.status, json.load(r)
            except urllib.error.HTTPError as e:
                return e.code, json.load(e)

        code, tables = get("api/tables")
        assert code == 200 and tables["source"] == "warehouse"
        assert [(t["name"], t["rows"]) for t in tables["tables"]] == [("a", 10), ("team/b", 20)]
        code, b = get("api/table?name=team%2Fb")
        assert code == 200 and [v["version"] for v in b["versions"]] == [3, 2, 1]
        assert [v["rows"] for v in b["versions"]] == [20, 10, 0] and b["schema"][0]["name"] == "id"
        # Only listed tables can be opened: no path escapes the warehouse.
        for name in ["..%2F..%2Fetc", "%2Ftmp", "not_a_table", ""]:
            code, err = get("api/table?name=" + name)
            assert code in (400, 404) and err["error"], (name, code, err)
        code, err = get("api/lineage?node=a")
        assert code == 404 and "--catalog" in err["error"]
        code, err = get("api/datasets")
        assert code == 404
    finally:
        code, err = dash.stop()
    assert code == 0, err


def test_serve_refuses_bad_arguments(tmp_path):
    for args, msg in [(["--warehouse", tmp_path / "missing"], "not a directory"),
                      (["--scrape", "ftp://x/metrics"], "not an http:// URL"),
                      (["--address", "0.0.0.0"], "loopback"),
                      (["--interval", "0"], "--interval")]:
        r = subprocess.run([BIN, "serve", "--port", "0", *map(str, args)], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and msg in r.stderr, (args, r.returncode, r.stderr)


def test_a_language_model_run_serves_a_dashboard_with_accuracy_and_its_time_split(tmp_path):
    """`flywheel run` on a language-model config starts `flywheel serve` on
    the job's /metrics: held-out accuracy, reward, tokens/s and the stacked
    time split chart live."""
    browser_or_skip()
    pytest.importorskip("torch")
    fw("task", "make", "arith", tmp_path / "arith", "--train", "400", "--test", "40", "--operators", "+")
    cfg = tmp_path / "lm.toml"
    cfg.write_text(f"""
[run]
max_updates = 100000
eval_interval = 3
checkpoint_interval = 1000
progress_interval_s = 60
threads = 1
[data]
train = "{tmp_path}/arith/train"
test = "{tmp_path}/arith/test"
eval_size = 40
[model]
hidden_size = 32
intermediate_size = 64
layers = 1
heads = 2
kv_heads = 1
max_position_embeddings = 20
[sft]
steps = 10
[rollout]
group_size = 4
prompts_per_update = 8
max_new_tokens = 5
""")
    run = Background(["run", cfg, "--run-dir", tmp_path / "run"], r"dashboard on (http://127\.0\.0\.1:\d+/)")
    try:
        url = run.match.group(1)
        found, _ = _charts_live(url, "lm-run-dashboard.png", ["chart-lm-quality", "chart-lm-stages", "chart-throughput"])
        assert found["charts"]["chart-lm-stages"]["later"]["series"] >= 3, found["charts"]
        status = json.load(urllib.request.urlopen(url + "api/status", timeout=10))
        assert all(t["up"] for t in status["targets"]), status
        metrics = re.search(r"metrics on (http://\S+)", (tmp_path / "run" / "job.log").read_text()).group(1)
        assert metrics in [t["url"] for t in status["targets"]], status
    finally:
        run.interrupt()
    assert (tmp_path / "run" / "result.json").exists()
