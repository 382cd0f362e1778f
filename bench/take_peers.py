#!/usr/bin/env python3
"""Random-access take against the Arrow-world peers, on the same data in the same run.

Workload: a table of ``--rows`` rows (default 1M) with

    id    int64          = row number (checked against the indices asked for)
    emb   float32[64]    standard normal
    text  string         50-200 random lowercase letters and spaces

written once into each reader's format, then a take of 1, 256 and 4096 rows
at random indices (uniform over the table, distinct within a call, fresh for
every call; drawn before the clock starts) of either the fixed-width columns
(id, emb) or the string column (text), through each reader's own take API,
its result left in the reader's native form:

  flywheel   flywheel.Table.create + one append (one fragment, uncompressed,
             256 KiB pages: the defaults); Table.take(indices, columns=...)
             -> numpy arrays, list of str for the text.
  lance      lance.write_dataset(arrow table) (pylance defaults: its default
             file format version, 1M-row files, 1024-row groups);
             LanceDataset.take(indices, columns=...) -> pyarrow.Table.
  parquet    pyarrow.parquet.write_table(row_group_size=--parquet-row-group,
             default 16384, uncompressed like flywheel's default, dictionary
             on as pyarrow's default); kept open as a memory-mapped
             pq.ParquetFile: the call reads the row groups the indices fall
             in (read_row_groups) and takes the rows from them. Parquet has
             no row-level random access in pyarrow, so this is how a Parquet
             reader takes rows; smaller row groups favour small takes.
  arrow_ipc  an Arrow IPC file (uncompressed, one record batch: pyarrow's take
             on a table of several chunks concatenates the chunks first, which
             made 65536-row batches 100-1000x slower at 1 and 256 rows; set
             --ipc-batch-rows to see that), pa.ipc.open_file(pa.memory_map(
             path)).read_all() once (zero copy), then
             Table.select(columns).take(indices) per call -> pyarrow.Table.

Every handle is opened once and kept (as a loader keeps it); every file is
read once before timing, so all readers see a warm page cache. Each (column
kind, take size) cell runs ``--repeats`` rounds; within a round each reader
runs calls for about ``--seconds`` (at least 3 calls), readers alternating so
a burst of load on the machine hits them all. Figures: rows/s and calls/s of
the best round (the least time per call) and of the median round; ratios
flywheel / lance and flywheel / best peer (best rounds). The issue's target:
flywheel at least Lance's rate at every size.

Writes bench/results/take_peers.json (machine description, flags, every
figure with all samples).

    PYTHONPATH=build/python $(make -s python-path) bench/take_peers.py [--rows N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = (1, 256, 4096)
KINDS = {"fixed": ["id", "emb"], "string": ["text"]}
FORMS = {"native": "each reader's own result (flywheel: numpy arrays and a list of str; the others: a pyarrow.Table)",
         "flywheel": "every reader's result converted to numpy arrays and a list of str (flywheel's form)"}
EMB_DIM = 64


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine():
    """The machine description every results file carries."""
    def cmd(*a):
        try:
            return subprocess.run(a, capture_output=True, text=True, cwd=ROOT).stdout.strip()
        except OSError:
            return ""
    def proc_field(path, key):
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
        return ""
    cpu = proc_field("/proc/cpuinfo", "model name")
    mem = proc_field("/proc/meminfo", "MemTotal")
    return {"nproc": os.cpu_count(), "cpu_model": cpu, "memory": mem, "platform": platform.platform(),
            "python": platform.python_version(), "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "git_commit": cmd("git", "rev-parse", "HEAD"), "git_dirty": bool(cmd("git", "status", "--porcelain")),
            "loadavg_at_start": loadavg()}


def versions(*mods):
    from importlib import metadata
    out = {}
    for m in mods:
        try:
            mod = __import__(m)
            out[m] = getattr(mod, "__version__", None) or metadata.version(m.replace("_", "-"))
        except Exception as e:  # a missing peer is reported, not fatal here
            out[m] = f"unavailable: {e}"
    return out


def make_text(rng, n, min_len=50, max_len=200):
    """n strings of min_len..max_len letters and spaces, as (offsets int64[n+1], bytes uint8)."""
    lengths = rng.integers(min_len, max_len + 1, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", np.uint8)
    data = alphabet[rng.integers(0, len(alphabet), int(offsets[-1]), dtype=np.uint8)]
    return offsets, data


def arrow_table(ids, emb, text_offsets, text_bytes):
    """The data as one pyarrow.Table (emb as fixed_size_list<float32, 64>)."""
    import pyarrow as pa
    n = len(ids)
    emb_arr = pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), emb.shape[1])
    text = pa.StringArray.from_buffers(n, pa.py_buffer(text_offsets.astype(np.int32)), pa.py_buffer(text_bytes))
    return pa.table({"id": pa.array(ids), "emb": emb_arr, "text": text})


def read_all(paths):
    """Reads every file under ``paths`` once (warms the page cache); returns bytes."""
    total = 0
    buf = bytearray(1 << 20)
    for p in paths:
        files = [p] if os.path.isfile(p) else [os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs]
        for fn in files:
            with open(fn, "rb", buffering=0) as f:
                while True:
                    k = f.readinto(buf)
                    if not k:
                        break
                    total += k
    return total


def du(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


# ----------------------------------------------------------------- the peers

def open_flywheel(path, tbl_data):
    import flywheel
    ids, emb, text_list = tbl_data
    t = flywheel.Table.create(path, {"id": "int64", "emb": f"float32[{EMB_DIM}]", "text": "string"})
    t.append({"id": ids, "emb": emb, "text": text_list})
    t = flywheel.Table.open(path)
    return lambda idx, cols: t.take(idx, columns=cols), {"fragments": t.versions()[-1]["num_fragments"],
                                                           **t.config}


def open_lance(path, table):
    import lance
    lance.write_dataset(table, path)
    ds = lance.dataset(path)
    info = {}
    for attr in ("data_storage_version",):
        try:
            info[attr] = str(getattr(ds, attr))
        except Exception:
            pass
    try:
        info["fragments"] = len(ds.get_fragments())
    except Exception:
        pass
    return lambda idx, cols: ds.take(idx, columns=cols), info


def open_parquet(path, table, row_group):
    import pyarrow.parquet as pq
    pq.write_table(table, path, row_group_size=row_group, compression="none")
    pf = pq.ParquetFile(path, memory_map=True)
    md = pf.metadata
    rg_rows = np.array([md.row_group(i).num_rows for i in range(md.num_row_groups)], np.int64)
    rg_start = np.concatenate([[0], np.cumsum(rg_rows)])

    def take(idx, cols):
        rg = np.searchsorted(rg_start, idx, side="right") - 1
        groups = np.unique(rg)
        part = pf.read_row_groups(groups.tolist(), columns=cols)
        # row offset of each chosen group inside `part`
        base = np.zeros(md.num_row_groups, np.int64)
        base[groups] = np.concatenate([[0], np.cumsum(rg_rows[groups])[:-1]])
        return part.take(base[rg] + (idx - rg_start[rg]))
    return take, {"row_group_rows": int(rg_rows[0]), "row_groups": int(md.num_row_groups), "compression": "none"}


def open_arrow_ipc(path, table, batch_rows):
    import pyarrow as pa
    batch_rows = batch_rows or table.num_rows
    with pa.OSFile(path, "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table.combine_chunks(), max_chunksize=batch_rows)
    t = pa.ipc.open_file(pa.memory_map(path)).read_all()
    return lambda idx, cols: t.select(cols).take(idx), {"record_batch_rows": batch_rows,
                                                         "record_batches": t.column(0).num_chunks,
                                                         "compression": "none"}


def column_values(res, name):
    """A result's column as numpy (fixed) or a list of str, whatever the reader."""
    col = res[name]
    if isinstance(col, (np.ndarray, list)):
        return col
    return col.to_pylist() if name == "text" else col.to_numpy()


