"""Every column type written from Python reads back with the right values,
dtypes, shapes and nulls."""

import numpy as np
import pytest

import flywheel

SCALARS = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64"]


def _values(dtype, n):
    if dtype == "bool":
        return np.arange(n) % 3 == 0
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    if info is not None:
        v = np.arange(n, dtype=np.int64) * 7 - (3 * n if info.min < 0 else 0)
        v = np.clip(v, info.min, info.max).astype(dtype)
        v[-1] = info.max  # extremes survive
        v[0] = info.min
        return v
    return (np.arange(n) * 0.5 - 3.25).astype(dtype)


@pytest.mark.parametrize("dtype", SCALARS)
def test_scalar_columns_round_trip_with_exact_dtype(table_path, dtype):
    t = flywheel.Table.create(table_path, {"v": dtype})
    data = _values(dtype, 50)
    assert t.append({"v": data}) == 2
    got = t.to_dict()["v"]
    assert got.dtype == np.dtype(dtype)
    assert got.shape == (50,)
    np.testing.assert_array_equal(got, data)
    taken = t.take([49, 0, 7])["v"]
    np.testing.assert_array_equal(taken, data[[49, 0, 7]])


def test_tensor_columns_come_back_with_row_shape(table_path):
    t = flywheel.Table.create(table_path, "img:uint8[4,3,2], emb:float32[16], h:float16[2]")
    n = 9
    img = (np.arange(n * 24) % 251).astype(np.uint8).reshape(n, 4, 3, 2)
    emb = np.random.default_rng(0).standard_normal((n, 16)).astype(np.float32)
    h = np.array([[i, -i / 4] for i in range(n)], dtype=np.float16)
    t.append({"img": img, "emb": emb, "h": h})
    got = t.to_dict()
    assert got["img"].shape == (n, 4, 3, 2) and got["img"].dtype == np.uint8
    assert got["emb"].shape == (n, 16) and got["emb"].dtype == np.float32
    assert got["h"].dtype == np.float16
    np.testing.assert_array_equal(got["img"], img)
    np.testing.assert_array_equal(got["emb"], emb)
    np.testing.assert_array_equal(got["h"], h)
    np.testing.assert_array_equal(t.take([8, 2])["emb"], emb[[8, 2]])


def test_strings_and_binary_with_nulls(table_path):
    t = flywheel.Table.create(table_path, {"s": "string?", "b": "binary?", "r": "string"})
    s = ["alpha", None, "", "ünïcødé ✓", None, "z" * 1000]
    b = [b"\x00\x01", None, b"", bytearray(b"xyz"), b"\xff" * 3, None]
    r = ["a", "b", "c", "d", "e", "f"]
    t.append({"s": s, "b": b, "r": r})
    got = t.to_dict()
    assert got["s"] == s
    assert got["b"] == [b"\x00\x01", None, b"", b"xyz", b"\xff\xff\xff", None]
    assert got["r"] == r
    assert t.take([3, 1])["s"] == ["ünïcødé ✓", None]
    # numpy string arrays and masked arrays are accepted too
    t.append({"s": np.ma.masked_array(np.array(["p", "q"]), mask=[False, True]), "r": np.array(["g", "h"])})
    assert t.take([6, 7], ["s", "r", "b"]) == {"s": ["p", None], "r": ["g", "h"], "b": [None, None]}


def test_list_columns_return_offsets_from_zero_and_values(table_path):
    t = flywheel.Table.create(table_path, {"ids": "list<int32>?", "w": "list<float64>"})
    ids = [[1, 2, 3], None, [], np.array([4], dtype=np.int32), [5, 6]]
    w = [[0.5], [], [1.5, 2.5], [3.5], []]
    t.append({"ids": ids, "w": w})
    col = t.to_dict()["ids"]
    assert isinstance(col, tuple) and len(col) == 2
    offsets, values = col
    assert offsets.dtype == np.int64 and values.dtype == np.int32
    np.testing.assert_array_equal(offsets, [0, 3, 3, 3, 4, 6])
    np.testing.assert_array_equal(values, [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(col.mask, [False, True, False, False, False])
    assert col.num_rows == 5
    assert col.to_list() == [[1, 2, 3], None, [], [4], [5, 6]]
    wcol = t.to_dict()["w"]
    assert wcol.mask is None
    assert wcol.to_list() == w
    # take of later rows: offsets are rebased to start at 0
    part = t.take([4, 3])["ids"]
    np.testing.assert_array_equal(part.offsets, [0, 2, 3])
    np.testing.assert_array_equal(part.values, [5, 6, 4])
    # a ListArray is accepted as input (round trip)
    t.append({"ids": part, "w": t.take([4, 3])["w"]})
    assert t.take([5, 6])["ids"].to_list() == [[5, 6], [4]]


def test_list_scan_slices_start_offsets_at_zero(table_path):
    t = flywheel.Table.create(table_path, {"ids": "list<int64>"}, page_size=1024)
    rows = [list(range(i % 5)) for i in range(600)]
    t.append({"ids": rows})
    seen = []
    for batch in t.scan(batch_rows=7):
        col = batch["ids"]
        assert col.offsets[0] == 0
        assert col.offsets[-1] == len(col.values)
        seen.extend(col.to_list())
    assert seen == rows


def test_nullable_fixed_width_columns_are_masked_arrays(table_path):
    t = flywheel.Table.create(table_path, {"x": "float64?", "v": "int16[2]?", "k": "int32?"})
    x = np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False])
    v = [[1, 2], None, [5, 6]]
    t.append({"x": x, "v": v, "k": [1, 2, 3]})
    got = t.to_dict()
    assert isinstance(got["x"], np.ma.MaskedArray)
    np.testing.assert_array_equal(got["x"].mask, [False, True, False])
    assert got["x"][0] == 1.0 and got["x"][2] == 3.0
    assert isinstance(got["v"], np.ma.MaskedArray) and got["v"].shape == (3, 2)
    np.testing.assert_array_equal(np.ma.getmaskarray(got["v"]).all(axis=1), [False, True, False])
    np.testing.assert_array_equal(got["v"][2], [5, 6])
    # no nulls -> a plain ndarray even for a nullable column
    assert type(got["k"]) is np.ndarray
    # omitted nullable columns read null
    t.append({"k": [4]})
    last = t.take([3])
    assert last["x"].mask.all() and last["v"].mask.all()


