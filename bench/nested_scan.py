#!/usr/bin/env python3
"""Scan of a nested column: ``messages: list<struct<role: string, content:
string>>`` (Hugging Face chat shape), N rows, three ways in one run:

  flywheel  a fresh Table.open, then the column as Arrow through the C stream
            (one page-sized batch at a time; uncompressed pages are views of
            the mapped shard files, each page's checksum verified on first
            read, so every byte is read once), then every value touched
            (the UTF-8 length of every role and content: every string byte read)
  raw read  the same shard files' bytes read into memory with one read()
            each (page cache warm, as for the others): the I/O floor
  DuckDB    the same rows from a Parquet file DuckDB wrote (zstd, its
            default row groups), SELECT messages fetched as Arrow, then the
            same touch

Best and median of --repeats, all from a warm page cache. The targets
(docs/format/types.md, issue "nested types"): flywheel >= 0.5x the raw read
rate and >= 2x DuckDB.

    PYTHONPATH=build/python $(make -s python-path) bench/nested_scan.py [--rows 1000000] [--out bench/results/nested_scan.json]
"""

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import flywheel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from take_peers import loadavg, machine  # noqa: E402


def chat_column(n, seed=0):
    """n conversations of 1..4 messages, roles cycling, contents 8..120 bytes."""
    rng = np.random.default_rng(seed)
    turns = rng.integers(1, 5, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(turns, out=offsets[1:])
    m = int(offsets[-1])
    roles = np.array(["system", "user", "assistant"])[np.arange(m) % 3]
    lengths = rng.integers(8, 121, m)
    coff = np.zeros(m + 1, np.int64)
    np.cumsum(lengths, out=coff[1:])
    # Random lowercase words: text that compresses as prose does, not to nothing.
    content_bytes = rng.integers(97, 123, int(coff[-1]), dtype=np.uint8)
    content_bytes[rng.random(int(coff[-1])) < 0.17] = 32
    content = pa.LargeStringArray.from_buffers(m, pa.py_buffer(coff.tobytes()), pa.py_buffer(content_bytes.tobytes()))
    structs = pa.StructArray.from_arrays([pa.array(roles, pa.large_string()), content], ["role", "content"])
    return pa.LargeListArray.from_arrays(pa.array(offsets), structs)


def touch(col):
    """Reads every value byte once: the UTF-8 code point counts of every role
    and content (which reads each string's bytes, not just its offsets)."""
    items = pc.list_flatten(col)
    if isinstance(items, pa.ChunkedArray):
        items = items.combine_chunks() if items.num_chunks != 1 else items.chunk(0)
    total = 0
    for name in ("role", "content"):
        total += pc.sum(pc.utf8_length(pc.struct_field(items, name))).as_py() or 0
    return total


def best(fn, repeats):
    times = []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), sorted(times)[len(times) // 2], out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    import duckdb

    work = tempfile.mkdtemp(prefix="fw_nested_scan_")
    try:
        t0 = time.perf_counter()
        col = chat_column(args.rows)
        src = pa.table({"messages": col})
        path = os.path.join(work, "t")
        flywheel.Table.create(path, src)
        build_s = time.perf_counter() - t0
        parquet = os.path.join(work, "chat.parquet")
        con = duckdb.connect()
        con.register("src", src)
        con.execute(f"COPY (SELECT * FROM src) TO '{parquet}' (FORMAT PARQUET)")
        con.unregister("src")
        shards = sorted(glob.glob(os.path.join(path, "data", "*.shard")))
        shard_bytes = sum(os.path.getsize(f) for f in shards)
        want = touch(col)

        def fw_scan():
            t = flywheel.Table.open(path)
            total = 0
            for batch in t.to_arrow_reader(["messages"]):
                total += touch(batch.column(0))
            return total

        def raw_read():
            total = 0
            for f in shards:
                with open(f, "rb") as fh:
                    total += len(fh.read())
            return total

        def duck_scan():
            tbl = con.sql(f"SELECT messages FROM read_parquet('{parquet}')").to_arrow_table()
            return touch(tbl.column(0))

        fw = best(fw_scan, args.repeats)
        raw = best(raw_read, args.repeats)
        duck = best(duck_scan, args.repeats)
        assert fw[2] == want, (fw[2], want)
        assert duck[2] == want, (duck[2], want)
        res = {
            "bench": "nested_scan",
            "machine": machine(),
            "loadavg": loadavg(),
            "rows": args.rows,
            "messages": len(col.values),
            "shard_bytes": shard_bytes,
            "parquet_bytes": os.path.getsize(parquet),
            "build_seconds": round(build_s, 2),
            "seconds": {"flywheel": fw[:2], "raw_read": raw[:2], "duckdb": duck[:2]},
            "flywheel_gb_s": round(shard_bytes / fw[0] / 1e9, 2),
            "raw_read_gb_s": round(shard_bytes / raw[0] / 1e9, 2),
            "fraction_of_raw_read": round(raw[0] / fw[0], 2),
            "vs_duckdb": round(duck[0] / fw[0], 2),
        }
        print(f"{args.rows} rows, {len(col.values)} messages, shards {shard_bytes / 1e6:.1f} MB, "
              f"parquet {res['parquet_bytes'] / 1e6:.1f} MB")
        print(f"{'':10} {'best s':>8} {'median s':>9}")
        for k, (b, m) in res["seconds"].items():
            print(f"{k:10} {b:8.3f} {m:9.3f}")
        print(f"flywheel {res['flywheel_gb_s']} GB/s = {res['fraction_of_raw_read']}x the raw read "
              f"({res['raw_read_gb_s']} GB/s); {res['vs_duckdb']}x DuckDB")
        if args.out:
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)
                f.write("\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
