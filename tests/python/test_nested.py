"""Nested types through tables and Python: struct, list of anything, map, with
nulls at every level (issue: nested types end to end).

Round trips through Python objects (from_pylist / to_pylist), through Arrow
(pyarrow and DuckDB read what flywheel exports, flywheel ingests what they
write), zero-copy leaves, and the errors bad values and types get.
"""

import os

import numpy as np
import pyarrow as pa
import pytest

import flywheel
from flywheel import _core

# (schema, rows): the shapes users' datasets have, nulls wherever allowed.
CHAT = "list<struct<role: string, content: string?>>?"
SHAPES = {
    "chat": (CHAT, [
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"},
         {"role": "assistant", "content": None}],
        [],
        None,
        [{"role": "user", "content": ""}],
    ]),
    "image": ("struct<bytes: binary?, path: string?>?", [
        {"bytes": b"\x89PNG\r\n\x1a\n", "path": "a.png"},
        {"bytes": None, "path": "b.png"},
        None,
        {"bytes": b"", "path": None},
    ]),
    "tags": ("list<string?>?", [["a", "b"], [], None, [None, "c", None]]),
    "ragged": ("list<list<int64>?>?", [[[1, 2], [3]], [[]], None, [None, [4, 5, 6]]]),
    "scores": ("map<string, float64?>?", [{"a": 1.5, "b": None}, {}, None, {"z": -2.25}]),
    "episode": ("struct<id: int64, turns: list<struct<role: string, tokens: list<int32>>>?>?", [
        {"id": 1, "turns": [{"role": "user", "tokens": [1, 2, 3]}, {"role": "assistant", "tokens": []}]},
        {"id": 2, "turns": None},
        None,
        {"id": 3, "turns": []},
    ]),
}


def _rows(cols):
    n = len(next(iter(cols.values())))
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_pylist_round_trip_is_exact(tmp_path, shape):
    type_text, values = SHAPES[shape]
    rows = _rows({"id": list(range(len(values))), "x": values})
    t = flywheel.Table.from_pylist(str(tmp_path / "t"), rows, {"id": "int64", "x": type_text})
    assert t.schema == {"id": "int64", "x": type_text}
    assert t.to_pylist() == rows
    # Reopened from disk; take in any order, with repeats.
    t = flywheel.Table.open(str(tmp_path / "t"))
    assert t.take([3, 0, 0]).to_pylist() == [rows[3], rows[0], rows[0]]
    assert t.take([2])["x"] == [None]
    # scan gives the same Python objects batch by batch.
    got = [r for b in t.scan(batch_rows=3) for r in b.to_pylist()]
    assert got == rows


def test_a_null_list_an_empty_list_and_a_list_holding_a_null_differ(tmp_path):
    rows = [{"x": None}, {"x": []}, {"x": [None]}]
    t = flywheel.Table.from_pylist(str(tmp_path / "t"), rows, {"x": "list<int64?>?"})
    assert t.to_pylist() == rows
    arr = t.to_arrow()["x"].combine_chunks()
    assert arr.is_null().to_pylist() == [True, False, False]
    assert arr.value_lengths().to_pylist() == [None, 0, 1]
    assert arr.flatten().is_null().to_pylist() == [True]