def test_dtype_rules_safe_casts_accepted_unsafe_refused(table_path):
    t = flywheel.Table.create(table_path, {"i": "int64", "f": "float32", "b": "bool"})
    # safe: int32 -> int64, float16 -> float32, bool stays bool
    t.append({"i": np.arange(3, dtype=np.int32), "f": np.ones(3, np.float16), "b": np.ones(3, bool)})
    # Python sequences convert by value
    t.append({"i": [1, 2], "f": [0.1, 0.2], "b": [True, 0]})
    got = t.to_dict()
    assert got["i"].dtype == np.int64 and got["f"].dtype == np.float32
    np.testing.assert_array_equal(got["f"][3:], np.array([0.1, 0.2], np.float32))
    np.testing.assert_array_equal(got["b"][3:], [True, False])
    with pytest.raises(TypeError, match="column 'f'.*float64 to float32"):
        t.append({"i": [1], "f": np.array([1.0]), "b": [True]})
    with pytest.raises(TypeError, match="column 'i'"):
        t.append({"i": np.array([1.5]), "f": [1.0], "b": [True]})
    with pytest.raises(TypeError, match="column 'i'"):
        t.append({"i": [1.5], "f": [1.0], "b": [True]})
    with pytest.raises(ValueError, match="column 'b'"):
        t.append({"i": [1], "f": [1.0], "b": [2]})
    with pytest.raises(TypeError, match="column 'i'"):
        t.append({"i": np.array([1], dtype=np.uint64), "f": [1.0], "b": [True]})
    assert t.num_rows == 5


def test_compressed_tables_round_trip(tmp_path):
    for codec in ("lz4", "zstd"):
        t = flywheel.Table.create(str(tmp_path / codec), {"x": "int64", "s": "string", "e": "float32[3]"},
                                  codec=codec, page_size=4096)
        x = np.arange(5000)
        t.append({"x": x, "s": [str(i) for i in x], "e": np.repeat(x[:, None], 3, axis=1).astype(np.float32)})
        reopened = flywheel.Table.open(str(tmp_path / codec))
        got = reopened.to_dict()
        np.testing.assert_array_equal(got["x"], x)
        assert got["s"][4999] == "4999"
        # the codec chosen at create is table config: later handles write with it
        assert reopened.config["codec"] == codec and reopened.config["page_size"] == "4096"
        reopened.append({"x": [1], "s": ["a"], "e": [[1, 2, 3]]})
        last = list(reopened.scan(columns=["x"]))[-1]["x"]
        assert last[-1] == 1
        assert flywheel._core._mapped_file(last) is None  # decoded pages live on the heap


def test_empty_table_reads_empty_columns_of_the_right_type(table_path):
    t = flywheel.Table.create(table_path, {"x": "int64", "e": "float16[3]", "s": "string?", "l": "list<uint8>"})
    got = t.to_dict()
    assert got["x"].shape == (0,) and got["x"].dtype == np.int64
    assert got["e"].shape == (0, 3) and got["e"].dtype == np.float16
    assert got["s"] == []
    np.testing.assert_array_equal(got["l"].offsets, [0])
    assert got["l"].values.dtype == np.uint8
    assert list(t.scan()) == []
    assert len(t) == 0


def test_scan_batches_cover_all_rows_in_order(table_path):
    t = flywheel.Table.create(table_path, {"x": "int64", "name": "string"}, page_size=1024)
    for start in (0, 700, 1000):
        t.append({"x": np.arange(start, start + 300 if start != 0 else 700),
                  "name": [f"r{i}" for i in range(start, start + 300 if start != 0 else 700)]})
    xs, names = [], []
    for b in t.scan():
        assert set(b) == {"x", "name"}
        xs.append(b["x"])
        names.extend(b["name"])
    np.testing.assert_array_equal(np.concatenate(xs), np.arange(1300))
    assert names == [f"r{i}" for i in range(1300)]
    sizes = [len(b["x"]) for b in t.scan(columns=["x"], batch_rows=128)]
    assert sizes[:-1] == [128] * (len(sizes) - 1) and sum(sizes) == 1300
    only = next(iter(t.scan(columns="name")))
    assert list(only) == ["name"]
