#!/usr/bin/env python3
"""End-to-end JPEG pipeline benchmark: flywheel.Loader + DecodeImage vs PIL + torch DataLoader.

Workloads (issue 5, "Benchmarks"; target: flywheel with 2 threads >= 3x the
faster PIL variant with 2 DataLoader workers):

  corpus     ``--images`` synthetic JPEGs (default 20000), 224-288 px per side,
             quality 90, 4:2:0 chroma, ~32 KB each (PIL/libjpeg-turbo, the
             generator of bench/jpeg_pil_baseline.py: gradients + a rectangle +
             per-pixel noise, so they compress like photos), labels 0-999.
             Stored once under ``--tmp`` as (a) a flywheel table
             {"jpeg": binary, "label": int64} and (b) the same bytes as one
             blob file + an offsets .npy (what the PIL Dataset reads through a
             memmap), both read from the page cache.
  flywheel   flywheel.Loader(batch_size=256, shuffle, num_threads=T) with
             transforms.DecodeImage("jpeg", 64, 64) (random-resized-crop,
             scale 0.08-1, ratio 3/4-4/3, torchvision semantics; flip p=0.5;
             uint8 HWC; libjpeg-turbo scaled decode), T in ``--threads``
             (default 1, 2). Images/s over whole epochs of one loader in a
             fresh process: the third epoch (steady state, every later epoch
             of a training run; headline), the first (thread start-up, first
             touch of the mapped table, every image seen once) and the second
             (each image's entropy index built while it is decoded;
             docs/transforms.md, "Entropy index"). loader.stats() reported.
  pil        torch.utils.data.DataLoader(batch_size=256, shuffle=True,
             num_workers=W, default collate), W in ``--workers`` (default 0,
             1, 2), over a Dataset whose __getitem__ reads the JPEG bytes of
             row i, decodes with PIL (full size), applies RandomResizedCrop(64,
             scale=(0.08, 1), ratio=(3/4, 4/3)) sampled exactly like
             torchvision's get_params + bilinear resize of the crop box +
             RandomHorizontalFlip (ImageOps.mirror), returns uint8 HWC + label.
  pil_draft  The same with img.draft("RGB", ...) first: PIL's own scaled JPEG
             decode (1/2, 1/4, 1/8) at the largest reduction that still leaves
             the crop >= 64 px, i.e. what a performance-aware PIL user does and
             the same rule as DecodeImage's scaled_decode.
             PIL runs: persistent workers warmed on the first batches of an
             epoch, then a whole epoch (or ``--batches``) timed from iter().

Ratios: flywheel 2 threads / best PIL variant with 2 workers (headline) and
flywheel 1 thread / best PIL variant in a single process (0 workers). A
sanity check compares DecodeImage(crop="full", flip=0) with PIL's bilinear
resize of the whole image on the first rows (mean |difference|): without
scaled decode against a full PIL decode, with it against PIL's draft.
The CPUs other processes keep busy are measured (/proc/stat) at the start and
before each configuration and recorded with the figures (a warning is printed
when the machine is not idle: on a small machine a concurrent build halves
either side). Writes bench/results/jpeg.json with the machine description.

    PYTHONPATH=build/python $(make -s python-path) bench/jpeg_e2e.py [--images 20000] [--repeats 2]
    PYTHONPATH=build/python $(make -s python-path) bench/jpeg_e2e.py --only baseline --images 2000 --out /tmp/j.json
"""

import argparse
import io
import json
import multiprocessing
import os
import platform
import random
import subprocess
import sys
import time

import warnings

import numpy as np
from PIL import Image, ImageOps

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import jpeg_pil_baseline  # noqa: E402  (the corpus generator and torchvision's get_params)

BATCH = 256
# PIL's np.asarray views are read-only; default collate copies them into the batch anyway.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
SIZE = 64
CHUNK = 2000
CORPUS_VERSION = 1  # bump when the generator changes: invalidates the cache


def machine():
    from loader_e2e import machine as base  # bench/ is on sys.path when this script runs
    return dict(base(), python=platform.python_version(), pil_version=Image.__version__)


def loadavg():
    return open("/proc/loadavg").read().split()[:3]