def test_arrow_round_trip_keeps_types_and_values(tmp_path):
    src = pa.table({
        "messages": pa.array(SHAPES["chat"][1], pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        "image": pa.array(SHAPES["image"][1], pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        "tags": pa.array(SHAPES["tags"][1], pa.list_(pa.string())),
        "ragged": pa.array(SHAPES["ragged"][1], pa.list_(pa.list_(pa.int64()))),
        "scores": pa.array([list(d.items()) if d is not None else None for d in SHAPES["scores"][1]],
                           pa.map_(pa.string(), pa.float64())),
    })
    t = flywheel.Table.create(str(tmp_path / "t"), src)
    # Arrow marks children nullable by default: the schema says so exactly.
    assert t.schema["messages"] == "list<struct<role: string?, content: string?>?>?"
    assert t.schema["scores"] == "map<string, float64?>?"
    back = t.to_arrow()
    assert back.to_pylist() == src.to_pylist()
    # The same types, with flywheel's 64-bit offsets (large_*).
    assert back.schema.field("messages").type == pa.large_list(
        pa.field("item", pa.struct([("role", pa.large_string()), ("content", pa.large_string())])))
    assert back.schema.field("scores").type == pa.map_(pa.large_string(), pa.float64())
    # Appending Arrow data conforms to a table that declares children not null.
    t2 = flywheel.Table.create(str(tmp_path / "t2"), {"m": "list<struct<role: string, content: string?>>?"})
    t2.append(pa.table({"m": src["messages"]}))
    assert t2.to_pylist() == [{"m": v} for v in SHAPES["chat"][1]]
    bad = pa.table({"m": pa.array([[{"role": None, "content": "x"}]], src["messages"].type)})
    with pytest.raises(ValueError, match=r"m\[item\]\.role' is null in row 0 but is not nullable"):
        t2.append(bad)
    assert t2.num_rows == 4  # nothing half-written
    # A null struct's fields may be null in Arrow data (pyarrow makes them
    # so); for a field the table declares not null that is no value at all.
    t3 = flywheel.Table.create(str(tmp_path / "t3"), {"s": "struct<a: int64, b: string>?"})
    t3.append(pa.table({"s": pa.array([{"a": 1, "b": "x"}, None], pa.struct([("a", pa.int64()), ("b", pa.string())]))}))
    assert t3.to_pylist() == [{"s": {"a": 1, "b": "x"}}, {"s": None}]


def test_duckdb_reads_flywheel_nested_columns_value_identical(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    rows = _rows({name: vals for name, (_, vals) in SHAPES.items() if name != "scores"})
    schema = {name: t for name, (t, _) in SHAPES.items() if name != "scores"}
    t = flywheel.Table.from_pylist(str(tmp_path / "t"), rows, schema)
    con = duckdb.connect()
    con.register("t", t.to_arrow())
    got = con.execute("SELECT chat, image, tags, ragged, episode FROM t").fetchall()
    assert len(got) == 4
    # DuckDB returns structs as dicts and lists as lists: the same values.
    for row, want in zip(got, rows):
        assert row[0] == want["chat"]
        assert row[1] == want["image"]
        assert row[2] == want["tags"]
        assert row[3] == want["ragged"]
        assert row[4] == want["episode"]
    # A nested field path in SQL over the Arrow stream.
    roles = con.execute("SELECT chat[1].role FROM t").fetchall()
    assert roles == [("system",), (None,), (None,), ("user",)]


def test_duckdb_written_nested_data_ingests_with_duckdbs_schema(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    rel = con.execute("""
        SELECT * FROM (VALUES
          ([{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': NULL}],
           {'bytes': '\\x89PNG'::BLOB, 'path': 'a.png'}, ['a', NULL], [[1, 2], []], MAP {'k': 1.5::DOUBLE}),
          ([], NULL, NULL, NULL, MAP {}),
          (NULL, {'bytes': NULL, 'path': NULL}, [], [NULL, [3]], NULL)
        ) v(messages, image, tags, ragged, scores)""").to_arrow_table()
    t = flywheel.Table.create(str(tmp_path / "t"), rel)
    assert t.schema == {
        "messages": "list<struct<role: string?, content: string?>?>?",
        "image": "struct<bytes: binary?, path: string?>?",
        "tags": "list<string?>?",
        "ragged": "list<list<int32?>?>?",
        "scores": "map<string, float64?>?",
    }
    back = t.to_arrow()
    assert back.to_pylist() == rel.to_pylist()
    # And DuckDB reads flywheel's export back equal to what it wrote.
    con.register("back", back)
    assert con.execute("SELECT * FROM back").fetchall() == con.execute("SELECT * FROM rel").fetchall()


def test_leaves_are_zero_copy_arrow_views_of_the_mapped_files(tmp_path):
    t = flywheel.Table.from_pylist(str(tmp_path / "t"), [{"x": [i, None, i * 2]} for i in range(1000)],
                                   {"x": "list<int64?>"})
    batch = next(t.scan())
    rb = pa.record_batch(batch)
    values = rb.column(0).values  # the int64 leaf
    assert values.to_pylist()[:6] == [0, None, 0, 1, None, 2]
    leaf = np.frombuffer(values.buffers()[1], dtype=np.int64)
    offsets = np.frombuffer(rb.column(0).buffers()[1], dtype=np.int64)
    assert _core._mapped_file(leaf) is not None
    assert _core._mapped_file(offsets) is not None
    assert _core._mapped_file(leaf).startswith(t.path)


def test_empty_tables_and_all_null_columns(tmp_path):
    t = flywheel.Table.from_pylist(str(tmp_path / "e"), [], {"m": CHAT})
    assert t.num_rows == 0 and t.to_pylist() == []
    assert t.to_arrow().num_rows == 0
    rows = [{"m": None}] * 5
    t = flywheel.Table.from_pylist(str(tmp_path / "n"), rows, {"m": CHAT})
    assert t.to_pylist() == rows
    # A nested column added later reads null in the rows before it.
    t = flywheel.Table.from_pylist(str(tmp_path / "a"), [{"id": 1}], {"id": "int64"})
    t.add_column("meta", "struct<lang: string?>?")
    t.append({"id": [2], "meta": [{"lang": "en"}]})
    assert t.to_pylist() == [{"id": 1, "meta": None}, {"id": 2, "meta": {"lang": "en"}}]


def test_bad_values_name_the_row_and_path_and_write_nothing(tmp_path):
    path = str(tmp_path / "t")
    with pytest.raises(ValueError, match=r"column 'm'.*row 1: \[0\]\.role: expected a string, got 7"):
        flywheel.Table.from_pylist(path, [{"m": []}, {"m": [{"role": 7, "content": "x"}]}], {"m": CHAT})
    assert not os.path.exists(path)
    t = flywheel.Table.create(path, {"m": CHAT})
    with pytest.raises(ValueError, match=r"row 0: \[0\]: key 'name' is not a field of struct"):
        t.append({"m": [[{"role": "user", "content": "x", "name": "bob"}]]})
    with pytest.raises(ValueError, match=r"row 0: \[0\]\.role: is null but the type does not allow null"):
        t.append({"m": [[{"content": "x"}]]})
    with pytest.raises(ValueError, match="map keys cannot be null"):
        flywheel.Table.create(str(tmp_path / "k"), {"m": "map<string?, int64>"})
    with pytest.raises(ValueError, match="duplicate struct field name 'a'"):
        flywheel.Table.create(str(tmp_path / "d"), {"m": "struct<a: int64, a: string>"})
    deep = "list<" * 40 + "int8?" + ">" * 40
    with pytest.raises(ValueError, match="nest at most 32 levels"):
        flywheel.Table.create(str(tmp_path / "deep"), {"m": deep})
    with pytest.raises(ValueError, match=r"character 19: unknown type 'strin'"):
        flywheel.Table.create(str(tmp_path / "typo"), {"m": "list<struct<role: strin>>"})
    assert t.num_rows == 0 and t.version == 1


FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "tables", "v1_flat")


def test_tables_written_before_nested_types_open_and_scan_unchanged(tmp_path):
    """testdata/tables/v1_flat was written by flywheel before nested types
    (create, append 40 rows, delete one, add a column with a default);
    v1_flat.expected.jsonl is what that build's `table head --json` printed."""
    import json
    import shutil
    import subprocess
    path = str(tmp_path / "t")
    shutil.copytree(FIXTURE, path)
    with open(FIXTURE + ".expected.jsonl") as f:
        expected = [json.loads(line) for line in f]
    t = flywheel.Table.open(path)
    assert t.version == 4
    assert t.schema == {"id": "int64", "name": "string?", "tok": "list<int32>", "emb": "float32[2]",
                        "raw": "binary?", "extra": "int16"}
    got = t.to_pylist()
    for row in got:
        row["raw"] = None if row["raw"] is None else {"hex": row["raw"].hex()}
    assert got == expected
    assert flywheel.Table.open(path, version=2).num_rows == 40
    out = subprocess.run([os.environ.get("FLYWHEEL_BIN", "flywheel"), "table", "head", path, "--json", "-n", "100"],
                         check=True, capture_output=True, text=True).stdout
    assert [json.loads(line) for line in out.splitlines()] == expected
    # Writing to it keeps its files readable by that older build: flat
    # columns still make version 1 shards without required features.
    t.append({"id": [100], "name": ["new"], "tok": [[1]], "emb": [[0.0, 1.0]], "raw": [b"x"], "extra": [1]})
    data = [f for f in os.listdir(os.path.join(path, "data")) if f.endswith(".shard")]
    for name in data:
        with open(os.path.join(path, "data", name), "rb") as f:
            f.seek(-8, os.SEEK_END)
            tail = f.read(4)
        assert tail == b"\x01\x00\x00\x00", name  # version 1, features 0


def test_the_loader_batches_nested_columns_exactly_once(tmp_path):
    rows = [{"id": i, "m": None if i % 10 == 3 else [{"role": "user", "content": "x" * (i % 5)}] * (i % 3)}
            for i in range(200)]
    flywheel.Table.from_pylist(str(tmp_path / "t"), rows, {"id": "int64", "m": CHAT}, page_size=4096)
    seen = {}
    for rank in range(2):
        loader = flywheel.Loader(str(tmp_path / "t"), batch_size=16, columns=["id", "m"], shuffle=True, seed=5,
                                 rank=rank, world_size=2)
        for b in loader:
            assert isinstance(b["m"], list)
            for i, m in zip(b["id"].tolist(), b["m"]):
                assert i not in seen
                seen[i] = m
            # The Arrow form of a loader batch carries the nested column too.
            assert pa.record_batch(b).column(1).to_pylist() == b["m"]
    assert seen == {r["id"]: r["m"] for r in rows}


def test_filters_and_deletes_on_nested_field_paths(tmp_path):
    rows = [
        {"id": 0, "meta": {"lang": "en", "score": 0.5}, "m": [{"role": "system", "content": "a"}], "tok": [5, 6]},
        {"id": 1, "meta": {"lang": "fr", "score": None}, "m": [{"role": "user", "content": None}], "tok": []},
        {"id": 2, "meta": None, "m": [], "tok": [7]},
        {"id": 3, "meta": {"lang": "en", "score": 2.0}, "m": None, "tok": [1, 2, 3]},
        {"id": 4, "meta": {"lang": None, "score": 1.0},
         "m": [{"role": "system", "content": "b"}, {"role": "user", "content": "c"}], "tok": [9]},
    ]
    schema = {"id": "int64", "meta": "struct<lang: string?, score: float64?>?", "m": CHAT, "tok": "list<int32>"}
    t = flywheel.Table.from_pylist(str(tmp_path / "t"), rows, schema)

    def ids(where):
        return t.to_arrow(["id"], where=where)["id"].to_pylist()

    assert ids('meta.lang == "en"') == [0, 3]
    assert ids("meta.score >= 1") == [3, 4]
    assert ids('messages[0].role == "system"'.replace("messages", "m")) == [0, 4]
    assert ids('m[-1].role == "user"') == [1, 4]
    assert ids('m[1].content == "c"') == [4]
    assert ids("tok[0] == 7") == [2]
    assert ids("tok[-1] > 5") == [0, 2, 4]
    with pytest.raises(ValueError, match=r"path 'meta.nope': no field 'nope' in struct<lang: string\?, score: float64\?>"):
        ids('meta.nope == "x"')
    with pytest.raises(ValueError, match=r"\[0\] needs a list, not struct"):
        ids("meta[0] == 1")
    with pytest.raises(ValueError, match="compare it with a string"):
        ids("meta.lang == 3")
    assert t.delete(where='m[0].role == "system"') == 2
    assert [r["id"] for r in t.to_pylist()] == [1, 2, 3]


def test_jsonl_objects_and_arrays_ingest_as_nested_types(tmp_path):
    src = tmp_path / "chat.jsonl"
    src.write_text(
        '{"id": 1, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null}],'
        ' "meta": {"lang": "en"}, "tags": ["a"], "ragged": [[1, 2], []]}\n'
        '{"id": 2, "messages": [], "meta": {"lang": "fr", "src": "x"}, "tags": [], "ragged": [[3]]}\n'
        '{"id": 3, "messages": null, "tags": [null, "b"], "ragged": []}\n')
    flywheel.ingest([str(src)], str(tmp_path / "t"))
    t = flywheel.Table.open(str(tmp_path / "t"))
    assert t.schema["messages"] == "list<struct<role: string, content: string?>>?"
    assert t.schema["meta"] == "struct<lang: string, src: string?>?"
    assert t.schema["tags"] == "list<string?>?"
    assert t.schema["ragged"] == "list<list<int64>>?"
    rows = t.to_pylist()
    assert rows[0]["messages"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}]
    assert rows[1]["meta"] == {"lang": "fr", "src": "x"} and rows[2]["meta"] is None
    assert rows[2]["tags"] == [None, "b"] and rows[0]["ragged"] == [[1, 2], []]
    # A declared schema reads the same file into the types it names.
    flywheel.ingest([str(src)], str(tmp_path / "d"), columns=["id", "messages"],
                    schema="id:int64, messages:list<struct<role: string, content: string?>>?, meta:string?, "
                           "tags:list<string?>?, ragged:list<list<int32>>?")
    d = flywheel.Table.open(str(tmp_path / "d"))
    assert d.schema == {"id": "int64", "messages": "list<struct<role: string, content: string?>>?"}
    assert [r["messages"] for r in d.to_pylist()] == [r["messages"] for r in rows]


def test_jsonl_conflicts_name_the_row_and_path_and_write_nothing(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"m": [{"role": "user"}]}\n{"m": [{"role": 3}]}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2:7: field 'm': \[0\]\.role: an integer where earlier rows "
                                         r"have a string"):
        flywheel.ingest([str(src)], str(tmp_path / "t"))
    assert not os.path.exists(tmp_path / "t")
    src.write_text('{"m": {"a": 1}}\n{"m": [1]}\n')
    with pytest.raises(ValueError, match="field 'm': value: an array where earlier rows have an object"):
        flywheel.ingest([str(src)], str(tmp_path / "t"))
    # With a declared schema, a value of the wrong shape names line and path.
    src.write_text('{"m": [{"role": "user", "content": "x"}]}\n{"m": [{"role": "user", "content": 5}]}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2:.*\[0\]\.content: expected a string, got 5"):
        flywheel.ingest([str(src)], str(tmp_path / "t"), schema="m:list<struct<role: string, content: string>>")
    assert not os.path.exists(tmp_path / "t")


def test_chat_template_tokenise_mask_and_pack_in_the_loader(tmp_path):
    from flywheel import llm
    from flywheel.transforms import ChatTokenize
    model = llm.smollm2_path()
    if model is None:
        pytest.skip("SmolLM2-135M-Instruct is not imported on this machine (run `make model`)")
    tok = llm.Tokenizer.from_pretrained(model)
    rows = [{"id": i, "messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                                   {"role": "assistant", "content": f"It is {2 * i}."}]} for i in range(40)]
    rows[7]["messages"] = None
    flywheel.Table.from_pylist(str(tmp_path / "t"), rows, {"id": "int64", "messages": CHAT})
    chat = ChatTokenize(tok, "messages")
    loader = flywheel.Loader(str(tmp_path / "t"), batch_size=8, transforms=[chat])
    got = {}
    for b in loader:
        ids, mask = b["input_ids"], b["loss_mask"]
        for r, i in enumerate(b["id"].tolist()):
            got[i] = (ids.row(r).tolist(), mask.row(r).tolist())
    assert len(got) == 40
    for i, row in enumerate(rows):
        ids, mask = got[i]
        if row["messages"] is None:
            assert ids == [] and mask == []
            continue
        # The ids are the template's (as flywheel's tokenizer applies it), and
        # exactly the assistant's content tokens are masked in.
        assert ids == tok.apply_chat_template(row["messages"])
        learned = tok.decode([t for t, m in zip(ids, mask) if m])
        assert learned == row["messages"][1]["content"]
    # Packed: blocks of 64 tokens, the mask packed alongside.
    packer = ChatTokenize(tok, "messages", seq_len=64, eos_token=tok.eos_token_id)
    b = next(iter(flywheel.Loader(str(tmp_path / "t"), batch_size=8, transforms=[packer])))
    assert b["tokens"].shape[1] == 64 and b["loss_mask"].shape == b["tokens"].shape
    assert not (b["loss_mask"].astype(bool) & (b["mask"] == 0)).any()
    assert b["loss_mask"].sum() > 0


def test_adding_a_struct_field_reads_null_in_older_rows(tmp_path):
    path = str(tmp_path / "t")
    t = flywheel.Table.from_pylist(path, [{"id": 1, "meta": {"lang": "en"}}, {"id": 2, "meta": None}],
                                   {"id": "int64", "meta": "struct<lang: string?>?"})
    v = t.add_column("meta.src", "string?")
    assert t.schema["meta"] == "struct<lang: string?, src: string?>?"
    t.append({"id": [3], "meta": [{"lang": "fr", "src": "web"}]})
    want = [{"id": 1, "meta": {"lang": "en", "src": None}}, {"id": 2, "meta": None},
            {"id": 3, "meta": {"lang": "fr", "src": "web"}}]
    assert t.to_pylist() == want
    assert t.take([2, 0]).to_pylist() == [want[2], want[0]]
    assert t.to_arrow(where='meta.src == "web"')["id"].to_pylist() == [3]
    # The loader reads old and new fragments alike; time travel keeps the old type.
    got = sorted((r for b in flywheel.Loader(path, batch_size=2, columns=["id", "meta"]) for r in b.to_pylist()),
                 key=lambda r: r["id"])
    assert got == want
    assert flywheel.Table.open(path, version=v - 1).schema["meta"] == "struct<lang: string?>?"
    # Compaction rewrites the old rows with the new type.
    t.compact()
    assert flywheel.Table.open(path).to_pylist() == want
    with pytest.raises(ValueError, match="must be nullable"):
        t.add_column("meta.x", "int64")
    with pytest.raises(FileExistsError):
        t.add_column("meta.lang", "string?")
    with pytest.raises(ValueError, match="not a struct"):
        t.add_column("id.x", "int64?")


def test_statistics_per_leaf_come_from_the_data_files(tmp_path):
    t = flywheel.Table.from_pylist(str(tmp_path / "t"), [
        {"m": [{"role": "user", "content": "b"}, {"role": "assistant", "content": None}], "s": {"a": 1.5}},
        {"m": None, "s": {}},
    ], {"m": CHAT, "s": "map<string, float64?>?"})
    t.append({"m": [[{"role": "system", "content": "zz"}]], "s": [{"a": -3.0, "b": None}]})
    st = t.leaf_stats("m")
    assert st["m[].role"] == {"values": 3, "nulls": 0, "min": b"assistant", "max": b"user"}
    assert st["m[].content"] == {"values": 3, "nulls": 1, "min": b"b", "max": b"zz"}
    s = t.leaf_stats("s")
    assert s["s[key]"] == {"values": 3, "nulls": 0, "min": b"a", "max": b"b"}
    assert s["s[value]"] == {"values": 3, "nulls": 1, "min": -3.0, "max": 1.5}
    # A null struct's field slots are not values.
    t2 = flywheel.Table.from_pylist(str(tmp_path / "u"), [{"x": {"id": 5}}, {"x": None}], {"x": "struct<id: int64>?"})
    assert t2.leaf_stats("x") == {"x.id": {"values": 1, "nulls": 0, "min": 5.0, "max": 5.0}}
    with pytest.raises(KeyError):
        t.leaf_stats("nope")
    with pytest.raises(ValueError, match="leaf statistics are kept for nested columns"):
        t2.add_column("n", "int64?") and t2.leaf_stats("n")


def test_the_lm_rl_job_reads_prompts_from_a_messages_column(tmp_path):
    from flywheel import llm
    from flywheel.rl.lm import config as lmconfig
    from flywheel.rl.lm.job import Job
    model = llm.smollm2_path()
    if model is None:
        pytest.skip("SmolLM2-135M-Instruct is not imported on this machine (run `make model`)")
    rows = [{"messages": [{"role": "user", "content": f"What is {i} + 1?"}], "answer": i + 1} for i in range(20)]
    for split in ("train", "test"):
        flywheel.Table.from_pylist(str(tmp_path / split), rows, {"messages": CHAT, "answer": "int64"})
    cfg = lmconfig.parse(f"""
[data]
train = "{tmp_path / 'train'}"
test = "{tmp_path / 'test'}"
prompt = "messages"
template = "chat"
system = "Answer with a number."
[model]
checkpoint = "{model}"
[rollout]
max_new_tokens = 8
""")
    job = Job(cfg, str(tmp_path / "run"))
    job.setup()
    tok = llm.Tokenizer.from_pretrained(model)
    want = tok.apply_chat_template([{"role": "system", "content": "Answer with a number."}, rows[3]["messages"][0]],
                                   add_generation_prompt=True)
    assert job.encode(rows[3]["messages"]) == want
    assert job.test_prompts[3] == want
    items = job.prompts.take(4)
    assert all(isinstance(p, list) and p[0]["role"] == "user" for _, _, p, _ in items)
    assert sorted(a for _, _, _, a in items) == sorted(rows[i]["answer"] for _, i, _, _ in items)


def test_pack_tokens_takes_a_list_column_with_nullable_elements(tmp_path):
    from flywheel.transforms import PackTokens
    # pyarrow's default list type has nullable items: the table gets list<int64?>.
    t = flywheel.Table.create(str(tmp_path / "t"), pa.table({"tok": pa.array([[1, 2, 3], [4], [5, 6]])}))
    assert t.schema["tok"] == "list<int64?>?"
    b = next(iter(flywheel.Loader(str(tmp_path / "t"), batch_size=3, shuffle=False, transforms=[PackTokens("tok", 4)])))
    assert b["tokens"].tolist() == [[1, 2, 3, 4], [5, 6, 0, 0]]
    t.append(pa.table({"tok": pa.array([[7, None]])}))
    with pytest.raises(Exception, match="null token"):
        for _ in flywheel.Loader(str(tmp_path / "t"), batch_size=4, shuffle=False, transforms=[PackTokens("tok", 4)]):
            pass
