"""Nested Parquet through tables: ingest keeps the nested schema exactly, and
export writes standard nested Parquet (3-level LIST, MAP with key_value) that
DuckDB and pyarrow read back value-identical, nulls at every level and empty
lists included (issue: nested types end to end)."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import flywheel

duckdb = pytest.importorskip("duckdb")

# What DuckDB writes with COPY ... TO: every shape the issue names, with
# nulls at every level, empty lists and maps, and a null row.
DUCKDB_ROWS = """
  SELECT * FROM (VALUES
    (1,
     [{'role': 'system', 'content': 'be brief'}, {'role': 'user', 'content': NULL}],
     {'bytes': '\\x89PNG'::BLOB, 'path': 'a.png'},
     ['a', NULL, 'b'],
     [[1, 2]::BIGINT[], []::BIGINT[], NULL],
     MAP {'x': 1.5::DOUBLE, 'y': NULL::DOUBLE},
     {'id': 7::BIGINT, 'turns': [{'role': 'user', 'tokens': [1, 2]::INTEGER[]}]}),
    (2, [], NULL, [], [], MAP {}::MAP(VARCHAR, DOUBLE), NULL),
    (3, NULL, {'bytes': NULL, 'path': NULL}, NULL, NULL, NULL,
     {'id': 8::BIGINT, 'turns': []})
  ) v(id, messages, image, tags, ragged, scores, episode)