def busy_cpus(seconds=1.0):
    """CPUs' worth of work other processes do right now (from /proc/stat,
    over `seconds` while this process sleeps)."""
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = read()
    time.sleep(seconds)
    t1, i1 = read()
    return round(os.cpu_count() * (1 - (i1 - i0) / max(1, t1 - t0)), 2)


# ------------------------------------------------------------------ corpus
def _encode(i):
    w, h = jpeg_pil_baseline.synthetic_size(i)
    buf = io.BytesIO()
    Image.fromarray(jpeg_pil_baseline.synthetic_image(i, w, h), "RGB").save(
        buf, "JPEG", quality=90, subsampling=2)
    return buf.getvalue()


def make_corpus(tmp, n, need_table):
    """Blob + offsets + labels (always) and the flywheel table (if need_table),
    cached in tmp/jpeg_<n>. Returns a dict of paths."""
    d = os.path.join(tmp, f"jpeg_{n}")
    p = {"dir": d, "blob": os.path.join(d, "jpeg.bin"), "offsets": os.path.join(d, "offsets.npy"),
         "labels": os.path.join(d, "labels.npy"), "table": os.path.join(d, "table"),
         "meta": os.path.join(d, "meta.json")}
    meta = None
    if os.path.exists(p["meta"]):
        with open(p["meta"]) as f:
            meta = json.load(f)
        if meta.get("version") != CORPUS_VERSION or meta.get("images") != n:
            meta = None
    if meta is None:
        subprocess.run(["rm", "-rf", d], check=True)
        os.makedirs(d)
        print(f"making {n} JPEGs at {d} ...", flush=True)
        t0 = time.perf_counter()
        offsets = np.zeros(n + 1, np.int64)
        with open(p["blob"], "wb") as blob, multiprocessing.get_context("fork").Pool(os.cpu_count()) as pool:
            for i, b in enumerate(pool.imap(_encode, range(n), chunksize=64)):
                blob.write(b)
                offsets[i + 1] = offsets[i] + len(b)
        np.save(p["offsets"], offsets)
        np.save(p["labels"], np.random.default_rng(0).integers(0, 1000, n).astype(np.int64))
        meta = {"version": CORPUS_VERSION, "images": n, "bytes": int(offsets[-1])}
        with open(p["meta"], "w") as f:
            json.dump(meta, f)
        print(f"  {n} JPEGs, {offsets[-1] / 1e6:.1f} MB, in {time.perf_counter() - t0:.0f} s", flush=True)
    if need_table:
        import flywheel
        ok = False
        if os.path.exists(p["table"]):
            try:
                ok = flywheel.Table.open(p["table"]).num_rows == n
            except Exception:  # noqa: BLE001  (a half-written table: rebuild it)
                ok = False
        if not ok:
            subprocess.run(["rm", "-rf", p["table"]], check=True)
            print(f"making the flywheel table {p['table']} ...", flush=True)
            offsets, labels = np.load(p["offsets"]), np.load(p["labels"])
            blob = np.memmap(p["blob"], dtype=np.uint8, mode="r")
            t = flywheel.Table.create(p["table"], {"jpeg": "binary", "label": "int64"})
            for s in range(0, n, CHUNK):
                e = min(n, s + CHUNK)
                t.append({"jpeg": [bytes(blob[offsets[i]:offsets[i + 1]]) for i in range(s, e)],
                          "label": labels[s:e]})
            del blob
    p["bytes"] = meta["bytes"]
    return p


def table_files(path):
    out = []
    for dp, _, fs in os.walk(path):
        out += [os.path.join(dp, f) for f in fs]
    return sorted(out)


def warm(files):
    """Read every byte of files once (page cache)."""
    total = 0
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while True:
                b = fh.read(1 << 20)
                if not b:
                    break
                total += len(b)
    return total


