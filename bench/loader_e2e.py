#!/usr/bin/env python3
"""End-to-end loader benchmarks, each with its baseline from the same run.

Workloads (``--workloads``, default all):
  cifar   A CIFAR-shaped table (``--rows`` rows, default 1M, of uint8[32,32,3]
          + int64 label), shuffled, batch 256, 2 threads: samples/s and GB/s of
          flywheel.Loader (row shuffle and block shuffle; the second epoch of
          a loader, i.e. the steady state, and also the first) vs
          (a) torch.utils.data.DataLoader with 2 workers over the same data as a
              numpy memmap, RandomSampler, default collate (target >= 10x);
          (b) a raw sequential read() of the table's data files from the page
              cache (target >= 0.7 of its GB/s).
  packing Token packing (seq_len 2048) of variable-length int32 documents
          (lengths 1-4096, ``--packing-docs`` documents): tokens/s of
          flywheel.Loader + transforms.PackTokens (C++) vs the same loader with
          a vectorised numpy transform computing the same outputs (tokens,
          segment ids, positions, mask; checked equal); and the whole corpus in
          one call.
  resume  Time to load_state_dict at 50% of an epoch of ``--resume-rows`` rows
          (default 10M) and get the first batch, vs opening a fresh loader and
          getting its first batch.

The page cache is warmed before every timed pass (each reader reads the data
once first). Writes bench/results/loader.json.

    PYTHONPATH=build/python $(make -s python-path) bench/loader_e2e.py [--rows 1000000] [--tmp /tmp]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 256


def machine():
    def cmd(*a):
        try:
            return subprocess.run(a, capture_output=True, text=True, cwd=ROOT).stdout.strip()
        except OSError:
            return ""
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "platform": platform.platform(),
            "loadavg_at_start": open("/proc/loadavg").read().split()[:3],
            "git_commit": cmd("git", "rev-parse", "HEAD"), "git_dirty": bool(cmd("git", "status", "--porcelain"))}


def data_files(path):
    from flywheel.loader import _table_files
    return _table_files([path])


def make_cifar(dirpath, rows):
    """The same data as a flywheel table and as two .npy memmaps."""
    import flywheel
    tpath = os.path.join(dirpath, f"cifar_{rows}")
    img_path, lab_path = tpath + "_images.npy", tpath + "_labels.npy"
    if os.path.exists(tpath) and os.path.exists(lab_path) and flywheel.Table.open(tpath).num_rows == rows:
        return tpath, img_path, lab_path
    for p in (tpath,):
        subprocess.run(["rm", "-rf", p], check=True)
    print(f"making a {rows}-row CIFAR-shaped table at {tpath} ...", flush=True)
    rng = np.random.default_rng(0)
    t = flywheel.Table.create(tpath, {"image": "uint8[32,32,3]", "label": "int64"})
    imgs = np.lib.format.open_memmap(img_path, mode="w+", dtype=np.uint8, shape=(rows, 32, 32, 3))
    labs = np.lib.format.open_memmap(lab_path, mode="w+", dtype=np.int64, shape=(rows,))
    step = 65536
    for start in range(0, rows, step):
        n = min(step, rows - start)
        img = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        lab = rng.integers(0, 10, n).astype(np.int64)
        t.append({"image": img, "label": lab})
        imgs[start:start + n] = img
        labs[start:start + n] = lab
    imgs.flush()
    labs.flush()
    del imgs, labs
    return tpath, img_path, lab_path


def raw_read(files):
    """Sequential read() of every byte of `files` (the same read the loader's
    stats() uses for its ceiling); returns (bytes, seconds)."""
    from flywheel.loader import _read_files
    return _read_files(files)


def flywheel_epochs(tpath, shuffle_mode, threads=2, seed=0, epochs=2):
    """Epochs on one loader: the first pays the first touch of every mapped
    page (and each page's one-time checksum); later ones are the steady state
    of a training run. Returns one figure per epoch."""
    import flywheel
    loader = flywheel.Loader(tpath, batch_size=BATCH, seed=seed, num_threads=threads, shuffle_mode=shuffle_mode)
    out = []
    for _ in range(epochs):
        rows = nbytes = 0
        t0 = time.perf_counter()
        for b in loader:
            rows += len(b["label"])
            nbytes += b["image"].nbytes + b["label"].nbytes
        dt = time.perf_counter() - t0
        out.append({"rows": rows, "seconds": dt, "samples_per_s": rows / dt, "gb_per_s": nbytes / dt / 1e9})
    out[-1]["stats"] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in loader.stats().items()}
    return out


class MemmapDataset:
    def __init__(self, img_path, lab_path):
        self.img_path, self.lab_path = img_path, lab_path
        self.imgs = self.labs = None
        self.n = np.load(lab_path, mmap_mode="r").shape[0]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.imgs is None:  # open in the worker
            self.imgs = np.load(self.img_path, mmap_mode="r")
            self.labs = np.load(self.lab_path, mmap_mode="r")
        return np.asarray(self.imgs[i]), int(self.labs[i])


def torch_dataloader(img_path, lab_path, max_batches):
    import torch
    torch.set_num_threads(1)
    ds = MemmapDataset(img_path, lab_path)
    dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=2,
                                     generator=torch.Generator().manual_seed(0), persistent_workers=False)
    it = iter(dl)
    next(it)  # workers started and warm
    rows = nbytes = 0
    t0 = time.perf_counter()
    for i, (img, lab) in enumerate(it):
        rows += len(lab)
        nbytes += img.numel() + lab.numel() * 8
        if i + 1 >= max_batches:
            break
    dt = time.perf_counter() - t0
    del it
    return {"rows": rows, "seconds": dt, "samples_per_s": rows / dt, "gb_per_s": nbytes / dt / 1e9}


def bench_cifar(a, results):
    tpath, img_path, lab_path = make_cifar(a.tmp, a.rows)
    files = data_files(tpath)
    row_bytes = 32 * 32 * 3 + 8
    raw_read(files)  # warm the page cache
    raw_read([img_path, lab_path])
    reads = [raw_read(files) for _ in range(a.repeats)]
    nbytes, best = reads[0][0], min(r[1] for r in reads)
    raw = {"bytes": nbytes, "seconds": best, "gb_per_s": nbytes / best / 1e9}
    print(f"raw sequential read() of the table's files: {nbytes / 1e9:.2f} GB in {best:.3f} s = "
          f"{raw['gb_per_s']:.2f} GB/s", flush=True)
    out = {"rows": a.rows, "row_bytes": row_bytes, "raw_read": raw}
    for mode in ("row", "block"):
        runs = [flywheel_epochs(tpath, mode) for _ in range(a.repeats)]
        first = max((r[0] for r in runs), key=lambda x: x["samples_per_s"])
        r = max((r[-1] for r in runs), key=lambda x: x["samples_per_s"])
        out[f"flywheel_{mode}_shuffle"] = r
        out[f"flywheel_{mode}_shuffle_first_epoch"] = first
        print(f"flywheel.Loader, {mode} shuffle, batch {BATCH}, 2 threads: steady-state epoch "
              f"{r['samples_per_s'] / 1e6:.3f} M samples/s, {r['gb_per_s']:.2f} GB/s "
              f"(ratio to raw read {r['gb_per_s'] / raw['gb_per_s']:.2f}); first epoch of a new loader "
              f"{first['samples_per_s'] / 1e6:.3f} M/s; stats {r['stats']}", flush=True)
    tb = max((torch_dataloader(img_path, lab_path, a.torch_batches) for _ in range(a.repeats)),
             key=lambda x: x["samples_per_s"])
    out["torch_dataloader_memmap"] = tb
    print(f"torch DataLoader, 2 workers, memmap, RandomSampler: {tb['samples_per_s'] / 1e3:.1f} K samples/s, "
          f"{tb['gb_per_s']:.3f} GB/s ({a.torch_batches} batches)", flush=True)
    best_fw = out["flywheel_row_shuffle"]
    out["ratios"] = {
        "row_shuffle_vs_torch_dataloader": round(best_fw["samples_per_s"] / tb["samples_per_s"], 2),
        "block_shuffle_vs_torch_dataloader": round(out["flywheel_block_shuffle"]["samples_per_s"]
                                                   / tb["samples_per_s"], 2),
        "row_shuffle_vs_raw_read": round(best_fw["gb_per_s"] / raw["gb_per_s"], 3),
        "block_shuffle_vs_raw_read": round(out["flywheel_block_shuffle"]["gb_per_s"] / raw["gb_per_s"], 3),
    }
    print(f"ratios: {out['ratios']} (targets: >= 10x the DataLoader, >= 0.7 of raw read)", flush=True)
    results["cifar"] = out


def bench_resume(a, results):
    import flywheel
    path = os.path.join(a.tmp, f"resume_{a.resume_rows}")
    if not (os.path.exists(path) and flywheel.Table.open(path).num_rows == a.resume_rows):
        subprocess.run(["rm", "-rf", path], check=True)
        print(f"making a {a.resume_rows}-row int64 table at {path} ...", flush=True)
        t = flywheel.Table.create(path, {"x": "int64"})
        step = 1 << 21
        for s in range(0, a.resume_rows, step):
            t.append({"x": np.arange(s, min(a.resume_rows, s + step), dtype=np.int64)})
    raw_read(data_files(path))
    fresh, resumed = [], []
    half = a.resume_rows // 2
    for _ in range(a.repeats * 2):
        t0 = time.perf_counter()
        l = flywheel.Loader(path, batch_size=BATCH, seed=1)
        first = l.next()
        fresh.append(time.perf_counter() - t0)
        state = dict(l.state_dict(), consumed=half)
        del l
        t0 = time.perf_counter()
        l = flywheel.Loader(path, batch_size=BATCH, seed=1)
        l.load_state_dict(state)
        b = l.next()
        resumed.append(time.perf_counter() - t0)
        assert len(b["x"]) == BATCH and first is not None
        del l
    out = {"rows": a.resume_rows, "position": half, "fresh_first_batch_s": min(fresh),
           "resume_first_batch_s": min(resumed), "ratio": round(min(resumed) / min(fresh), 3)}
    print(f"resume at 50% of {a.resume_rows} rows: open + load_state_dict + first batch "
          f"{out['resume_first_batch_s'] * 1e3:.2f} ms vs a fresh loader's first batch "
          f"{out['fresh_first_batch_s'] * 1e3:.2f} ms", flush=True)
    results["resume"] = out


def numpy_pack(offsets, values, seq_len):
    """The same blocks as pack_tokens (split documents, no EOS), in numpy."""
    n = len(values)
    k = -(-n // seq_len)
    tokens = np.zeros(k * seq_len, np.int32)
    tokens[:n] = values
    doc = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    pos_in_stream = np.arange(n)
    block = pos_in_stream // seq_len
    # a new segment starts at every document start and every block start
    start = np.ones(n, bool)
    start[1:] = (doc[1:] != doc[:-1]) | (block[1:] != block[:-1])
    seg_global = np.cumsum(start)
    first_seg_of_block = seg_global[np.searchsorted(block, np.arange(k))]
    seg = np.zeros(k * seq_len, np.int32)
    seg[:n] = seg_global - first_seg_of_block[block] + 1
    start_idx = np.maximum.accumulate(np.where(start, pos_in_stream, 0))
    pos = np.zeros(k * seq_len, np.int32)
    pos[:n] = pos_in_stream - start_idx
    mask = np.zeros(k * seq_len, np.uint8)
    mask[:n] = 1
    return {"tokens": tokens.reshape(k, seq_len), "segment_ids": seg.reshape(k, seq_len),
            "positions": pos.reshape(k, seq_len), "mask": mask.reshape(k, seq_len)}


def bench_packing(a, results):
    import flywheel
    from flywheel.transforms import PackTokens, pack_tokens
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 4097, a.packing_docs)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    values = rng.integers(0, 50000, int(offsets[-1])).astype(np.int32)
    seq = 2048
    ref = numpy_pack(offsets, values, seq)
    ours = pack_tokens(offsets, values, seq)
    for k in ("tokens", "segment_ids", "positions", "mask"):
        assert np.array_equal(ref[k], ours[k]), k  # the baseline computes the same thing
    ntok = int(offsets[-1])

    def best(fn):
        ts = []
        for _ in range(max(2, a.repeats)):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return min(ts)
    t_np = best(lambda: numpy_pack(offsets, values, seq))
    t_fw = best(lambda: pack_tokens(offsets, values, seq))
    path = os.path.join(a.tmp, f"docs_{a.packing_docs}")
    if not (os.path.exists(path) and flywheel.Table.open(path).num_rows == a.packing_docs):
        subprocess.run(["rm", "-rf", path], check=True)
        t = flywheel.Table.create(path, {"tokens": "list<int32>"})
        t.append({"tokens": flywheel.ListArray(offsets, values)})

    def numpy_transform(b):
        offs, vals = b["tokens"]
        return numpy_pack(offs, vals, seq)

    def loader_pass(transform):
        loader = flywheel.Loader(path, batch_size=256, seed=0, transforms=[transform])
        t0 = time.perf_counter()
        got = sum(int(b["mask"].sum()) for b in loader)
        assert got == ntok, (got, ntok)
        return time.perf_counter() - t0
    loader_pass(PackTokens("tokens", seq))  # warm
    t_loader = min(loader_pass(PackTokens("tokens", seq)) for _ in range(max(2, a.repeats)))
    t_loader_np = min(loader_pass(numpy_transform) for _ in range(max(2, a.repeats)))
    out = {"documents": a.packing_docs, "tokens": ntok, "seq_len": seq,
           "loader_packtokens_tokens_per_s": ntok / t_loader, "loader_numpy_tokens_per_s": ntok / t_loader_np,
           "ratio_loader_packtokens_vs_numpy": round(t_loader_np / t_loader, 2),
           "whole_corpus_pack_tokens_tokens_per_s": ntok / t_fw, "whole_corpus_numpy_tokens_per_s": ntok / t_np}
    print(f"packing {ntok / 1e6:.1f} M tokens into {seq}-token blocks, Loader batch 256 (shuffled): "
          f"PackTokens (C++) {ntok / t_loader / 1e6:.0f} M tokens/s vs the same loader with a numpy packing "
          f"transform {ntok / t_loader_np / 1e6:.0f} M tokens/s (ratio {out['ratio_loader_packtokens_vs_numpy']}); "
          f"whole corpus in one call: pack_tokens {ntok / t_fw / 1e6:.0f} vs numpy {ntok / t_np / 1e6:.0f} M tokens/s",
          flush=True)
    results["packing"] = out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--resume-rows", type=int, default=10_000_000)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--torch-batches", type=int, default=300, help="batches the torch DataLoader is timed on")
    p.add_argument("--tmp", default="/tmp/flywheel-loader-bench")
    p.add_argument("--packing-docs", type=int, default=20000)
    p.add_argument("--workloads", nargs="+", default=["cifar", "packing", "resume"])
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "loader.json"))
    a = p.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    results = {"machine": machine(), "batch_size": BATCH}
    print(f"== loader_e2e: {os.cpu_count()} CPUs, load {results['machine']['loadavg_at_start']}", flush=True)
    for w in a.workloads:
        {"cifar": bench_cifar, "packing": bench_packing, "resume": bench_resume}[w](a, results)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    sys.exit(main())
