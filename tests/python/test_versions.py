"""Versioning through the Python API: time travel, tags, deletes, schema
evolution, compaction, expiry and vacuum."""

import os
import time

import numpy as np
import pytest

import flywheel


def _ids(t):
    return t.to_dict(["id"])["id"].tolist()


@pytest.fixture
def table(table_path):
    t = flywheel.Table.create(table_path, {"id": "int64", "name": "string?"}, page_size=1024,
                              properties={"job": "test"})
    return t


def _rows(start, n):
    return {"id": np.arange(start, start + n), "name": [f"r{i}" for i in range(start, start + n)]}


def test_versions_and_time_travel(table):
    assert table.version == 1 and len(table) == 0
    table.append(_rows(0, 10), properties={"source": "a", "n": 10})
    table.append(_rows(10, 5))
    assert table.version == 3 and table.num_rows == 15
    v2 = flywheel.Table.open(table.path, version=2)
    assert _ids(v2) == list(range(10))
    assert _ids(table.checkout(2)) == list(range(10))
    assert flywheel.Table.open(table.path).version == 3
    log = table.versions()
    assert [v["version"] for v in log] == [1, 2, 3]
    assert [v["operation"] for v in log] == ["create", "append", "append"]
    assert log[0]["properties"]["job"] == "test"
    assert log[1]["properties"] == {"source": "a", "n": "10"}
    assert log[1]["details"]["rows"] == "10"
    assert log[2]["num_rows"] == 15
    assert abs(log[2]["timestamp_ms"] - time.time() * 1000) < 600_000
    assert ":" in log[2]["writer"]
    # another handle moves on; latest() catches up
    other = flywheel.Table.open(table.path)
    other.append(_rows(15, 1))
    assert table.version == 3 and table.latest_version() == 4
    assert table.latest().num_rows == 16
    with pytest.raises(FileNotFoundError, match=r"no version 9 \(retained versions: 1..4\)"):
        flywheel.Table.open(table.path, version=9)


def test_tags(table):
    table.append(_rows(0, 3))
    table.tag("first")
    table.append(_rows(3, 3))
    table.tag("v1", version=1)
    assert table.tags() == {"first": 2, "v1": 1}
    assert flywheel.Table.open(table.path, tag="first").num_rows == 3
    with pytest.raises(FileExistsError, match="first"):
        table.tag("first")
    with pytest.raises(ValueError, match="tag name"):
        table.tag("../escape")
    table.untag("first")
    assert table.tags() == {"v1": 1}
    with pytest.raises(FileNotFoundError, match="no tag 'first'"):
        table.untag("first")
    with pytest.raises(FileNotFoundError, match="no tag 'first'"):
        flywheel.Table.open(table.path, tag="first")


def test_delete_by_index_and_predicate(table):
    table.append(_rows(0, 100))
    table.append(_rows(100, 100))
    assert table.delete([0, 5, 150, 5]) == 3
    assert table.num_rows == 197
    assert table.delete(where="id >= 190") == 10
    assert table.delete(where='name == "r10"') == 1
    assert table.delete(np.array([], dtype=np.int64)) == 0
    expect = [i for i in range(190) if i not in (0, 5, 10, 150)]
    assert _ids(table) == expect
    # indices are live rows of this version
    assert table.take([0, 4])["id"].tolist() == [1, 6]
    # older versions still see their rows
    assert _ids(table.checkout(3)) == list(range(200))
    assert [v["operation"] for v in table.versions()][-3:] == ["delete", "delete", "delete"]
    with pytest.raises(ValueError):
        table.delete()
    with pytest.raises(ValueError):
        table.delete([1], where="id == 1")


def test_add_column_with_default_and_nullable(table):
    table.append(_rows(0, 4))
    table.add_column("score", "float64", default=1.5)
    table.add_column("note", "string?")
    table.add_column("flag", "bool", default=True)
    table.add_column("label", "string", default="unknown")
    assert table.schema == {"id": "int64", "name": "string?", "score": "float64", "note": "string?",
                            "flag": "bool", "label": "string"}
    assert table.defaults == {"score": 1.5, "flag": True, "label": "unknown"}
    got = table.take([3, 0])
    assert got["score"].tolist() == [1.5, 1.5]
    assert got["note"] == [None, None]
    assert got["flag"].tolist() == [True, True]
    assert got["label"] == ["unknown", "unknown"]
    # new rows carry the new columns; omitted ones read their default / null
    table.append({"id": [4, 5], "score": [7.0, 8.0], "note": ["n", None]})
    got = table.take([5, 4, 0])
    assert got["score"].tolist() == [8.0, 7.0, 1.5]
    assert got["note"] == [None, "n", None]
    assert got["label"] == ["unknown"] * 3
    with pytest.raises(ValueError, match="nullable or give it a default"):
        table.add_column("bad", "int32")
    with pytest.raises(FileExistsError, match="note"):
        table.add_column("note", "string?")
    with pytest.raises(ValueError):
        table.add_column("t", "tensor<7>", nullable=True)


