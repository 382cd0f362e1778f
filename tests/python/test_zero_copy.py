"""Fixed-width columns of uncompressed pages come back as read-only numpy
views of the memory-mapped shard files, kept alive by their owner."""

import gc

import numpy as np

import flywheel
from flywheel import _core


def _make(path, n=2000):
    t = flywheel.Table.create(path, {"x": "int64", "emb": "float32[8]", "ids": "list<int32>"}, page_size=4096)
    x = np.arange(n, dtype=np.int64)
    emb = (np.arange(n * 8, dtype=np.float32) / 3).reshape(n, 8)
    ids = [list(range(i % 4)) for i in range(n)]
    t.append({"x": x, "emb": emb, "ids": ids})
    return t, x, emb


def test_scan_returns_read_only_views_of_the_mapped_file(table_path):
    t, x, emb = _make(table_path)
    batches = list(t.scan())
    assert len(batches) > 1  # page-aligned batches
    for b in batches:
        for arr in (b["x"], b["emb"], b["ids"].values):
            assert arr.base is not None
            assert not arr.flags.writeable
            assert not arr.flags.owndata
            mapped = _core._mapped_file(arr)
            assert mapped is not None and mapped.startswith(table_path + "/data/")
    # views: no copy, the same memory a second scan of the same handle sees
    again = list(t.scan())
    for a, b in zip(batches, again):
        assert np.shares_memory(a["x"], b["x"])
        assert a["x"].__array_interface__["data"][0] == b["x"].__array_interface__["data"][0]
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in batches]), x)


def test_views_outlive_the_table_and_iterator(table_path):
    t, x, emb = _make(table_path)
    it = t.scan(columns=["x", "emb"])
    first = next(it)
    rest = list(it)
    address = first["x"].__array_interface__["data"][0]
    del t, it
    gc.collect()
    # the mapping is still there, and every value reads back
    assert first["x"].__array_interface__["data"][0] == address
    assert _core._mapped_file(first["x"]) is not None
    xs = np.concatenate([first["x"]] + [b["x"] for b in rest])
    es = np.concatenate([first["emb"]] + [b["emb"] for b in rest])
    np.testing.assert_array_equal(xs, x)
    np.testing.assert_array_equal(es, emb)
    assert int(first["x"].sum()) == int(x[: len(first["x"])].sum())


def test_writing_to_a_view_is_refused(table_path):
    t, _, _ = _make(table_path)
    arr = next(iter(t.scan()))["x"]
    try:
        arr[0] = 5
    except ValueError as e:
        assert "read-only" in str(e)
    else:
        raise AssertionError("wrote into a read-only view")
    copy = arr.copy()
    copy[0] = 5
    assert copy.flags.writeable and copy[0] == 5


def test_copies_are_not_mapped(table_path):
    t, _, _ = _make(table_path)
    # fixed-size batches spanning pages are concatenated on the heap
    b = next(iter(t.scan(batch_rows=1500)))
    assert _core._mapped_file(b["x"]) is None
    assert not b["x"].flags.writeable  # still a read-only view of the C++ buffer
    assert _core._mapped_file(np.arange(10)) is None
