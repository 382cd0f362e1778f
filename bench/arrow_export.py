#!/usr/bin/env python3
"""Arrow export throughput: a flywheel table handed to pyarrow through the C
stream interface, against reading the same columns from a memory-mapped Arrow
IPC file with pyarrow (the zero-copy ceiling: no decoding, no copies).

Workloads (same data, same run, best of --repeats):
  fixed   int64 + float32[16] columns (uncompressed pages: zero-copy both ways)
  string  one string column (~64 bytes a row)
Each is measured two ways:
  open     the Arrow table made (pyarrow.Table from the stream / read_all of
           the mapped IPC file): per-batch overhead only
  touch    the same, then every value byte read once (pyarrow.compute over
           each column: sum for numbers; for strings the lengths, i.e. the offsets only): bounded by
           memory bandwidth, the figure a consumer sees
Also Arrow import (Table.create from a pyarrow Table) against pyarrow writing
the IPC file, for the write direction.

    PYTHONPATH=build/python $(make -s python-path) bench/arrow_export.py [--rows 4000000] [--out bench/results/arrow.json]
"""

import argparse
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
from take_peers import loadavg, machine  # noqa: E402  (the machine description every results file carries)


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), sorted(times)[len(times) // 2]


def touch(table):
    total = 0
    for col in table.columns:
        t = col.type
        if isinstance(t, pa.BaseExtensionType):
            col = pa.chunked_array([c.storage for c in col.chunks])
            t = col.type
        if pa.types.is_fixed_size_list(t):
            col = pc.list_flatten(col)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            total += pc.sum(pc.binary_length(col)).as_py() or 0
        else:
            total += pc.sum(col).as_py() or 0
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--out", default=None, help="JSON results file")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    n = args.rows
    work = tempfile.mkdtemp(prefix="fw-arrow-", dir=args.tmp)
    results = {"machine": machine(), "rows": n, "workloads": {}}
    try:
        x = np.arange(n, dtype=np.int64)
        emb = rng.standard_normal((n, 16), dtype=np.float32)
        words = np.array([f"{i:08d}" * 8 for i in range(1000)], dtype=object)
        text = words[rng.integers(0, 1000, n)].tolist()
        fixed = pa.table({"x": x, "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), 16)})
        strings = pa.table({"s": pa.array(text, pa.large_string())})

        for name, src in (("fixed", fixed), ("string", strings)):
            path = os.path.join(work, name)
            t0 = time.perf_counter()
            t = flywheel.Table.create(path, src)
            import_s = time.perf_counter() - t0
            ipc = os.path.join(work, name + ".arrow")
            t0 = time.perf_counter()
            with pa.OSFile(ipc, "wb") as sink, pa.ipc.new_file(sink, src.schema) as w:
                for b in src.to_batches(max_chunksize=65536):
                    w.write_batch(b)
            ipc_write_s = time.perf_counter() - t0
            nbytes = src.nbytes

            def fw_open():
                return t.to_arrow()

            def ipc_open():
                return pa.ipc.open_file(pa.memory_map(ipc)).read_all()

            assert touch(fw_open()) == touch(ipc_open())
            for _ in range(2):  # page cache warm for both
                touch(fw_open())
                touch(ipc_open())
            fw_o, fw_o_med = best(fw_open, args.repeats)
            ipc_o, ipc_o_med = best(ipc_open, args.repeats)
            fw_t, fw_t_med = best(lambda: touch(fw_open()), args.repeats)
            ipc_t, ipc_t_med = best(lambda: touch(ipc_open()), args.repeats)
            row = {
                "bytes": nbytes,
                "open_flywheel_s": fw_o, "open_ipc_mmap_s": ipc_o, "open_ratio": ipc_o / fw_o,
                "touch_flywheel_GBps": nbytes / fw_t / 1e9, "touch_ipc_mmap_GBps": nbytes / ipc_t / 1e9,
                "touch_ratio": ipc_t / fw_t,
                "touch_flywheel_median_s": fw_t_med, "touch_ipc_median_s": ipc_t_med,
                "import_flywheel_s": import_s, "write_ipc_s": ipc_write_s,
                "import_ratio": ipc_write_s / import_s,
                "batches_flywheel": fw_open().column(0).num_chunks,
                "batches_ipc": ipc_open().column(0).num_chunks,
            }
            results["workloads"][name] = row
            print(f"{name:7s} {nbytes / 1e6:8.1f} MB | open: flywheel {fw_o * 1e3:7.2f} ms, mapped IPC "
                  f"{ipc_o * 1e3:7.2f} ms (x{row['open_ratio']:.2f}) | open+touch: flywheel "
                  f"{row['touch_flywheel_GBps']:.2f} GB/s, mapped IPC {row['touch_ipc_mmap_GBps']:.2f} GB/s "
                  f"(x{row['touch_ratio']:.2f} of the ceiling) | import {nbytes / import_s / 1e9:.2f} GB/s vs "
                  f"IPC write {nbytes / ipc_write_s / 1e9:.2f} GB/s")
        results["machine"]["loadavg_at_end"] = loadavg()
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=2)
            print("wrote", args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
