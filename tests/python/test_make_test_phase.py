"""`make test`'s phase runner (tests/make_test_phase.sh): timing lines, and
cached phases: a phase that passed with the same input key is not rerun, a
new key or TEST_CACHE=0 reruns it, a failure is never cached."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PHASE = os.path.join(ROOT, "tests", "make_test_phase.sh")


def run_phase(tmp_path, key, command, cache=True, test_cache="1"):
    # Not the outer `make test`'s own key and cache (this runs inside its pytest phase).
    env = {k: v for k, v in os.environ.items() if k not in ("PHASE_KEY", "PHASE_CACHE")}
    env["TEST_CACHE"] = test_cache
    if cache:
        env["PHASE_KEY"] = key
        env["PHASE_CACHE"] = str(tmp_path / "cache.tsv")
    return subprocess.run(["bash", PHASE, str(tmp_path / "times.tsv"), "unit", "bash", "-c", command],
                          capture_output=True, text=True, env=env, timeout=60)


def times(tmp_path):
    return [line.split("\t") for line in (tmp_path / "times.tsv").read_text().splitlines()]


def test_a_passed_phase_is_cached_for_the_same_key_only(tmp_path):
    count = tmp_path / "count"
    cmd = f"echo run >> {count}"
    assert run_phase(tmp_path, "k1", cmd).returncode == 0
    assert count.read_text().count("run") == 1
    assert times(tmp_path)[-1][0] == "unit" and times(tmp_path)[-1][2] == "ok"
    # Same inputs: not rerun, reported as cached with when it passed.
    r = run_phase(tmp_path, "k1", cmd)
    assert r.returncode == 0 and "cached" in r.stdout and "TEST_CACHE=0" in r.stdout
    assert count.read_text().count("run") == 1
    name, secs, status = times(tmp_path)[-1]
    assert (name, secs) == ("unit", "0.0") and status.startswith("cached (passed ")
    # Other inputs, or TEST_CACHE=0: run again.
    assert run_phase(tmp_path, "k2", cmd).returncode == 0
    assert count.read_text().count("run") == 2
    assert run_phase(tmp_path, "k2", cmd, test_cache="0").returncode == 0
    assert count.read_text().count("run") == 3
    # One cache line per phase: the latest pass.
    lines = (tmp_path / "cache.tsv").read_text().splitlines()
    assert len(lines) == 1 and lines[0].split("\t")[:2] == ["unit", "k2"]


def test_a_failed_phase_is_never_cached(tmp_path):
    r = run_phase(tmp_path, "k1", "exit 3")
    assert r.returncode == 3 and "failed" in r.stdout
    assert times(tmp_path)[-1][2] == "FAILED (3)"
    assert not (tmp_path / "cache.tsv").exists()
    r = run_phase(tmp_path, "k1", "exit 3")
    assert r.returncode == 3  # rerun, not cached


def test_without_a_key_nothing_is_cached(tmp_path):
    count = tmp_path / "count"
    for _ in range(2):
        assert run_phase(tmp_path, "", f"echo run >> {count}", cache=False).returncode == 0
    assert count.read_text().count("run") == 2
