"""Ingest and Parquet from Python and the CLI: flywheel.read_parquet against
the reference files' expected contents, flywheel.ingest and `flywheel ingest`
(provenance, on-error policies, progress, Ctrl-C), and the loader over an
ingested table."""

import base64
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

import flywheel

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "testdata", "parquet")
BIN = os.environ.get("FLYWHEEL_BIN")
FLAT = ["flat_gzip", "flat_snappy", "flat_uncompressed", "flat_v2", "flat_zstd"]


def expected(name):
    with open(os.path.join(DATA, name + ".expected.json")) as f:
        return json.load(f)


def pq(name):
    return os.path.join(DATA, name + ".parquet")


def test_read_parquet_matches_the_reference_values():
    want = expected("flat_snappy")
    cols = flywheel.read_parquet(pq("flat_snappy"))
    rows = want["rows"]
    assert list(cols) == [f["name"] for f in want["schema"]]
    ids = cols["id"]
    assert len(ids) == want["num_rows"]
    for i in (0, 1, 17, 1500, len(rows) - 1):
        r = rows[i]
        for name in ("id", "i64", "f64", "txt", "flag"):
            got = cols[name][i]
            if r[name] is None:
                assert got is None or got is np.ma.masked, (i, name, got)
            elif name == "txt":
                assert got == r[name]
            else:
                assert got == r[name], (i, name, got, r[name])
        raw = cols["raw"][i]
        assert (raw is None and r["raw"] is None) or raw == base64.b64decode(r["raw"])


def test_read_parquet_projection_nested_and_errors():
    # Nested fields keep their shape: a struct is one column of dicts.
    cols = flywheel.read_parquet(pq("images_snappy"), columns=["image", "idx"])
    assert list(cols) == ["image", "idx"]
    assert cols["image"][1]["path"] == "img/000001.jpg"
    cols = flywheel.read_parquet(pq("lists_zstd"), columns=["tokens", "nested"])
    want = expected("lists_zstd")["rows"]
    for i in (0, 1, 2, 50):
        assert cols["tokens"][i] == want[i]["tokens"]
        assert cols["nested"][i] == want[i]["nested"]
    with pytest.raises(KeyError, match="'nope'"):
        flywheel.read_parquet(pq("flat_snappy"), columns=["nope"])
    with pytest.raises(FileNotFoundError):
        flywheel.read_parquet(os.path.join(DATA, "missing.parquet"))
    s = flywheel.parquet_schema(pq("images_snappy"))
    assert s["fields"][1] == ("image", "struct<bytes: binary, path: string>", True)
    assert s["table_schema"].startswith("idx:int32?, image:struct<bytes: binary?, path: string?>?")
    assert s["num_rows"] == 600