"""


def _duckdb_rows(con, path):
    return con.execute(f"SELECT * FROM read_parquet('{path}') ORDER BY id").fetchall()


def _duckdb_schema(con, path):
    return con.execute(f"DESCRIBE SELECT * FROM read_parquet('{path}')").fetchall()


def test_duckdb_parquet_ingests_nested_and_exports_value_identical(tmp_path):
    con = duckdb.connect()
    src = tmp_path / "src.parquet"
    con.execute(f"COPY ({DUCKDB_ROWS}) TO '{src}' (FORMAT PARQUET)")
    table = str(tmp_path / "t")
    flywheel.ingest([str(src)], table)
    t = flywheel.Table.open(table)
    # The schema DuckDB reports, in flywheel's spelling (DuckDB writes every
    # field optional, so every level is nullable).
    assert t.schema == {
        "id": "int32?",
        "messages": "list<struct<role: string?, content: string?>?>?",
        "image": "struct<bytes: binary?, path: string?>?",
        "tags": "list<string?>?",
        "ragged": "list<list<int64?>?>?",
        "scores": "map<string, float64?>?",
        "episode": "struct<id: int64?, turns: list<struct<role: string?, tokens: list<int32?>?>?>?>?",
    }
    want = _duckdb_rows(con, src)
    assert len(want) == 3
    out = tmp_path / "out.parquet"
    assert t.to_parquet(str(out)) == 3
    assert _duckdb_rows(con, out) == want
    assert _duckdb_schema(con, out) == _duckdb_schema(con, src)
    # pyarrow reads it too, the same values.
    assert pq.read_table(out).to_pylist() == pq.read_table(src).to_pylist()
    # And the Python objects agree with DuckDB's.
    rows = t.to_pylist()
    assert rows[1]["messages"] == [] and rows[2]["messages"] is None
    assert rows[0]["scores"] == {"x": 1.5, "y": None}
    assert rows[0]["ragged"] == [[1, 2], [], None]


SCHEMA = {
    "id": "int64",
    "messages": "list<struct<role: string, content: string?>>?",
    "image": "struct<bytes: binary, path: string?>?",
    "tags": "list<string>",
    "ragged": "list<list<int64>>?",
    "scores": "map<string, float64>?",
    "episode": "struct<id: int64, turns: list<struct<role: string, tokens: list<int32>>>?>?",
    "empty": "list<int32?>?",
}
ROWS = [
    {"id": 1, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}],
     "image": {"bytes": b"\x00\x01", "path": None}, "tags": ["a", "b"], "ragged": [[1, 2], []],
     "scores": {"a": 1.5, "b": -2.0}, "episode": {"id": 1, "turns": [{"role": "u", "tokens": [1, 2, 3]}]},
     "empty": None},
    {"id": 2, "messages": [], "image": None, "tags": [], "ragged": None, "scores": {},
     "episode": {"id": 2, "turns": None}, "empty": []},
    {"id": 3, "messages": None, "image": {"bytes": b"", "path": "p"}, "tags": [""], "ragged": [],
     "scores": None, "episode": None, "empty": [None]},
]


def test_flywheel_tables_export_nested_parquet_that_round_trips(tmp_path):
    t = flywheel.Table.from_pylist(str(tmp_path / "t"), ROWS, SCHEMA)
    out = tmp_path / "out.parquet"
    assert t.to_parquet(str(out)) == 3
    # Standard nested Parquet: DuckDB's view of the values equals the rows.
    con = duckdb.connect()
    got = con.execute(f"SELECT * FROM read_parquet('{out}') ORDER BY id").fetchall()
    for row, want in zip(got, ROWS):
        d = dict(zip(SCHEMA, row))
        d["scores"] = d["scores"] if d["scores"] is None else dict(d["scores"])
        assert d == want
    # Required levels stay required: the Parquet schema says which.
    schema = pq.read_schema(out)
    assert schema.field("tags").nullable is False
    assert schema.field("tags").type.value_field.nullable is False
    scores = schema.field("scores").type
    assert isinstance(scores, pa.MapType)
    assert (scores.key_type, scores.item_type, scores.item_field.nullable) == (pa.string(), pa.float64(), False)
    # Ingest that file again: the same table schema and rows.
    again = str(tmp_path / "again")
    flywheel.ingest([str(out)], again)
    t2 = flywheel.Table.open(again)
    assert t2.schema == SCHEMA
    assert t2.to_pylist() == ROWS


def test_empty_and_all_null_nested_tables_export(tmp_path):
    con = duckdb.connect()
    t = flywheel.Table.from_pylist(str(tmp_path / "e"), [], SCHEMA)
    out = tmp_path / "e.parquet"
    assert t.to_parquet(str(out)) == 0
    assert con.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchone() == (0,)
    nulls = [{"id": i, "messages": None, "image": None, "tags": [], "ragged": None, "scores": None,
              "episode": None, "empty": None} for i in range(4)]
    t = flywheel.Table.from_pylist(str(tmp_path / "n"), nulls, SCHEMA)
    out = tmp_path / "n.parquet"
    t.to_parquet(str(out))
    got = con.execute(f"SELECT messages, image, ragged, scores, episode FROM read_parquet('{out}')").fetchall()
    assert got == [(None,) * 5] * 4


def test_pyarrow_written_nested_parquet_ingests_and_exports_value_identical(tmp_path):
    src = pa.table({
        "messages": pa.array([[{"role": "user", "content": "hi"}], [], None],
                             pa.list_(pa.struct([pa.field("role", pa.string(), nullable=False),
                                                 pa.field("content", pa.string())]))),
        "scores": pa.array([[("a", 1.0)], None, []], pa.map_(pa.string(), pa.float64())),
        "deep": pa.array([[[["x"]]], [[[], None]], None], pa.list_(pa.list_(pa.list_(pa.string())))),
    })
    path = tmp_path / "src.parquet"
    pq.write_table(src, path)
    table = str(tmp_path / "t")
    flywheel.ingest([str(path)], table)
    t = flywheel.Table.open(table)
    assert t.schema == {"messages": "list<struct<role: string, content: string?>?>?",
                        "scores": "map<string, float64?>?",
                        "deep": "list<list<list<string?>?>?>?"}
    out = tmp_path / "out.parquet"
    t.to_parquet(str(out))
    assert pq.read_table(out).to_pylist() == src.to_pylist()
    con = duckdb.connect()
    assert con.execute(f"SELECT * FROM read_parquet('{out}')").fetchall() == \
        con.execute(f"SELECT * FROM read_parquet('{path}')").fetchall()
