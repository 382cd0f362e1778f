"""Arrow in and out through the C data interface (docs/arrow.md): pyarrow,
Polars and DuckDB each as a reader and a writer; exact round trips for every
type of the mapping, nulls included; zero-copy export of mapped pages; bad
input refused with nothing committed."""

import gc

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pytest

import flywheel
from flywheel import _core

SCHEMA = {
    "i8": "int8?", "i16": "int16", "i32": "int32?", "i64": "int64",
    "u8": "uint8", "u16": "uint16?", "u32": "uint32", "u64": "uint64?",
    "f16": "float16?", "f32": "float32", "f64": "float64?", "b": "bool?",
    "s": "string?", "bin": "binary", "li": "list<int32>?", "lf": "list<float64>",
    "t": "float32[2,3]", "tv": "uint8[4]?",
}


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    mask = rng.random(n) < 0.2
    d = {}
    for name, typ in SCHEMA.items():
        base = typ.rstrip("?")
        if base in ("string", "binary"):
            vals = [("x" * int(k) + f"é{i}") for i, k in enumerate(rng.integers(0, 30, n))]
            if base == "binary":
                vals = [v.encode() for v in vals]
        elif base.startswith("list<"):
            dt = np.int32 if "int32" in base else np.float64
            vals = [rng.integers(-5, 5, int(k)).astype(dt) for k in rng.integers(0, 6, n)]
        elif "[" in base:
            dt, shape = base.split("[")
            shape = tuple(int(x) for x in shape.rstrip("]").split(","))
            vals = rng.integers(0, 200, (n,) + shape).astype(np.dtype(dt))
        elif base == "bool":
            vals = rng.random(n) < 0.5
        else:
            info = np.iinfo(base) if base[0] in "iu" else None
            vals = (rng.integers(info.min, info.max, n, dtype=base, endpoint=True) if info is not None
                    else rng.standard_normal(n).astype(base))
        if typ.endswith("?"):
            if isinstance(vals, np.ndarray):
                vals = np.ma.masked_array(vals, mask=np.broadcast_to(
                    mask.reshape((n,) + (1,) * (vals.ndim - 1)), vals.shape))
            else:
                vals = [None if m else v for v, m in zip(vals, mask)]
        d[name] = vals
    return d


def _rows(table):
    """Python values per column of a flywheel table (nulls as None)."""
    out = {}
    for name, col in table.to_dict().items():
        if isinstance(col, flywheel.ListArray):
            out[name] = col.to_list()
        elif isinstance(col, np.ma.MaskedArray):
            out[name] = [None if m.any() else v for v, m in
                         zip(col.data.tolist(), np.ma.getmaskarray(col).reshape(len(col), -1))]
        elif isinstance(col, np.ndarray):
            out[name] = col.tolist()
        else:
            out[name] = list(col)
    return out


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("arrow") / "src")
    t = flywheel.Table.create(path, SCHEMA, page_size=4096)
    t.append(_data(500))
    t.append(_data(37, seed=1))
    return t


def test_every_type_maps_to_arrow_with_its_nullability(src):
    at = src.to_arrow()
    assert at.num_rows == 537
    s = at.schema
    assert s.field("i8").type == pa.int8() and s.field("i8").nullable
    assert s.field("i64").type == pa.int64() and not s.field("i64").nullable
    assert s.field("u64").type == pa.uint64()
    assert s.field("f16").type == pa.float16()
    assert s.field("b").type == pa.bool_()
    assert s.field("s").type == pa.large_string()
    assert s.field("bin").type == pa.large_binary()
    assert s.field("li").type == pa.large_list(pa.field("item", pa.int32(), nullable=False))
    t = s.field("t").type
    assert isinstance(t, pa.FixedShapeTensorType) and t.shape == [2, 3] and t.value_type == pa.float32()
    assert s.field("tv").type.shape == [4]


def test_flywheel_arrow_flywheel_is_exact(src, tmp_path):
    at = src.to_arrow()
    back = flywheel.Table.create(str(tmp_path / "back"), at)
    assert back.schema == src.schema
    assert _rows(back) == _rows(src)
    # The same values as pyarrow sees them.
    assert at.column("s").to_pylist() == _rows(src)["s"]
    assert at.column("li").to_pylist() == _rows(src)["li"]
    assert at.column("b").to_pylist() == _rows(src)["b"]


