#!/usr/bin/env python3
"""End-to-end loader benchmarks, each with its baseline from the same run.

Workloads (``--workloads``, default all):
  cifar   A CIFAR-shaped table (``--rows`` rows, default 1M, of uint8[32,32,3]
          + int64 label), shuffled, batch 256, 2 threads: samples/s and GB/s of
          flywheel.Loader (row shuffle and block shuffle) vs
          (a) torch.utils.data.DataLoader with 2 workers over the same data as a
              numpy memmap, RandomSampler, default collate (target >= 10x);
          (b) a raw sequential read() of the table's data files from the page
              cache (target >= 0.7 of its GB/s).
  resume  Time to load_state_dict at 50% of an epoch of ``--resume-rows`` rows
          (default 10M) and get the first batch, vs opening a fresh loader and
          getting its first batch.

The page cache is warmed before every timed pass (each reader reads the data
once first). Writes bench/results/loader.json.

    PYTHONPATH=build/python /usr/bin/python3 bench/loader_e2e.py [--rows 1000000] [--tmp /tmp]
"""

import argparse
import glob
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
    return sorted(f for f in glob.glob(os.path.join(path, "**", "*"), recursive=True)
                  if os.path.isfile(f) and "/_" not in f[len(path):])


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


def raw_read(files, block=1 << 20):
    """Sequential read() of every byte of `files`; returns (bytes, seconds)."""
    total, t0 = 0, time.perf_counter()
    buf = bytearray(block)
    mv = memoryview(buf)
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            while True:
                n = os.readv(fd, [mv])
                if n <= 0:
                    break
                total += n
        finally:
            os.close(fd)
    return total, time.perf_counter() - t0


def flywheel_epoch(tpath, shuffle_mode, max_batches=None, threads=2, seed=0):
    import flywheel
    loader = flywheel.Loader(tpath, batch_size=BATCH, seed=seed, num_threads=threads, shuffle_mode=shuffle_mode)
    rows = nbytes = 0
    t0 = time.perf_counter()
    for i, b in enumerate(loader):
        rows += len(b["label"])
        nbytes += b["image"].nbytes + b["label"].nbytes
        if max_batches and i + 1 >= max_batches:
            break
    dt = time.perf_counter() - t0
    return {"rows": rows, "seconds": dt, "samples_per_s": rows / dt, "gb_per_s": nbytes / dt / 1e9,
            "stats": {k: (round(v, 4) if isinstance(v, float) else v) for k, v in loader.stats().items()}}


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
        runs = [flywheel_epoch(tpath, mode) for _ in range(a.repeats)]
        r = max(runs, key=lambda x: x["samples_per_s"])
        out[f"flywheel_{mode}_shuffle"] = r
        print(f"flywheel.Loader, {mode} shuffle, batch {BATCH}, 2 threads, one epoch: "
              f"{r['samples_per_s'] / 1e6:.3f} M samples/s, {r['gb_per_s']:.2f} GB/s "
              f"(ratio to raw read {r['gb_per_s'] / raw['gb_per_s']:.2f}); stats {r['stats']}", flush=True)
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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--resume-rows", type=int, default=10_000_000)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--torch-batches", type=int, default=300, help="batches the torch DataLoader is timed on")
    p.add_argument("--tmp", default="/tmp/flywheel-loader-bench")
    p.add_argument("--workloads", nargs="+", default=["cifar", "resume"])
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "loader.json"))
    a = p.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    results = {"machine": machine(), "batch_size": BATCH}
    print(f"== loader_e2e: {os.cpu_count()} CPUs, load {results['machine']['loadavg_at_start']}", flush=True)
    for w in a.workloads:
        {"cifar": bench_cifar, "resume": bench_resume}[w](a, results)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    sys.exit(main())