# --------------------------------------------------------------- measurement

def run_calls(take, cols, idx_pool, seconds):
    """Calls take on successive index arrays of the pool for about ``seconds``
    (at least 3 calls, at most the pool); returns (calls, elapsed)."""
    calls = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    for idx in idx_pool:
        take(idx, cols)
        calls += 1
        if calls >= 3 and time.perf_counter() >= deadline:
            break
    return calls, time.perf_counter() - t0


def measure(a, rng, n, takes, live, cols, size):
    """One (column kind, take size) cell: --repeats rounds of every reader,
    alternating; returns figures, samples and ratios."""
    cap = max(8, int(a.seconds * {1: 40000, 256: 4000, 4096: 400}[size]))
    samples = {name: [] for name in live}
    for r in range(a.repeats + 1):  # round 0 warms up and is not kept
        for name in live:
            pool = [rng.choice(n, size, replace=False) for _ in range(cap)]
            calls, dt = run_calls(takes[name], cols, pool, a.seconds if r else min(a.seconds, 0.05))
            if r:
                samples[name].append(dt / calls)
    cell = {}
    for name in live:
        ts = samples[name]
        best, med = min(ts), statistics.median(ts)
        cell[name] = {"rows_per_s_best": size / best, "rows_per_s_median": size / med,
                      "calls_per_s_best": 1 / best, "calls_per_s_median": 1 / med,
                      "seconds_per_call_samples": ts}
    fw = cell["flywheel"]["rows_per_s_best"]
    others = [x for x in live if x != "flywheel"]
    ratios = {f"flywheel/{x}": fw / cell[x]["rows_per_s_best"] for x in others}
    if others:
        bp = max(others, key=lambda x: cell[x]["rows_per_s_best"])
        ratios["best_peer"] = bp
        ratios["flywheel/best_peer"] = fw / cell[bp]["rows_per_s_best"]
    return {"columns": cols, "take_rows": size, "peers": cell, "ratios": ratios}