def test_read_parquet_of_a_damaged_file_names_the_problem(tmp_path):
    data = bytearray(open(pq("flat_zstd"), "rb").read())
    for i in range(200, len(data) // 2, 101):
        data[i] ^= 0x33
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    with pytest.raises(Exception, match="bad.parquet"):
        flywheel.read_parquet(str(bad))


def test_ingest_records_provenance_and_the_loader_reads_the_table(tmp_path):
    table = str(tmp_path / "t")
    seen = []
    r = flywheel.ingest([os.path.join(DATA, "flat_*.parquet")], table, threads=2, progress=seen.append)
    total = sum(expected(n)["num_rows"] for n in FLAT)
    assert r["rows"] == total and r["versions"] == [2] and r["files_failed"] == 0
    assert seen and seen[-1]["files_done"] == 5 and seen[-1]["rows"] == total
    t = flywheel.Table.open(table)
    assert t.num_rows == total
    props = t.versions()[-1]["properties"]
    sources = json.loads(props["ingest.sources"])
    assert sorted(os.path.basename(s["path"]) for s in sources) == [n + ".parquet" for n in FLAT]
    assert all(s["size"] == os.path.getsize(s["path"]) for s in sources)
    assert props["ingest.command"] == "flywheel.ingest (Python)"
    ids = sorted(int(x) for x in np.ma.asarray(t.to_dict(["id"])["id"]).compressed())
    want = sorted(row["id"] for n in FLAT for row in expected(n)["rows"] if row["id"] is not None)
    assert ids == want
    loader = flywheel.Loader(table, batch_size=512, columns=["id", "f64"], seed=3)
    n = sum(len(b["id"]) for b in loader)
    assert n == total


def test_ingest_on_error_policies(tmp_path):
    data = bytearray(open(pq("flat_zstd"), "rb").read())
    for i in range(200, len(data) // 2, 101):
        data[i] ^= 0x33
    bad = tmp_path / "damaged.parquet"
    bad.write_bytes(bytes(data))
    table = str(tmp_path / "t")
    with pytest.raises(Exception, match="damaged.parquet"):
        flywheel.ingest([pq("flat_snappy"), str(bad)], table)
    assert not os.path.exists(table)  # the table the failed ingest would have made is not left behind
    r = flywheel.ingest([pq("flat_snappy"), str(bad)], table, on_error="quarantine")
    assert r["files_failed"] == 1
    assert [s["error"] is None for s in r["sources"]] == [True, False]
    assert os.path.exists(os.path.join(table, "_quarantine", "damaged.parquet"))
    assert flywheel.Table.open(table).num_rows == expected("flat_snappy")["num_rows"]
    with pytest.raises(ValueError, match="on-error"):
        flywheel.ingest([pq("flat_snappy")], table, on_error="ignore")


pytestmark_cli = pytest.mark.skipif(not BIN, reason="FLYWHEEL_BIN is not set")


def fw(*args, check=True, timeout=300):
    r = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"flywheel {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}")
    return r


@pytestmark_cli
def test_cli_ingest_parquet_with_progress_lines(tmp_path):
    table = str(tmp_path / "t")
    r = fw("ingest", os.path.join(DATA, "flat_*.parquet"), table, "--threads", "2")
    total = sum(expected(n)["num_rows"] for n in FLAT)
    assert f"ingested {total} rows from 5 sources into {table}" in r.stdout
    assert "(version 2)" in r.stdout
    # Not a terminal: plain progress lines on stderr, the last one complete.
    assert "ingest: 5/5 files" in r.stderr
    log = fw("table", "log", table).stdout
    assert "append" in log
    r = fw("ingest", "--help")
    assert "--on-error" in r.stdout and "--commit-every" in r.stdout


@pytestmark_cli
def test_cli_ingest_errors_have_clear_messages_and_exit_codes(tmp_path):
    table = str(tmp_path / "t")
    r = fw("ingest", os.path.join(DATA, "nothing_*.parquet"), table, check=False)
    assert r.returncode == 3 and "no source matches" in r.stderr
    odd = tmp_path / "data.bin"
    odd.write_bytes(b"123")
    r = fw("ingest", str(odd), table, check=False)
    assert r.returncode == 2 and "--format" in r.stderr
    r = fw("ingest", pq("flat_snappy"), table, "--on-error", "maybe", check=False)
    assert r.returncode == 2 and "fail, skip or quarantine" in r.stderr


@pytestmark_cli
def test_cli_ctrl_c_leaves_the_table_at_its_last_commit(tmp_path):
    # Enough sources that the ingest is still running when SIGINT arrives.
    src = tmp_path / "src"
    src.mkdir()
    for i in range(1500):
        os.symlink(pq("flat_snappy"), src / f"part-{i:05d}.parquet")
    table = str(tmp_path / "t")
    fw("ingest", pq("flat_snappy"), table)  # version 2
    p = subprocess.Popen([BIN, "ingest", str(src / "*.parquet"), table, "--threads", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    t = flywheel.Table.open(table)
    if p.returncode == 0:
        pytest.skip("the ingest finished before SIGINT arrived (machine too fast for this test)")
    assert "interrupted" in err and "last commit" in err, err
    assert t.version == 2 and t.num_rows == expected("flat_snappy")["num_rows"]


def _tar(path, members, gz=False):
    import io
    import tarfile
    with tarfile.open(path, "w:gz" if gz else "w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def test_ingest_jsonl_csv_and_webdataset_end_to_end(tmp_path):
    js = tmp_path / "events.jsonl"
    js.write_text("".join(json.dumps({"id": i, "score": i / 4, "tags": [i, i + 1], "name": None if i % 5 == 0 else f"n{i}"})
                          + "\n" for i in range(100)))
    r = flywheel.ingest([str(js)], str(tmp_path / "j"))
    assert r["rows"] == 100
    t = flywheel.Table.open(str(tmp_path / "j"))
    # Inferred from the first rows of one file: every field nullable.
    assert list(t.schema.items())[:3] == [("id", "int64?"), ("score", "float64?"), ("tags", "list<int64>?")]
    d = t.to_dict()
    assert list(d["tags"].row(7)) == [7, 8] and d["name"][5] is None and d["name"][6] == "n6"

    csv = tmp_path / "prices.tsv"
    csv.write_text("sku\tprice\tnote\n" + "".join(f"s{i}\t{i * 1.5}\t{'' if i % 3 else 'x'}\n" for i in range(30)))
    r = flywheel.ingest([str(csv)], str(tmp_path / "c"), types={"price": "float32"})
    t = flywheel.Table.open(str(tmp_path / "c"))
    assert list(t.schema.items()) == [("sku", "string?"), ("price", "float32?"), ("note", "string?")]
    assert float(t.to_dict()["price"][3]) == 4.5

    shard = tmp_path / "shard-000.tar.gz"
    _tar(str(shard), [("s/000.jpg", b"\xff\xd8jpeg0"), ("s/000.cls", b"3"), ("s/000.txt", b"a cat"),
                      ("s/001.jpg", b"\xff\xd8jpeg1"), ("s/001.cls", b"7")], gz=True)
    r = flywheel.ingest([str(shard)], str(tmp_path / "w"))
    t = flywheel.Table.open(str(tmp_path / "w"))
    assert list(t.schema.items()) == [("__key__", "string"), ("cls", "int64?"), ("jpg", "binary?"),
                                      ("txt", "string?")]
    d = t.to_dict()
    assert d["__key__"] == ["s/000", "s/001"] and d["jpg"][1] == b"\xff\xd8jpeg1"
    assert list(np.ma.asarray(d["cls"])) == [3, 7] and d["txt"] == ["a cat", None]

    files = tmp_path / "imgs"
    (files / "a").mkdir(parents=True)
    (files / "a" / "x.bin").write_bytes(b"xx")
    (files / "y.bin").write_bytes(b"y")
    flywheel.ingest([str(files)], str(tmp_path / "f"))
    d = flywheel.Table.open(str(tmp_path / "f")).to_dict()
    assert d["path"] == ["a/x.bin", "y.bin"] and d["bytes"] == [b"xx", b"y"]


@pytestmark_cli
def test_cli_malformed_jsonl_csv_and_tar_are_refused_with_their_location(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "v": 2.5}\n{"id": 2, "v": 3.5}\n{"id": "three", "v": 1}\n')
    r = fw("ingest", bad, tmp_path / "t1", "--type", "id=int64", check=False)
    assert r.returncode == 2 and "bad.jsonl:3:" in r.stderr and "'id'" in r.stderr, r.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": 1}\n{"id": 2\n')
    r = fw("ingest", broken, tmp_path / "t2", check=False)
    assert r.returncode == 2 and "broken.jsonl:2" in r.stderr, r.stderr
    csv = tmp_path / "bad.csv"
    csv.write_text('a,b\n1,"unterminated\n')
    r = fw("ingest", csv, tmp_path / "t3", check=False)
    assert r.returncode == 2 and "bad.csv:2" in r.stderr, r.stderr
    evil = tmp_path / "evil.tar"
    _tar(str(evil), [("ok/0.txt", b"fine"), ("../escape/1.txt", b"nope")])
    r = fw("ingest", evil, tmp_path / "t4", check=False)
    assert r.returncode != 0 and "escape" in r.stderr and ".." in r.stderr, r.stderr
    assert not (tmp_path.parent / "escape").exists()
    # With skip, the good sources land and the bad ones are listed.
    good = tmp_path / "good.jsonl"
    good.write_text('{"id": 1, "v": 2.5}\n')
    r = fw("ingest", good, bad, tmp_path / "t5", "--on-error", "skip", "--type", "id=int64")
    assert "ingested 1 rows from 1 sources" in r.stdout and "skipped" in r.stdout and "bad.jsonl:3" in r.stdout


PEERS = os.path.join(REPO, "bench", "peers", "node_modules", "@duckdb", "node-api")


def duckdb_read(path):
    r = subprocess.run(["node", os.path.join(REPO, "tests", "peers", "duckdb_read.mjs"), str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.isdir(PEERS), reason="DuckDB peer not installed (make deps runs npm install)")
@pytest.mark.parametrize("name", ["flat_snappy", "flat_v2", "flat_gzip", "arrowrs_default"])
def test_parquet_to_table_to_parquet_is_value_identical_in_duckdb(tmp_path, name):
    table = str(tmp_path / "t")
    flywheel.ingest([pq(name)], table)
    out = tmp_path / "out.parquet"
    assert flywheel.Table.open(table).to_parquet(str(out)) == expected(name)["num_rows"]
    got, want = duckdb_read(out), expected(name)
    assert got["schema"] == want["schema"]
    assert got["rows"] == want["rows"]


@pytestmark_cli
@pytest.mark.skipif(not os.path.isdir(PEERS), reason="DuckDB peer not installed (make deps runs npm install)")
def test_cli_export_of_a_tagged_version_with_projection(tmp_path):
    table = str(tmp_path / "t")
    fw("ingest", pq("flat_snappy"), table)
    flywheel.Table.open(table).tag("first")
    fw("ingest", pq("flat_zstd"), table)
    out = tmp_path / "first.parquet"
    r = fw("export", f"{table}@first", out, "--columns", "id,price", "--codec", "snappy")
    assert "exported 3000 rows" in r.stdout and "(version 2)" in r.stdout
    got = duckdb_read(out)
    want = expected("flat_snappy")
    assert [f["name"] for f in got["schema"]] == ["id", "price"]
    assert got["rows"] == [{"id": row["id"], "price": row["price"]} for row in want["rows"]]
    r = fw("export", table, out, check=False)
    assert r.returncode != 0 and "exists" in r.stderr


@pytestmark_cli
def test_cli_schema_file_and_type_overrides_for_jsonl(tmp_path):
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps({"id": i, "v": i / 2, "name": f"r{i}"}) + "\n" for i in range(10)))
    schema = tmp_path / "schema.txt"
    schema.write_text("id:int32, v:float32, name:string?\n")
    fw("ingest", src, tmp_path / "a", "--schema", schema)
    assert flywheel.Table.open(str(tmp_path / "a")).schema == {"id": "int32", "v": "float32", "name": "string?"}
    fw("ingest", src, tmp_path / "b", "--type", "v=float16")
    assert flywheel.Table.open(str(tmp_path / "b")).schema["v"] == "float16?"
    r = fw("ingest", src, tmp_path / "c", "--schema", "id:int8", check=False)
    assert r.returncode == 2 and "rows.jsonl:1:" in r.stderr, r.stderr


@pytestmark_cli
@pytest.mark.skipif(not shutil.which("script"), reason="util-linux script(1) not installed")
def test_cli_ingest_draws_a_progress_bar_on_a_terminal(tmp_path):
    table = tmp_path / "t"
    # script(1) runs the command on a pseudo-terminal, so stderr is a TTY.
    cmd = f"{BIN} ingest {os.path.join(DATA, 'flat_*.parquet')} {table}"
    r = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True, timeout=120)
    out = r.stdout.decode(errors="replace")  # bytes: keep the carriage returns
    assert r.returncode == 0, out
    assert "\r\x1b[K5/5 files" in out and "MB/s, ETA" in out
    assert "ingest: " not in out  # no plain lines on a terminal


def test_jsonl_files_are_read_into_the_schema_the_first_one_gave(tmp_path):
    # Later files may leave fields out or null them; every file parses to the
    # table's types (an int in a float column is a float, not a new type).
    a = tmp_path / "a.jsonl"
    a.write_text("".join(json.dumps({"id": i, "score": i + 0.5, "name": f"n{i}"}) + "\n" for i in range(5)))
    b = tmp_path / "b.jsonl"
    b.write_text(json.dumps({"id": 5, "score": 7, "name": None}) + "\n" + json.dumps({"id": 6, "score": 1.5}) + "\n")
    table = str(tmp_path / "t")
    r = flywheel.ingest([str(a), str(b)], table, threads=1)
    assert r["rows"] == 7
    t = flywheel.Table.open(table)
    assert t.schema == {"id": "int64?", "score": "float64?", "name": "string?"}
    d = t.to_dict()
    assert list(np.ma.asarray(d["score"]))[5:] == [7.0, 1.5] and d["name"][5:] == [None, None]
    c = tmp_path / "c.jsonl"
    c.write_text(json.dumps({"id": "seven", "score": 1.0}) + "\n")
    with pytest.raises(ValueError, match="c.jsonl:1:"):
        flywheel.ingest([str(c)], table)