def test_arrow_flywheel_arrow_is_exact_for_arrow_input_types(tmp_path):
    n = 6
    tensor_t = pa.fixed_shape_tensor(pa.int16(), [2, 2])
    storage = pa.array([[i, i + 1, i + 2, i + 3] for i in range(n)], pa.list_(pa.int16(), 4))
    src = pa.table({
        "a": pa.array([1, None, 3, 4, None, 6], pa.int32()),
        "h": pa.array(np.array([0.5, 1, 2, -3, 4, 8], np.float16)),
        "s": pa.array(["a", None, "ccc", "", "é", "long string beyond twelve"], pa.string()),
        "sv": pa.array(["short", "a string view longer than 12", None, "x", "", "y"], pa.string_view()),
        "ls": pa.array(["p", "q", "r", "s", "t", "u"], pa.large_string()),
        "bv": pa.array([b"1", b"22", None, b"", b"view bytes beyond 12!", b"z"], pa.binary_view()),
        "d": pa.array(["red", "blue", "red", None, "green", "blue"]).dictionary_encode(),
        "l": pa.array([[1], [], None, [2, 3], [4], [5, 6, 7]], pa.list_(pa.field("item", pa.int64(), nullable=False))),
        "fsl": pa.array([[1.0, 2.0]] * n, pa.list_(pa.float32(), 2)),
        "ten": pa.ExtensionArray.from_storage(tensor_t, storage),
        "flag": pa.array([True, False, None, True, True, False]),
    })
    t = flywheel.Table.create(str(tmp_path / "t"), src)
    assert t.num_rows == n
    assert t.schema["d"] == "string?" and t.schema["fsl"] == "float32[2]?" and t.schema["ten"] == "int16[2,2]?"
    out = t.to_arrow()
    for name in src.column_names:
        want = src.column(name)
        if isinstance(want.type, pa.ExtensionType):
            assert out.column(name).type == want.type
            assert out.column(name).to_pylist() == want.to_pylist()
            continue
        assert out.column(name).to_pylist() == want.to_pylist(), name
    # Normalised types: strings and lists come back with 64-bit offsets.
    assert out.schema.field("s").type == pa.large_string()
    assert out.schema.field("sv").type == pa.large_string()
    assert out.schema.field("d").type == pa.large_string()
    assert out.schema.field("l").type == pa.large_list(pa.field("item", pa.int64(), nullable=False))


def test_slices_with_offsets_import_correctly(tmp_path):
    src = pa.table({"x": pa.array(range(100), pa.int64()),
                    "s": pa.array([None if i % 7 == 0 else str(i) for i in range(100)]),
                    "b": pa.array([i % 3 == 0 for i in range(100)])})
    sliced = src.slice(13, 50)  # non-zero array offsets, unaligned validity
    t = flywheel.Table.create(str(tmp_path / "t"), sliced)
    assert t.to_arrow().to_pylist() == sliced.to_pylist()


def test_polars_and_duckdb_read_a_table(src, tmp_path):
    df = pl.DataFrame(src.to_arrow(columns=["i64", "s", "li", "f64"]))
    assert df.height == src.num_rows
    rows = _rows(src)
    assert df["i64"].to_list() == rows["i64"]
    assert df["s"].to_list() == rows["s"]
    # Polars reads the table object itself (the PyCapsule stream).
    assert pl.DataFrame(src).height == src.num_rows
    # DuckDB has no float16 type: it reads a table without one (a flywheel
    # Table handle, found by its Python variable name).
    t = flywheel.Table.create(str(tmp_path / "no_f16"),
                              src.to_arrow(columns=[c for c in SCHEMA if c != "f16"]))  # noqa: F841
    total, nn = duckdb.sql("select sum(i64)::hugeint, count(s) from t").fetchall()[0]
    assert total == sum(rows["i64"])
    assert nn == sum(v is not None for v in rows["s"])
    got = duckdb.sql("select i64 from t where i64 > 0 order by i64 limit 3").fetchall()
    assert [g[0] for g in got] == sorted(v for v in rows["i64"] if v > 0)[:3]


def test_polars_and_duckdb_write_a_table(tmp_path):
    df = pl.DataFrame({"a": [1, 2, None], "s": ["x", None, "zz"], "f": [0.5, 1.5, 2.5],
                       "l": [[1, 2], [], [3]]})
    t = flywheel.Table.create(str(tmp_path / "pl"), df)
    assert t.schema["a"] == "int64?" and t.schema["s"] == "string?"
    assert t.to_arrow().to_pylist() == df.to_arrow().to_pylist()
    rel = duckdb.sql("select range::BIGINT as id, 'v' || range::VARCHAR as name from range(1000)")
    t2 = flywheel.Table.create(str(tmp_path / "dd"), rel)
    assert t2.num_rows == 1000
    assert t2.take([0, 999])["name"] == ["v0", "v999"]
    # append from DuckDB too: one version for all its batches
    v = t2.version
    t2.append(duckdb.sql("select range::BIGINT + 1000 as id, 'w' as name from range(5000)"))
    assert t2.version == v + 1 and t2.num_rows == 6000


