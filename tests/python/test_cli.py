"""End-to-end runs of the `flywheel` command (FLYWHEEL_BIN) on a temp table."""

import json
import os
import subprocess

import pytest

import flywheel

BIN = os.environ.get("FLYWHEEL_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="FLYWHEEL_BIN is not set")


def fw(*args, stdin=None, check=True):
    r = subprocess.run([BIN, "table", *map(str, args)], input=stdin, capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"flywheel {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}")
    return r


def test_cli_table_lifecycle(tmp_path):
    path = str(tmp_path / "t")
    out = fw("create", path, "--schema", "id:int64, emb:float32[2], name:string?, toks:list<int32>").stdout
    assert f"created {path} (version 1)" in out
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": i, "emb": [i, i / 2], "name": None if i % 3 == 0 else f"n{i}",
                                        "toks": list(range(i % 4))}) + "\n" for i in range(10)))
    out = fw("append", path, "--jsonl", rows, "--property", "job=cli").stdout
    assert "appended 10 rows" in out and "version 2" in out
    out = fw("append", path, stdin='{"id": 10, "emb": [1, 2], "toks": [7]}\n').stdout
    assert "version 3, 11 rows" in out

    show = fw("show", path).stdout
    assert "version  3 (latest)" in show
    assert "rows     11" in show
    assert "name" in show and "string (nullable)" in show

    head = [json.loads(l) for l in fw("head", path, "-n", "4", "--json").stdout.splitlines()]
    assert [r["id"] for r in head] == [0, 1, 2, 3]
    assert head[0]["name"] is None and head[1]["name"] == "n1"
    assert head[2]["emb"] == [2, 1] and head[3]["toks"] == [0, 1, 2]

    # what the CLI wrote reads back through Python, and the other way round
    t = flywheel.Table.open(path)
    got = t.to_dict()
    assert got["id"].tolist() == list(range(11))
    assert got["toks"].to_list()[3] == [0, 1, 2]
    t.append({"id": [11], "emb": [[0.5, 0.25]], "name": ["py"], "toks": [[1]]})
    tail = [json.loads(l) for l in fw("head", path, "-n", "20", "--json").stdout.splitlines()]
    assert tail[-1] == {"id": 11, "emb": [0.5, 0.25], "name": "py", "toks": [1]}

    out = fw("tag", path, "before-delete").stdout
    assert "tagged version 4 as before-delete" in out
    out = fw("delete", path, "--where", "id >= 8").stdout
    assert "deleted 4 rows" in out and "8 rows" in out
    log = fw("log", path).stdout
    assert "append" in log and "delete" in log and "job=cli" in log and "tags=before-delete" in log
    assert flywheel.Table.open(path, tag="before-delete").num_rows == 12

    out = fw("compact", path).stdout
    assert "compacted 3 fragments into 1" in out
    out = fw("expire", path, "--keep-last", "1").stdout
    assert "expired 4 versions" in out  # 1, 2, 3 and 5; 4 is tagged, 6 is the latest
    out = fw("vacuum", path, "--grace", "0", "--dry-run").stdout
    # only the expired delete's deletion vectors: the tagged version still uses every data file
    listed = [l.strip() for l in out.splitlines() if l.startswith("  ")]
    assert len(listed) == 3 and all(p.startswith("deletions/") for p in listed), out
    assert "would delete 3 files" in out
    assert all(os.path.exists(os.path.join(path, p)) for p in listed)
    assert "deleted 3 files" in fw("vacuum", path, "--grace", "0").stdout
    fw("tag", path, "before-delete", "--delete")
    fw("expire", path)
    out = fw("vacuum", path, "--grace", "0").stdout
    assert "deleted 3 files" in out
    assert flywheel.Table.open(path).to_dict(["id"])["id"].tolist() == list(range(8))


def test_cli_bad_input_fails_with_a_message(tmp_path):
    path = str(tmp_path / "t")
    fw("create", path, "--schema", "id:int64, name:string")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "name": "a"}\n{"id": 2, "name": "b", "bogus": 3}\n')
    r = fw("append", path, "--jsonl", bad, check=False)
    assert r.returncode != 0
    assert f"{bad}:2: field 'bogus' is not in the schema" in r.stderr
    assert flywheel.Table.open(path).version == 1  # nothing committed

    r = fw("append", path, stdin='{"id": "x", "name": "a"}\n', check=False)
    assert r.returncode != 0 and "<stdin>:1: field 'id'" in r.stderr

    missing = str(tmp_path / "missing")
    for args in (("show", missing), ("head", missing), ("log", missing)):
        r = fw(*args, check=False)
        assert r.returncode != 0
        assert f"no flywheel table at {missing}" in r.stderr

    r = fw("create", path, "--schema", "id:int64", check=False)
    assert r.returncode != 0 and "already exists" in r.stderr
    r = fw("create", str(tmp_path / "u"), "--schema", "id:int99", check=False)
    assert r.returncode != 0 and "int99" in r.stderr
    r = fw("delete", path, "--where", "nope > 1", check=False)
    assert r.returncode != 0 and "nope" in r.stderr
    r = fw("show", path, "--version", "7", check=False)
    assert r.returncode != 0 and "no version 7" in r.stderr
