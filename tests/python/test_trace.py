"""flywheel.trace: spans from the loader's C++ threads and from Python land
in one valid Chrome trace JSON file; off by default."""

import json
import os
import subprocess
import sys

import numpy as np

import flywheel


def _events(path):
    with open(path) as f:
        doc = json.load(f)
    assert isinstance(doc["traceEvents"], list)
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["ts"], int) and e["ts"] >= 0 and isinstance(e["dur"], int) and e["dur"] >= 0
    return doc


def test_loader_and_python_spans_are_written_to_one_trace(tmp_path):
    t = flywheel.Table.create(str(tmp_path / "t"), {"x": "int64", "v": "float32[8]"})
    t.append({"x": np.arange(4096), "v": np.zeros((4096, 8), np.float32)})
    assert not flywheel.trace.enabled()
    path = str(tmp_path / "trace.json")
    flywheel.trace.start(path)
    loader = flywheel.Loader(str(tmp_path / "t"), batch_size=256, seed=0, num_threads=2)
    n = 0
    for batch in loader:
        with flywheel.trace.span("train", "step", batch=n):
            n += 1
    flywheel.trace.stop()
    assert not flywheel.trace.enabled()
    doc = _events(path)
    spans = [(e["cat"], e["name"]) for e in doc["traceEvents"] if e["ph"] == "X"]
    assert spans.count(("train", "step")) == n == 16
    assert spans.count(("loader", "assemble_batch")) >= 16  # one per batch (read-ahead may assemble more)
    assert spans.count(("loader", "next")) >= 16
    steps = [e for e in doc["traceEvents"] if e.get("name") == "step"]
    assert sorted(e["args"]["batch"] for e in steps) == list(range(16))
    # Loader work ran on other threads than the Python steps.
    assert {e["tid"] for e in doc["traceEvents"] if e.get("name") == "assemble_batch"} - {steps[0]["tid"]}


def test_flywheel_trace_environment_variable_writes_the_trace_at_exit(tmp_path):
    path = str(tmp_path / "env_trace.json")
    code = ("import flywheel\n"
            "with flywheel.trace.span('script', 'work'):\n"
            "    pass\n")
    env = dict(os.environ, FLYWHEEL_TRACE=path)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    doc = _events(path)
    assert [e["name"] for e in doc["traceEvents"] if e["ph"] == "X"] == ["work"]


def test_spans_are_not_recorded_when_tracing_is_off():
    before = flywheel.trace.counts()
    with flywheel.trace.span("x", "y"):
        pass
    assert flywheel.trace.counts() == before