def test_fixed_width_export_is_zero_copy_into_the_mapped_file(tmp_path):
    path = str(tmp_path / "z")
    t = flywheel.Table.create(path, {"x": "int64", "e": "float32[8]"})
    t.append({"x": np.arange(10000), "e": np.ones((10000, 8), np.float32)})
    at = t.to_arrow()
    for name, buf_index in (("x", 1),):
        for chunk in at.column(name).chunks:
            addr = chunk.buffers()[buf_index]
            view = np.frombuffer(addr, dtype=np.uint8)
            mapped = _core._mapped_file(view)
            assert mapped is not None and mapped.startswith(path + "/data/"), mapped
    storage = at.column("e").chunks[0].storage
    values = storage.values.buffers()[1]
    assert _core._mapped_file(np.frombuffer(values, dtype=np.uint8)).startswith(path + "/data/")
    # The Arrow data outlives the Table handle.
    del t
    gc.collect()
    assert at.column("x").to_numpy().tolist() == list(range(10000))
    assert float(pa.compute.sum(at.column("x")).as_py()) == 10000 * 9999 / 2


def test_to_arrow_columns_version_and_where(src, tmp_path):
    path = str(tmp_path / "v")
    t = flywheel.Table.create(path, {"x": "int64", "s": "string"})
    t.append({"x": np.arange(10), "s": [str(i) for i in range(10)]})
    t.append({"x": np.arange(10, 15), "s": [str(i) for i in range(10, 15)]})
    assert t.to_arrow(version=2).num_rows == 10
    assert t.to_arrow(columns=["s"]).column_names == ["s"]
    got = t.to_arrow(columns=["s"], where="x >= 12")
    assert got.column("s").to_pylist() == ["12", "13", "14"]
    with pytest.raises(KeyError):
        t.to_arrow(columns=["nope"])
    with pytest.raises(ValueError):
        t.to_arrow(where="x ~ 3")
    reader = t.to_arrow_reader(batch_rows=4)
    assert [b.num_rows for b in reader] == [4, 4, 4, 3]


def test_take_and_loader_batches_are_arrow_batches(src):
    b = src.take([5, 0, 536], columns=["i64", "s", "t"])
    rb = pa.record_batch(b)
    assert rb.num_rows == 3
    assert rb.column("i64").to_pylist() == b["i64"].tolist()
    assert rb.column("s").to_pylist() == b["s"]
    with flywheel.Loader(src, batch_size=64, seed=3, columns=["i64", "f32", "s"]) as loader:
        first = next(iter(loader))
        rb = pa.record_batch(first)
        assert rb.num_rows == 64
        np.testing.assert_array_equal(rb.column("f32").to_numpy(), first["f32"])
        assert pl.DataFrame(first)["s"].to_list() == first["s"]


def test_ingest_takes_arrow_objects(tmp_path):
    path = str(tmp_path / "ing")
    r = flywheel.ingest(pa.table({"k": [1, 2, 3]}), path)
    assert r["rows"] == 3
    r = flywheel.ingest(pa.table({"k": [4, 5]}).to_reader(), path)
    assert r["rows"] == 2 and len(r["versions"]) == 1
    assert flywheel.Table.open(path).to_arrow().column("k").to_pylist() == [1, 2, 3, 4, 5]


def test_temporal_types_round_trip_with_units_and_zones(tmp_path):
    import datetime as dt
    utc = dt.timezone.utc
    src = pa.table({
        "ts_us_utc": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=utc), None], pa.timestamp("us", tz="UTC")),
        "ts_ns": pa.array([1_700_000_000_123_456_789, -5], pa.timestamp("ns")),
        "ts_s_paris": pa.array([0, 86_400], pa.timestamp("s", tz="Europe/Paris")),
        "d32": pa.array([dt.date(1999, 12, 31), None], pa.date32()),
        "d64": pa.array([86_400_000, 0], pa.date64()),
        "t_ms": pa.array([1_000, 2_000], pa.time32("ms")),
        "t_ns": pa.array([1, None], pa.time64("ns")),
        "dur": pa.array([dt.timedelta(seconds=3), dt.timedelta(microseconds=-7)], pa.duration("us")),
    })
    t = flywheel.Table.create(str(tmp_path / "t"), src)
    assert t.schema["ts_us_utc"] == "int64?" and t.schema["d32"] == "int32?" and t.schema["t_ms"] == "int32?"
    back = t.to_arrow()
    assert back.schema == src.schema
    assert back.equals(src)
    assert pa.record_batch(t.take([1, 0])).column("ts_s_paris").type == pa.timestamp("s", tz="Europe/Paris")
    # Polars and DuckDB read them as datetimes
    df = pl.DataFrame(t)
    assert df["ts_us_utc"].dtype == pl.Datetime("us", "UTC")
    tt = t  # noqa: F841
    got = duckdb.sql("select d32 from tt where d32 is not null").fetchall()
    assert got == [(dt.date(1999, 12, 31),)]
    # A timestamp in another unit is refused on append; nothing committed.
    v = t.version
    with pytest.raises(ValueError, match=r"column 'ts_ns' is timestamp\(ms\) in the Arrow data but timestamp\(ns\)"):
        t.append(pa.table({"ts_ns": pa.array([1], pa.timestamp("ms"))}))
    assert t.version == v
    t.append(pa.table({"ts_ns": pa.array([7], pa.timestamp("ns"))}))
    assert t.to_arrow(columns=["ts_ns"]).column(0).to_pylist()[-1] == pa.scalar(7, pa.timestamp("ns")).as_py()