def as_flywheel_form(take):
    """``take`` with its result converted to what flywheel's take returns:
    numpy arrays ((n,) and (n, 64)) and a list of str."""
    def conv(idx, cols):
        res = take(idx, cols)
        if isinstance(res, Mapping):  # flywheel's batch: already numpy + list of str
            return res
        out = {}
        for c in cols:
            col = res[c]
            if c == "text":
                out[c] = col.to_pylist()
            elif c == "emb":
                out[c] = col.combine_chunks().flatten().to_numpy().reshape(-1, EMB_DIM)
            else:
                out[c] = col.to_numpy()
        return out
    return conv


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of the table (default 1M)")
    p.add_argument("--repeats", type=int, default=5, help="rounds per (kind, size) cell (default 5)")
    p.add_argument("--seconds", type=float, default=0.25, help="time per reader per round (default 0.25)")
    p.add_argument("--parquet-row-group", type=int, default=16384, help="Parquet row group rows (default 16384)")
    p.add_argument("--ipc-batch-rows", type=int, default=0,
                   help="Arrow IPC record batch rows (default 0: the whole table in one batch)")
    p.add_argument("--peers", default="flywheel,lance,parquet,arrow_ipc", help="comma-separated readers to run")
    p.add_argument("--forms", default="native,flywheel",
                   help="result forms to time: native (each reader's own result: numpy + list of str for "
                        "flywheel, pyarrow.Table for the others) and/or flywheel (every result converted to "
                        "numpy arrays + a list of str, what flywheel returns); default both")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tmp", default="/tmp", help="parent of the scratch directory (deleted at exit)")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "take_peers.json"))
    p.add_argument("--quick", action="store_true", help="smoke test: 20K rows, 2 rounds of 0.02 s")
    a = p.parse_args()
    if a.quick:
        a.rows, a.repeats, a.seconds = min(a.rows, 20_000), 2, 0.02
        if a.out == p.get_default("out"):
            a.out = os.path.join(a.tmp, "take_peers.quick.json")
    peers = [x for x in a.peers.split(",") if x]
    forms = [x for x in a.forms.split(",") if x]
    if not forms or any(f not in FORMS for f in forms):
        p.error(f"--forms: choose from {','.join(FORMS)}")
    if "flywheel" not in peers:
        p.error("--peers must include flywheel (the ratios are flywheel's)")
    if a.rows < max(SIZES):
        p.error(f"--rows must be at least {max(SIZES)}")

    import pyarrow as pa  # noqa: F401  (fail early)
    mach = machine()
    print(f"== take_peers: {a.rows} rows, {mach['nproc']} CPUs ({mach['cpu_model']}), "
          f"load {mach['loadavg_at_start']}", flush=True)
    scratch = tempfile.mkdtemp(prefix="flywheel-take-peers-", dir=a.tmp)
    try:
        results = run(a, peers, forms, scratch, mach)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["machine"]["loadavg_at_end"] = loadavg()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {a.out}")