def test_overwrite_replaces_rows_and_optionally_schema(table):
    table.append(_rows(0, 10))
    table.overwrite({"id": [100, 101]})
    assert _ids(table) == [100, 101] and table.to_dict()["name"] == [None, None]
    table.overwrite({"k": np.arange(3, dtype=np.int8)}, schema={"k": "int8"})
    assert table.schema == {"k": "int8"}
    assert table.to_dict()["k"].tolist() == [0, 1, 2]
    assert _ids(table.checkout(2)) == list(range(10))
    with pytest.raises(ValueError, match="column 'id' is missing"):
        table.checkout(3).overwrite({"name": ["x"]})


def test_compact_merges_fragments_and_drops_deleted_rows(table):
    for i in range(4):
        table.append(_rows(i * 10, 10))
    table.delete(where="id < 5")
    before = table.version
    assert table.compact() == 4
    assert table.version == before + 1
    assert table.versions()[-1]["operation"] == "compact"
    assert table.versions()[-1]["num_fragments"] == 1
    assert _ids(table) == list(range(5, 40))
    assert table.compact() == 0  # nothing left to do
    assert _ids(table.checkout(before)) == list(range(5, 40))


def test_expire_and_vacuum(table):
    for i in range(5):
        table.append(_rows(i * 10, 10))
    table.tag("keep", version=3)
    table.overwrite(_rows(1000, 5))  # version 7 replaces every row
    assert table.expire(keep_last=1) == [1, 2, 4, 5, 6]
    assert [v["version"] for v in table.versions()] == [3, 7]
    # recent files are kept by the grace period; dry run lists without deleting
    assert table.vacuum() == []
    would = table.vacuum(grace_seconds=0, dry_run=True)
    assert len(would) == 3 and all(p.startswith("data/") for p in would)
    assert all(os.path.exists(os.path.join(table.path, p)) for p in would)
    deleted = table.vacuum(grace_seconds=0)
    assert sorted(deleted) == sorted(would)
    assert not any(os.path.exists(os.path.join(table.path, p)) for p in deleted)
    assert _ids(flywheel.Table.open(table.path, tag="keep")) == list(range(20))
    assert _ids(table) == list(range(1000, 1005))
    with pytest.raises(FileNotFoundError, match="retained versions: 3..7"):
        flywheel.Table.open(table.path, version=2)
    # older_than_seconds: nothing is that old
    table.append(_rows(0, 1))
    assert table.expire(keep_last=1, older_than_seconds=3600) == []
    with pytest.raises(ValueError, match="keep_last"):
        table.expire(keep_last=0)


def test_table_config_applies_to_later_handles(tmp_path):
    zpath, npath = str(tmp_path / "z"), str(tmp_path / "n")
    flywheel.Table.create(zpath, {"x": "int64"}, codec="zstd", page_size=2048)
    flywheel.Table.create(npath, {"x": "int64"})
    z, n = flywheel.Table.open(zpath), flywheel.Table.open(npath)
    assert z.config["codec"] == "zstd" and z.config["page_size"] == "2048"
    assert n.config["codec"] == "none"
    for t in (z, n):
        t.append({"x": np.arange(1000)})
    # zstd pages are decoded onto the heap; uncompressed ones are mapped
    assert all(flywheel._core._mapped_file(b["x"]) is None for b in z.scan())
    assert all(flywheel._core._mapped_file(b["x"]).startswith(npath) for b in n.scan())
    sizes = {p: sum(os.path.getsize(os.path.join(p, "data", f)) for f in os.listdir(os.path.join(p, "data")))
             for p in (zpath, npath)}
    assert sizes[zpath] < sizes[npath] / 2