# ------------------------------------------------------------ PIL baseline
def pil_transform(jpeg, size, draft, rng=random):
    """torchvision RandomResizedCrop(size) + RandomHorizontalFlip on PIL,
    returning uint8 HWC. draft: PIL's scaled decode first."""
    img = Image.open(io.BytesIO(jpeg))
    W, H = img.size
    i, j, h, w = jpeg_pil_baseline.rrc_params(rng, W, H)
    if draft:
        # Largest libjpeg reduction that keeps the crop >= size pixels.
        img.draft("RGB", (max(1, W * size // w), max(1, H * size // h)))
        sx, sy = img.width / W, img.height / H
        box = (j * sx, i * sy, (j + w) * sx, (i + h) * sy)
    else:
        box = (j, i, j + w, i + h)
    if img.mode != "RGB":
        img = img.convert("RGB")
    img = img.resize((size, size), Image.BILINEAR, box=box)
    if rng.random() < 0.5:
        img = ImageOps.mirror(img)
    return np.asarray(img)


class JpegDataset:
    """Row i: the JPEG bytes at offsets[i]:offsets[i+1] of the blob (memmap,
    opened lazily in each worker), PIL decode + crop + flip, and the label."""

    def __init__(self, paths, size, draft):
        self.paths, self.size, self.draft = paths, size, draft
        self.blob = self.offsets = self.labels = None
        self.n = len(np.load(paths["offsets"], mmap_mode="r")) - 1

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.blob is None:
            self.blob = np.memmap(self.paths["blob"], dtype=np.uint8, mode="r")
            self.offsets = np.load(self.paths["offsets"])
            self.labels = np.load(self.paths["labels"])
        jpeg = self.blob[self.offsets[i]:self.offsets[i + 1]].tobytes()
        return pil_transform(jpeg, self.size, self.draft), int(self.labels[i])


def pil_run(paths, draft, workers, max_batches):
    """A DataLoader with persistent workers: a few batches of a first epoch
    (workers started and warm), then the whole second epoch (or max_batches
    of it) timed from iter() to its last batch, like flywheel's steady-state
    epoch (timing "after the first batch" instead would count the batches the
    other workers prefetched while the first was waited for). Returns a dict."""
    import torch
    torch.set_num_threads(1)
    random.seed(0)  # workers=0 draws from the main process's random module
    ds = JpegDataset(paths, SIZE, draft)
    dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers,
                                     generator=torch.Generator().manual_seed(0), persistent_workers=workers > 0)
    for k, (img, lab) in enumerate(dl):  # warm-up
        assert tuple(img.shape) == (BATCH, SIZE, SIZE, 3) and img.dtype == torch.uint8, (img.shape, img.dtype)
        if k + 1 >= 2 * max(1, workers):
            break
    rows = batches = 0
    t0 = time.perf_counter()
    for img, lab in dl:
        rows += len(lab)
        batches += 1
        if max_batches and batches >= max_batches:
            break
    dt = time.perf_counter() - t0
    del dl
    return {"images": rows, "batches": batches, "seconds": dt, "images_per_s": rows / dt}


# ---------------------------------------------------------------- flywheel
def flywheel_run(table, threads, n):
    """Three epochs of one loader, in a fresh process (the entropy-index cache
    is process-wide): the first (start-up, first touch of the mapped table;
    every image seen for the first time), the second (each image's second
    sighting: its entropy index is built while it is decoded) and the third
    (steady state, every later epoch of a training run: crops decoded from
    the indexes). Returns a dict."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(_flywheel_epochs, (table, threads, n))


def _flywheel_epochs(table, threads, n):
    import flywheel
    from flywheel import transforms
    loader = flywheel.Loader(table, batch_size=BATCH, seed=0, num_threads=threads,
                             transforms=[transforms.DecodeImage("jpeg", height=SIZE, width=SIZE)])
    epochs = []
    for _ in range(3):
        rows = 0
        t0 = time.perf_counter()
        for b in loader:
            x = b["jpeg"]
            if rows == 0:
                assert isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.shape[1:] == (SIZE, SIZE, 3), \
                    (type(x), getattr(x, "dtype", None), getattr(x, "shape", None))
                assert b["label"].dtype == np.int64 and len(b["label"]) == len(x)
            rows += len(x)
        dt = time.perf_counter() - t0
        assert rows == n, (rows, n)
        epochs.append({"images": rows, "seconds": dt, "images_per_s": rows / dt})
    stats = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in loader.stats().items()}
    loader.close()
    return {"first_epoch": epochs[0], "index_build_epoch": epochs[1], "steady_epoch": epochs[2],
            "images_per_s": epochs[2]["images_per_s"], "stats_after_three_epochs": stats}


def sanity_check(paths, rows=128):
    """The same pixels as PIL? DecodeImage(crop="full", flip=0) on the first
    rows in table order vs PIL's bilinear resize of the whole image:
    scaled_decode=False vs a full PIL decode (same filter: expect ~0), and the
    default scaled decode vs PIL's draft (expect a few units; 0-255 scale)."""
    import flywheel
    from flywheel import transforms
    blob = np.memmap(paths["blob"], dtype=np.uint8, mode="r")
    offsets, labels = np.load(paths["offsets"]), np.load(paths["labels"])
    out = {"rows": rows}
    for name, scaled in (("full_decode_vs_pil", False), ("scaled_decode_vs_pil_draft", True)):
        loader = flywheel.Loader(paths["table"], batch_size=rows, shuffle=False, num_threads=1,
                                 transforms=[transforms.DecodeImage("jpeg", SIZE, SIZE, crop="full", flip=0,
                                                                    scaled_decode=scaled)])
        b = loader.next()
        loader.close()
        assert np.array_equal(b["label"], labels[:rows])
        ref = []
        for i in range(rows):
            img = Image.open(io.BytesIO(blob[offsets[i]:offsets[i + 1]].tobytes()))
            if scaled:
                img.draft("RGB", (SIZE, SIZE))
            ref.append(np.asarray(img.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)))
        d = np.abs(b["jpeg"].astype(np.int16) - np.stack(ref).astype(np.int16))
        out[name] = {"mean_abs_diff": round(float(d.mean()), 3), "median_abs_diff": float(np.median(d)),
                     "p99_abs_diff": float(np.percentile(d, 99))}
    return out


# -------------------------------------------------------------------- main
def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=2, help="best of this many runs per configuration")
    p.add_argument("--tmp", default="/tmp/flywheel-jpeg-bench")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "jpeg.json"))
    p.add_argument("--threads", default="1,2", help="flywheel num_threads values, comma-separated")
    p.add_argument("--workers", default="0,1,2", help="DataLoader num_workers values, comma-separated")
    p.add_argument("--batches", type=int, default=0,
                   help="PIL: batches timed (0: a whole epoch)")
    p.add_argument("--only", choices=["all", "baseline", "flywheel"], default="all")
    a = p.parse_args()
    threads = [int(x) for x in a.threads.split(",") if x]
    workers = [int(x) for x in a.workers.split(",") if x]
    os.makedirs(a.tmp, exist_ok=True)
    results = {"machine": machine(), "batch_size": BATCH, "output": [SIZE, SIZE, 3],
               "transform": "random-resized-crop scale (0.08, 1) ratio (3/4, 4/3), hflip p=0.5, uint8 HWC"}
    m = results["machine"]
    print(f"== jpeg_e2e: {m['cpus']} CPUs ({m['cpu_model']}), load average at start {' '.join(m['loadavg_at_start'])}",
          flush=True)
    m["busy_cpus_at_start"] = busy_cpus()
    if m["busy_cpus_at_start"] > 0.2:
        print(f"WARNING: other processes keep {m['busy_cpus_at_start']} of {m['cpus']} CPUs busy: they compete "
              f"with both sides; the figures will be low and the ratios unreliable", flush=True)
    run_fw, run_pil = a.only in ("all", "flywheel"), a.only in ("all", "baseline")
    paths = make_corpus(a.tmp, a.images, need_table=run_fw)
    results["corpus"] = {"images": a.images, "bytes": paths["bytes"], "mean_bytes": round(paths["bytes"] / a.images),
                         "sides": "224-288 px", "quality": 90, "subsampling": "4:2:0"}
    files = [paths["blob"], paths["offsets"], paths["labels"]] + (table_files(paths["table"]) if run_fw else [])
    warm(files)
    print(f"corpus: {a.images} JPEGs, {paths['bytes'] / 1e6:.1f} MB ({paths['bytes'] / a.images / 1e3:.1f} KB each); "
          f"page cache warmed", flush=True)

    rows = []  # (name, images/s, note)
    if run_fw:
        results["sanity"] = sanity_check(paths)
        print(f"sanity: DecodeImage(crop='full', flip=0) vs PIL bilinear resize, {results['sanity']}", flush=True)
        results["flywheel"] = {}
        for t in threads:
            load = {"loadavg": loadavg(), "busy_cpus": busy_cpus(0.5)}
            runs = [flywheel_run(paths["table"], t, a.images) for _ in range(a.repeats)]
            r = max(runs, key=lambda x: x["images_per_s"])
            r["samples"] = [round(x["images_per_s"], 1) for x in runs]
            r["before"] = load
            r["first_epoch_best_images_per_s"] = max(x["first_epoch"]["images_per_s"] for x in runs)
            r["index_build_epoch_best_images_per_s"] = max(x["index_build_epoch"]["images_per_s"] for x in runs)
            results["flywheel"][f"threads_{t}"] = r
            s = r["stats_after_three_epochs"]
            print(f"flywheel.Loader + DecodeImage, {t} thread(s): {r['images_per_s']:.0f} images/s steady-state epoch "
                  f"(first epoch {r['first_epoch_best_images_per_s']:.0f}, index-building second epoch "
                  f"{r['index_build_epoch_best_images_per_s']:.0f}; samples {r['samples']}; other processes "
                  f"{load['busy_cpus']} CPUs before); stats {s}",
                  flush=True)
            rows.append((f"flywheel.Loader, num_threads={t}", r["images_per_s"],
                         f"epoch 1 {r['first_epoch_best_images_per_s']:.0f}, "
                         f"epoch 2 (index build) {r['index_build_epoch_best_images_per_s']:.0f}"))
    if run_pil:
        for name, draft in (("pil", False), ("pil_draft", True)):
            results[name] = {}
            for w in workers:
                load = {"loadavg": loadavg(), "busy_cpus": busy_cpus(0.5)}
                runs = [pil_run(paths, draft, w, a.batches) for _ in range(a.repeats)]
                r = max(runs, key=lambda x: x["images_per_s"])
                r["samples"] = [round(x["images_per_s"], 1) for x in runs]
                r["before"] = load
                results[name][f"workers_{w}"] = r
                label = "PIL full decode" if not draft else "PIL draft (scaled decode)"
                print(f"torch DataLoader + {label}, {w} worker(s): {r['images_per_s']:.0f} images/s "
                      f"({r['batches']} batches; samples {r['samples']}; other processes {load['busy_cpus']} CPUs before)",
                      flush=True)
                rows.append((f"DataLoader + {label}, num_workers={w}", r["images_per_s"], ""))

    ratios = {}

    def ips(kind, key):
        return results.get(kind, {}).get(key, {}).get("images_per_s")
    for fw_key, w_key, name in (("threads_2", "workers_2", "flywheel_2_threads_vs_best_pil_2_workers"),
                                ("threads_1", "workers_0", "flywheel_1_thread_vs_best_pil_single_process")):
        f = ips("flywheel", fw_key)
        pils = {k: ips(k, w_key) for k in ("pil", "pil_draft") if ips(k, w_key)}
        if f and pils:
            best = max(pils, key=pils.get)
            ratios[name] = round(f / pils[best], 2)
            ratios[name + "_baseline"] = f"{best} {w_key}"
            for k, v in pils.items():
                ratios[f"{fw_key}_vs_{k}_{w_key}"] = round(f / v, 2)
    f1, f2 = ips("flywheel", "threads_1"), ips("flywheel", "threads_2")
    if f1 and f2:
        ratios["flywheel_2_threads_vs_1_thread"] = round(f2 / f1, 2)
    results["ratios"] = ratios
    results["target"] = "flywheel_2_threads_vs_best_pil_2_workers >= 3"

    print()
    print(f"{'configuration':<52} {'images/s':>10}")
    for name, v, note in rows:
        print(f"{name:<52} {v:>10.0f}  {note}")
    for k, v in ratios.items():
        print(f"  {k}: {v}")
    print(f"(load average at start {' '.join(m['loadavg_at_start'])}, at end "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])}; target: flywheel 2 threads >= 3x best PIL 2 workers)")
    results["machine"]["loadavg_at_end"] = open("/proc/loadavg").read().split()[:3]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    sys.exit(main())