def test_unsupported_type_is_refused_naming_the_column(tmp_path):
    import decimal
    path = str(tmp_path / "bad")
    src = pa.table({"ok": [1, 2], "price": pa.array([decimal.Decimal("1.25"), None], pa.decimal128(12, 2))})
    with pytest.raises(ValueError, match=r"column 'price'.*decimal\(12,2\)"):
        flywheel.Table.create(path, src)
    import os
    assert not os.path.exists(path)  # nothing left behind
    # Inside a nested type, the error names the path to the field.
    nested = pa.table({"m": pa.array([{"role": "user", "price": decimal.Decimal("1.25")}])})
    with pytest.raises(ValueError, match=r"column 'm.price'.*decimal\(3,2\)"):
        flywheel.Table.create(path, nested)
    assert not os.path.exists(path)


def test_bad_appends_commit_nothing(tmp_path):
    t = flywheel.Table.create(str(tmp_path / "t"), {"x": "int64", "s": "string"})
    t.append({"x": [1], "s": ["a"]})
    v, n = t.version, t.num_rows
    with pytest.raises(ValueError, match=r"column 'x' is int32 in the Arrow data but int64"):
        t.append(pa.table({"x": pa.array([1], pa.int32()), "s": ["b"]}))
    with pytest.raises(ValueError, match=r"'nope' is not in the table schema"):
        t.append(pa.table({"x": [1], "nope": [2]}))
    with pytest.raises(ValueError, match=r"column 's' has 1 nulls but is not nullable"):
        t.append(pa.table({"x": [1, 2], "s": ["b", None]}))
    # a multi-batch stream whose second batch is bad: the first is not committed either
    good = pa.record_batch({"x": pa.array([7, 8]), "s": pa.array(["g", "h"])})
    bad = pa.record_batch({"x": pa.array([9]), "s": pa.array([None], pa.string())})
    reader = pa.RecordBatchReader.from_batches(good.schema, [good, bad])
    with pytest.raises(ValueError, match="batch 1"):
        t.append(reader)
    t2 = flywheel.Table.open(t.path)
    assert (t2.version, t2.num_rows) == (v, n)
    assert (t.version, t.num_rows) == (v, n)
    with pytest.raises(TypeError, match="Arrow object|dict"):
        t.append(42)


def test_scan_batches_are_arrow_batches_and_readers_take_the_table_itself(src):
    rows = _rows(src)
    batches = list(src.scan(columns=["i64", "s"]))
    assert len(batches) > 1
    got = pa.Table.from_batches([pa.record_batch(b) for b in batches])
    assert got.column("i64").to_pylist() == rows["i64"]
    assert got.column("s").to_pylist() == rows["s"]
    whole = pa.table(src)  # the Table object, through __arrow_c_stream__
    assert whole.num_rows == src.num_rows and whole.column("s").to_pylist() == rows["s"]


def test_every_type_round_trips_through_polars_and_duckdb_as_writers(src, tmp_path):
    cols = [c for c in SCHEMA if c != "f16"]  # neither Polars nor DuckDB has float16
    fields = {c: SCHEMA[c] for c in cols}
    want = {c: v for c, v in _rows(src).items() if c in cols}
    via_polars = flywheel.Table.create(str(tmp_path / "pl"), fields)
    via_polars.append(pl.DataFrame(src.to_arrow(columns=cols)))
    assert _rows(via_polars) == want
    t = flywheel.Table.create(str(tmp_path / "no_f16"), src.to_arrow(columns=cols))  # noqa: F841
    via_duckdb = flywheel.Table.create(str(tmp_path / "dd"), fields)
    via_duckdb.append(duckdb.sql("select * from t"))
    assert _rows(via_duckdb) == want