def run(a, peers, forms, scratch, mach):
    rng = np.random.default_rng(a.seed)
    n = a.rows
    t0 = time.perf_counter()
    ids = np.arange(n, dtype=np.int64)
    emb = rng.standard_normal((n, EMB_DIM), dtype=np.float32)
    toff, tbytes = make_text(rng, n)
    table = arrow_table(ids, emb, toff, tbytes)
    text_list = table.column("text").to_pylist()
    print(f"data: {n} rows, {table.nbytes / 1e6:.1f} MB as Arrow (emb {emb.nbytes / 1e6:.0f} MB, text "
          f"{len(tbytes) / 1e6:.0f} MB), made in {time.perf_counter() - t0:.1f} s", flush=True)

    takes, info, paths = {}, {}, {}
    for name in peers:
        t0 = time.perf_counter()
        path = os.path.join(scratch, name)
        try:
            if name == "flywheel":
                takes[name], info[name] = open_flywheel(path, (ids, emb, text_list))
            elif name == "lance":
                takes[name], info[name] = open_lance(path, table)
            elif name == "parquet":
                path += ".parquet"
                takes[name], info[name] = open_parquet(path, table, a.parquet_row_group)
            elif name == "arrow_ipc":
                path += ".arrow"
                takes[name], info[name] = open_arrow_ipc(path, table, a.ipc_batch_rows)
            else:
                raise SystemExit(f"unknown peer {name!r}")
        except ImportError as e:
            if name == "flywheel":
                raise
            print(f"{name}: skipped ({e})", flush=True)
            info[name] = {"skipped": str(e)}
            continue
        paths[name] = path
        info[name]["bytes_on_disk"] = du(path)
        info[name]["write_seconds"] = round(time.perf_counter() - t0, 3)
        print(f"{name}: wrote {info[name]['bytes_on_disk'] / 1e6:.1f} MB in {info[name]['write_seconds']:.1f} s "
              f"{ {k: v for k, v in info[name].items() if k not in ('bytes_on_disk', 'write_seconds')} }",
              flush=True)
    del text_list
    live = [x for x in peers if x in takes]
    for name in live:
        read_all([paths[name]])

    # Every reader answers the same questions right: ids are the row numbers.
    check = rng.choice(n, 64, replace=False)
    want_text = table.column("text").take(check).to_pylist()
    for name in live:
        got = takes[name](check, ["id", "emb", "text"])
        assert np.array_equal(np.asarray(column_values(got, "id")), check), name
        e = np.asarray(column_values(got, "emb"))
        e = np.stack(e) if e.dtype == object else e
        assert np.array_equal(e.reshape(-1, EMB_DIM), emb[check]), name
        assert column_values(got, "text") == want_text, name
    del table

    cells = {}
    for form in forms:
        fn = takes if form == "native" else {x: as_flywheel_form(f) for x, f in takes.items()}
        for kind, cols in KINDS.items():
            for size in SIZES:
                cells[f"{form}/{kind}/{size}"] = measure(a, rng, n, fn, live, cols, size)
                c = cells[f"{form}/{kind}/{size}"]["peers"]
                line = "  ".join(f"{x} {c[x]['rows_per_s_best']:.3g}" for x in live)
                print(f"take {form:7s} {kind:6s} {size:5d} rows: rows/s (best) {line}", flush=True)

    targets = {}
    for form in forms:
        sub = {k: c for k, c in cells.items() if k.startswith(form + "/")}
        print(f"\nresults as {FORMS[form]}:")
        report(sub, live)
        if "lance" in live:
            met = {k: c["ratios"]["flywheel/lance"] >= 1.0 for k, c in sub.items()}
            targets[f"{form}: flywheel_at_least_lance_every_size"] = all(met.values())
            print(f"target (flywheel >= Lance at every size), {form}: {'met' if all(met.values()) else 'NOT met'}"
                  + ("" if all(met.values()) else f" (missed: {', '.join(k for k, v in met.items() if not v)})"))
    return {"benchmark": "take_peers", "machine": mach,
            "versions": versions("flywheel", "lance", "pyarrow", "numpy"),
            "flags": {k: v for k, v in vars(a).items()},
            "data": {"rows": n, "columns": {"id": "int64", "emb": f"float32[{EMB_DIM}]",
                                            "text": "string, 50-200 bytes"},
                     "text_bytes": int(len(tbytes))},
            "peers": info, "method": "best and median of --repeats rounds; a round is calls for ~--seconds; "
                                      "fresh random distinct indices per call, drawn before timing; warm page cache",
            "forms": {f: FORMS[f] for f in forms}, "cells": cells, "targets": targets}


def report(cells, live):
    others = [x for x in live if x != "flywheel"]
    head = ["kind", "rows/call"] + [f"{x} rows/s" for x in live] + [f"{x} calls/s" for x in live]
    head += (["fw/lance"] if "lance" in live else []) + (["fw/best peer"] if others else [])
    rows = []
    for key, c in cells.items():
        kind, size = key.split("/")[-2:]
        pc = c["peers"]
        row = [kind, size] + [f"{pc[x]['rows_per_s_best']:.3g} (med {pc[x]['rows_per_s_median']:.3g})" for x in live]
        row += [f"{pc[x]['calls_per_s_best']:.3g}" for x in live]
        if "lance" in live:
            row.append(f"{c['ratios']['flywheel/lance']:.2f}")
        if others:
            row.append(f"{c['ratios']['flywheel/best_peer']:.2f} ({c['ratios']['best_peer']})")
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print()
    print(" | ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(v.ljust(w) for v, w in zip(r, widths)))
    print()


if __name__ == "__main__":
    sys.exit(main())
