#!/usr/bin/env python3
"""One shuffled epoch into a training loop: flywheel.Loader against the data loaders people use.

Workload: ``--rows`` rows (default 200K) of

    feature  float32[64]   standard normal
    label    int64         = row number (each epoch's sum checks that every
                             row came exactly once)
    text     string        50-200 random lowercase letters and spaces

written once into each loader's format. Every loader serves a globally
shuffled epoch (a new order each epoch) in batches of ``--batch`` (256) with
``--workers`` (2) workers, and every batch goes through the same training
step (``train_step``: tanh(feature @ W) for a fixed 64x64 W, the sum of the
labels and of the text lengths), so all loaders do the same decoding work:
a float32 (B, 64) array, an int64 (B,) array and B strings per batch.

  flywheel        flywheel.Loader(table, batch_size, num_threads=workers,
                  shuffle_mode="row"): numpy batches, list of str.
  torch_memmap    torch.utils.data.DataLoader over a map-style Dataset of
                  memory-mapped .npy files (feature, label, text offsets +
                  bytes), RandomSampler, batch_size, num_workers=workers,
                  persistent_workers=True, default collate.
  grain_arrayrecord  Grain's DataLoader (grain.python) over an ArrayRecord
                  file (group_size:1, uncompressed: Grain's documented
                  random-access format) with a MapTransform decoding each
                  record, IndexSampler(shuffle=True, num_epochs=epochs),
                  Batch(batch_size), worker_count=workers,
                  ReadOptions(num_threads=0): what Grain's ReadOptions
                  docstring recommends when the data are already in memory
                  (here: in the page cache); its default (16 threads, 500
                  prefetched elements) ran 2-5x slower on the development VM
                  (--grain-threads 16 measures it). One iterator runs all
                  epochs (Grain's way); epochs are cut where the rows served
                  reach k * rows.
  grain_memmap    the same DataLoader over a RandomAccessDataSource of the
                  memory-mapped .npy files (no per-record decoding).
  grain_dataset   Grain's Dataset API over the same .npy source:
                  MapDataset.source(...).shuffle(seed).batch(batch_size)
                  .repeat(epochs).to_iter_dataset(ReadOptions(num_threads=0))
                  .mp_prefetch(MultiprocessingOptions(num_workers=workers)).
  hf_iter         HF datasets: Dataset of the same Arrow table, save_to_disk
                  + load_from_disk (memory-mapped Arrow), with_format("numpy"),
                  .shuffle(seed) per epoch, .iter(batch_size): in-process, the
                  API has no workers.
  hf_torch        the same dataset through torch's DataLoader (shuffle=True,
                  num_workers=workers, persistent_workers=True): the DataLoader
                  fetches each batch with Dataset.__getitems__.
  mosaic_streaming  Mosaic Streaming in its own environment
                  (bench/peers/streaming, a subprocess): MDS shards written
                  with MDSWriter (no compression, 64 MB shards),
                  StreamingDataset(local=..., shuffle=True, batch_size) through
                  torch's DataLoader (num_workers=workers). Its shuffle
                  (py1e, the default) is shard-aware, not a uniform
                  permutation.

Each repeat builds a fresh loader and runs ``--epochs`` (>= 2) epochs; epoch 1
includes building the loader (opening files, starting workers: "cold" start,
but the page cache is warm - every file is read once before each repeat), the
later ones are the steady state a training run sees. Figure per loader: the
median over repeats of its steady-state samples/s (epochs 2..), and of its
first epoch. Loaders alternate within each repeat. BLAS/OpenMP pools are set
to one thread (OMP/OPENBLAS/MKL_NUM_THREADS=1 unless set) so the training step
costs everyone the same. The issue's target: flywheel ahead of every one.

Writes bench/results/epoch_peers.json (machine description, flags, every
epoch of every repeat).

    PYTHONPATH=build/python $(make -s python-path) bench/epoch_peers.py [--rows N] [--quick]
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
for _v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):  # everything is local; never reach for a hub
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from take_peers import du, loadavg, machine, make_text, read_all, versions  # noqa: E402

DIM = 64
STREAMING = os.path.join(HERE, "peers", "streaming")
LOADERS = ("flywheel", "torch_memmap", "grain_arrayrecord", "grain_memmap", "grain_dataset", "hf_iter",
           "hf_torch", "mosaic_streaming")
QUICK_LOADERS = ("flywheel", "torch_memmap", "grain_dataset", "hf_iter", "mosaic_streaming")
_W = np.random.default_rng(1234).standard_normal((DIM, DIM)).astype(np.float32) / 8


def train_step(feature, label, text):
    """The training step every loader feeds: a small fixed computation on
    every column of the batch. Returns (rows, label sum, text bytes)."""
    f = np.asarray(feature, dtype=np.float32)
    h = np.tanh(f @ _W)
    h.sum()
    return len(f), int(np.asarray(label).sum()), sum(len(t) for t in text)


def as_numpy(x):
    return x.numpy() if hasattr(x, "numpy") else x


class EpochClock:
    """Cuts a stream of batches into epochs of ``rows`` rows and times them."""

    def __init__(self, rows):
        self.rows, self.out = rows, []
        self.t0 = time.perf_counter()
        self.n = self.labels = self.text = 0

    def batch(self, feature, label, text):
        k, s, t = train_step(feature, label, text)
        self.n += k
        self.labels += s
        self.text += t
        if self.n >= self.rows:
            self.end()

    def end(self):
        if not self.n:
            return
        dt = time.perf_counter() - self.t0
        self.out.append({"rows": self.n, "seconds": dt, "samples_per_s": self.n / dt,
                         "label_sum": self.labels, "text_bytes": self.text})
        self.t0 = time.perf_counter()
        self.n = self.labels = self.text = 0


# ------------------------------------------------------------------- sources

class MemmapSource:
    """Row i of the .npy files as {feature, label, text}: a torch map-style
    Dataset and a Grain RandomAccessDataSource. Files open lazily in the
    worker that reads them (a memmap pickles as a copy)."""

    def __init__(self, d):
        self.d = d
        self.n = int(np.load(os.path.join(d, "label.npy"), mmap_mode="r").shape[0])
        self.m = None

    def __len__(self):
        return self.n

    def _open(self):
        self.m = {k: np.load(os.path.join(self.d, f"{k}.npy"), mmap_mode="r")
                  for k in ("feature", "label", "text_offsets", "text_bytes")}
        return self.m

    def __getitem__(self, i):
        m = self.m or self._open()
        o = m["text_offsets"]
        a, b = int(o[i]), int(o[i + 1])
        return {"feature": np.array(m["feature"][i]), "label": int(m["label"][i]),
                "text": m["text_bytes"][a:b].tobytes().decode()}

    def __getstate__(self):
        return {"d": self.d, "n": self.n, "m": None}


def decode_record(rec):
    """An ArrayRecord record (feature bytes, label, text) as the row dict."""
    return {"feature": np.frombuffer(rec, np.float32, DIM, 0), "label": int.from_bytes(rec[4 * DIM:4 * DIM + 8],
                                                                                         "little", signed=True),
            "text": rec[4 * DIM + 8:].decode()}


# ------------------------------------------------------------------- loaders

def run_flywheel(ctx, epochs):
    import flywheel
    clock = EpochClock(ctx["rows"])
    loader = flywheel.Loader(ctx["flywheel"], batch_size=ctx["batch"], seed=ctx["seed"], num_threads=ctx["workers"],
                             columns=["feature", "label", "text"])
    for _ in range(epochs):
        for b in loader:
            clock.batch(b["feature"], b["label"], b["text"])
        clock.end()
    loader.close()
    return clock.out


def run_torch_memmap(ctx, epochs):
    import torch
    clock = EpochClock(ctx["rows"])
    ds = MemmapSource(ctx["npy"])
    dl = torch.utils.data.DataLoader(ds, batch_size=ctx["batch"],
                                     sampler=torch.utils.data.RandomSampler(
                                         ds, generator=torch.Generator().manual_seed(ctx["seed"])),
                                     num_workers=ctx["workers"], persistent_workers=ctx["workers"] > 0)
    for _ in range(epochs):
        for b in dl:
            clock.batch(as_numpy(b["feature"]), as_numpy(b["label"]), b["text"])
        clock.end()
    del dl
    return clock.out


def _grain_run(ctx, epochs, source, ops):
    import grain.python as gp
    from absl import flags
    if not flags.FLAGS.is_parsed():  # Grain reads absl flags (as an absl app would have parsed them)
        flags.FLAGS(sys.argv[:1], known_only=True)
    sampler = gp.IndexSampler(num_records=len(source), shard_options=gp.NoSharding(), shuffle=True,
                              num_epochs=epochs, seed=ctx["seed"])
    clock = EpochClock(ctx["rows"])
    dl = gp.DataLoader(data_source=source, sampler=sampler, operations=list(ops) + [gp.Batch(ctx["batch"])],
                       worker_count=ctx["workers"], read_options=gp.ReadOptions(num_threads=ctx["grain_threads"]))
    for b in dl:
        clock.batch(b["feature"], b["label"], b["text"])
    clock.end()
    return clock.out


try:  # at module level so Grain's worker processes can unpickle it
    import grain.python as _gp

    class DecodeRecord(_gp.MapTransform):
        def map(self, rec):
            return decode_record(rec)
except ImportError:  # the Mosaic Streaming environment imports this file for train_step
    DecodeRecord = None


def run_grain_arrayrecord(ctx, epochs):
    import grain.python as gp
    return _grain_run(ctx, epochs, gp.ArrayRecordDataSource([ctx["arrayrecord"]]), [DecodeRecord()])


def run_grain_memmap(ctx, epochs):
    return _grain_run(ctx, epochs, MemmapSource(ctx["npy"]), [])


def run_grain_dataset(ctx, epochs):
    """Grain's Dataset API: shuffle, batch, repeat on the MapDataset, then
    worker processes (mp_prefetch); batches never straddle epochs."""
    import grain
    import grain.python as gp
    from absl import flags
    if not flags.FLAGS.is_parsed():
        flags.FLAGS(sys.argv[:1], known_only=True)
    clock = EpochClock(ctx["rows"])
    ds = (grain.MapDataset.source(MemmapSource(ctx["npy"])).shuffle(seed=ctx["seed"]).batch(ctx["batch"])
          .repeat(epochs).to_iter_dataset(gp.ReadOptions(num_threads=ctx["grain_threads"])))
    if ctx["workers"]:
        ds = ds.mp_prefetch(grain.multiprocessing.MultiprocessingOptions(num_workers=ctx["workers"]))
    for b in ds:
        clock.batch(b["feature"], b["label"], b["text"])
    clock.end()
    return clock.out


def run_hf_iter(ctx, epochs):
    import datasets
    clock = EpochClock(ctx["rows"])
    ds = datasets.load_from_disk(ctx["hf"]).with_format("numpy")
    for e in range(epochs):
        for b in ds.shuffle(seed=ctx["seed"] + e).iter(batch_size=ctx["batch"]):
            clock.batch(b["feature"], b["label"], b["text"])
        clock.end()
    return clock.out


def run_hf_torch(ctx, epochs):
    import datasets
    import torch
    clock = EpochClock(ctx["rows"])
    ds = datasets.load_from_disk(ctx["hf"]).with_format("numpy")
    dl = torch.utils.data.DataLoader(ds, batch_size=ctx["batch"], shuffle=True,
                                     generator=torch.Generator().manual_seed(ctx["seed"]),
                                     num_workers=ctx["workers"], persistent_workers=ctx["workers"] > 0)
    for _ in range(epochs):
        for b in dl:
            clock.batch(as_numpy(b["feature"]), as_numpy(b["label"]), b["text"])
        clock.end()
    del dl
    return clock.out


def run_mosaic_streaming(ctx, epochs):
    """A subprocess in Streaming's environment; the first one also writes the
    MDS shards (from the .npy files) before it starts the clock."""
    first = not os.path.exists(os.path.join(ctx["mds"], "index.json"))
    r = subprocess.run([ctx["streaming_python"], os.path.join(STREAMING, "epoch_streaming.py"), "run",
                        "--data", ctx["npy"], "--mds", ctx["mds"], "--batch", str(ctx["batch"]), "--workers", str(ctx["workers"]),
                        "--epochs", str(epochs), "--seed", str(ctx["seed"]), "--rows", str(ctx["rows"])],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"epoch_streaming.py run failed ({r.returncode}): {r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if first and "written" in out:
        ctx["formats"]["mds"] = {"bytes_on_disk": du(ctx["mds"]), **out["written"]}
        print(f"  mds: {ctx['formats']['mds']}", flush=True)
    ctx.setdefault("streaming_versions", out.get("versions", {}))
    return out["epochs"]


RUNNERS = {name: globals()[f"run_{name}"] for name in LOADERS}


# ---------------------------------------------------------------------- data

def write_data(a, scratch, loaders, streaming_python):
    """The same rows in every format the chosen loaders read; returns ctx."""
    rng = np.random.default_rng(a.seed)
    n = a.rows
    t0 = time.perf_counter()
    feature = rng.standard_normal((n, DIM), dtype=np.float32)
    label = np.arange(n, dtype=np.int64)
    toff, tbytes = make_text(rng, n)
    ctx = {"rows": n, "batch": a.batch, "workers": a.workers, "seed": a.seed, "paths": {},
           "grain_threads": a.grain_threads,
           "streaming_python": streaming_python,
           "expect_label_sum": n * (n - 1) // 2, "expect_text_bytes": int(toff[-1]), "formats": {}}
    print(f"data: {n} rows (feature float32[{DIM}], label int64, text {len(tbytes) / n:.0f} B/row on average), "
          f"made in {time.perf_counter() - t0:.1f} s", flush=True)

    def done(key, path, t0, **info):
        ctx[key] = path
        ctx["paths"].setdefault(key, path)
        ctx["formats"][key] = {"bytes_on_disk": du(path), "write_seconds": round(time.perf_counter() - t0, 3),
                               **info}
        print(f"  {key}: {ctx['formats'][key]}", flush=True)

    need = set(loaders)
    if need & {"torch_memmap", "grain_memmap", "grain_dataset", "mosaic_streaming"}:
        t0 = time.perf_counter()
        d = os.path.join(scratch, "npy")
        os.makedirs(d)
        for k, v in (("feature", feature), ("label", label), ("text_offsets", toff), ("text_bytes", tbytes)):
            np.save(os.path.join(d, f"{k}.npy"), v)
        done("npy", d, t0)
    if "flywheel" in need:
        import flywheel
        t0 = time.perf_counter()
        path = os.path.join(scratch, "flywheel")
        t = flywheel.Table.create(path, {"feature": f"float32[{DIM}]", "label": "int64", "text": "string"})
        texts = [tbytes[toff[i]:toff[i + 1]].tobytes().decode() for i in range(n)]
        t.append({"feature": feature, "label": label, "text": texts})
        del texts
        done("flywheel", path, t0, **t.config)
    if need & {"hf_iter", "hf_torch"}:
        import datasets
        import pyarrow as pa
        datasets.disable_progress_bars()
        t0 = time.perf_counter()
        table = pa.table({"feature": pa.FixedSizeListArray.from_arrays(pa.array(feature.reshape(-1)), DIM),
                          "label": pa.array(label),
                          "text": pa.StringArray.from_buffers(n, pa.py_buffer(toff.astype(np.int32)),
                                                              pa.py_buffer(tbytes))})
        path = os.path.join(scratch, "hf")
        datasets.Dataset(datasets.table.InMemoryTable(table)).save_to_disk(path)
        done("hf", path, t0)
    if "grain_arrayrecord" in need:
        from array_record.python.array_record_module import ArrayRecordWriter
        t0 = time.perf_counter()
        path = os.path.join(scratch, "data.array_record")
        w = ArrayRecordWriter(path, "group_size:1,uncompressed")
        fb = feature.tobytes()
        row = 4 * DIM
        for i in range(n):
            w.write(fb[i * row:(i + 1) * row] + int(label[i]).to_bytes(8, "little", signed=True)
                    + tbytes[toff[i]:toff[i + 1]].tobytes())
        w.close()
        done("arrayrecord", path, t0, options="group_size:1,uncompressed")
    if "mosaic_streaming" in need:  # written by the first run_mosaic_streaming (one interpreter start less)
        ctx["mds"] = ctx["paths"]["mds"] = os.path.join(scratch, "mds")
    return ctx


def streaming_python():
    """The Mosaic Streaming environment's interpreter (made on first use), or None."""
    r = subprocess.run(["bash", os.path.join(STREAMING, "make_env.sh")], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"mosaic_streaming: its environment could not be made: {r.stderr[-2000:]}", flush=True)
        return None
    return r.stdout.strip().splitlines()[-1]


# ---------------------------------------------------------------------- main

def summarize(runs, ctx):
    """Per loader: first-epoch and steady-state samples/s over repeats, checks."""
    out = {}
    for name, reps in runs.items():
        if not reps:
            continue
        first = [r[0]["samples_per_s"] for r in reps]
        steady = [statistics.mean(e["samples_per_s"] for e in r[1:]) for r in reps if len(r) > 1]
        total_rows = sum(e["rows"] for r in reps for e in r)
        total_labels = sum(e["label_sum"] for r in reps for e in r)
        total_text = sum(e["text_bytes"] for r in reps for e in r)
        n_epochs = sum(len(r) for r in reps)
        exact = (total_rows == n_epochs * ctx["rows"] and total_labels == n_epochs * ctx["expect_label_sum"]
                 and total_text == n_epochs * ctx["expect_text_bytes"])
        out[name] = {"samples_per_s": statistics.median(steady) if steady else None,
                     "samples_per_s_best": max(steady) if steady else None,
                     "first_epoch_samples_per_s": statistics.median(first),
                     "every_row_once_per_epoch": exact, "repeats": reps}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--rows", type=int, default=200_000, help="rows (default 200K)")
    p.add_argument("--repeats", type=int, default=2, help="fresh loaders per loader kind (default 2)")
    p.add_argument("--epochs", type=int, default=2, help="epochs per repeat, >= 2 (default 2)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--workers", type=int, default=2, help="workers/threads of every loader (default 2)")
    p.add_argument("--grain-threads", type=int, default=0,
                   help="Grain ReadOptions.num_threads (default 0, Grain's advice for data in memory)")
    p.add_argument("--loaders", default=",".join(LOADERS), help="comma-separated subset of " + ",".join(LOADERS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tmp", default="/tmp", help="parent of the scratch directory (deleted at exit)")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "epoch_peers.json"))
    p.add_argument("--quick", action="store_true",
                   help="smoke test (< 30 s): 5K rows, 1 repeat of 2 epochs, one loader per library unless "
                        "--loaders is given (" + ",".join(QUICK_LOADERS) + ")")
    a = p.parse_args()
    if a.quick:
        a.rows, a.repeats, a.epochs = min(a.rows, 5_000), 1, 2
        if a.loaders == p.get_default("loaders"):
            a.loaders = ",".join(QUICK_LOADERS)
        if a.out == p.get_default("out"):
            a.out = os.path.join(a.tmp, "epoch_peers.quick.json")
    loaders = [x for x in a.loaders.split(",") if x]
    bad = [x for x in loaders if x not in LOADERS]
    if bad or "flywheel" not in loaders:
        p.error(f"--loaders: unknown {bad}" if bad else "--loaders must include flywheel")
    if a.epochs < 2:
        p.error("--epochs must be >= 2 (the first epoch is the cold one)")

    mach = machine()
    print(f"== epoch_peers: {a.rows} rows, batch {a.batch}, {a.workers} workers, {mach['nproc']} CPUs "
          f"({mach['cpu_model']}), load {mach['loadavg_at_start']}", flush=True)
    skipped, failed = {}, {}
    sp = None
    if "mosaic_streaming" in loaders:
        sp = streaming_python()
        if sp is None:
            loaders.remove("mosaic_streaming")
            skipped["mosaic_streaming"] = "its environment (bench/peers/streaming/make_env.sh) could not be made"
    scratch = tempfile.mkdtemp(prefix="flywheel-epoch-peers-", dir=a.tmp)
    try:
        ctx = write_data(a, scratch, loaders, sp)
        runs = {name: [] for name in loaders}
        for rep in range(a.repeats):
            for name in loaders:
                if name in skipped:
                    continue
                read_all([ctx["paths"][k] for k in files_of(name)])
                try:
                    ep = RUNNERS[name](ctx, a.epochs)
                except ImportError as e:
                    skipped[name] = f"not importable: {e}"
                    print(f"{name}: skipped ({e})", flush=True)
                    continue
                except Exception as e:  # a peer that breaks is reported; the others still run
                    if name == "flywheel":
                        raise
                    failed[name] = f"{type(e).__name__}: {e}"
                    skipped[name] = "failed (see failed)"
                    print(f"{name}: FAILED: {failed[name]}", flush=True)
                    continue
                runs[name].append(ep)
                print(f"repeat {rep + 1} {name:18s} " + "  ".join(
                    f"epoch {i + 1}: {e['samples_per_s'] / 1e3:8.1f} K/s ({e['seconds']:.2f} s)"
                    for i, e in enumerate(ep)), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    res = summarize(runs, ctx)
    fw = res["flywheel"]["samples_per_s"]
    ratios = {f"flywheel/{x}": fw / r["samples_per_s"] for x, r in res.items() if x != "flywheel"}
    ratios_first = {f"flywheel/{x}": res["flywheel"]["first_epoch_samples_per_s"] / r["first_epoch_samples_per_s"]
                    for x, r in res.items() if x != "flywheel"}
    peers = [x for x in res if x != "flywheel"]
    best = max(peers, key=lambda x: res[x]["samples_per_s"]) if peers else None
    if best:
        ratios["best_peer"], ratios["flywheel/best_peer"] = best, fw / res[best]["samples_per_s"]
    report(res, ratios, ratios_first)
    for x, r in res.items():
        if not r["every_row_once_per_epoch"]:
            print(f"note: {x} did not serve every row exactly once per epoch (rows/labels/text totals differ)")
    target = all(v > 1.0 for k, v in ratios.items() if k.startswith("flywheel/") and k != "flywheel/best_peer")
    print(f"target (flywheel ahead of every loader, steady state): {'met' if target else 'NOT met'}")
    mach["loadavg_at_end"] = loadavg()
    out = {"benchmark": "epoch_peers", "machine": mach,
           "versions": versions("flywheel", "torch", "grain", "datasets", "pyarrow", "numpy", "array_record"),
           "flags": vars(a), "data": {"rows": a.rows, "columns": {"feature": f"float32[{DIM}]", "label": "int64",
                                                                 "text": "string, 50-200 bytes"},
                                     "formats": ctx["formats"]},
           "method": "median over repeats; each repeat a fresh loader running --epochs epochs; epoch 1 includes "
                     "building the loader (cold start, warm page cache); steady state = mean of epochs 2..",
           "loaders": res, "ratios_steady": ratios, "ratios_first_epoch": ratios_first, "skipped": skipped,
           "failed": failed,
           "targets": {"flywheel_ahead_of_every_loader": target}}
    if ctx.get("streaming_versions"):
        out["versions"]["mosaic_streaming_env"] = ctx["streaming_versions"]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {a.out}")
    return 1 if failed else 0


def files_of(name):
    return {"flywheel": ["flywheel"], "torch_memmap": ["npy"], "grain_memmap": ["npy"],
            "grain_arrayrecord": ["arrayrecord"], "grain_dataset": ["npy"], "hf_iter": ["hf"], "hf_torch": ["hf"],
            "mosaic_streaming": ["mds"]}[name]


def report(res, ratios, ratios_first):
    head = ["loader", "steady samples/s (median)", "best", "first epoch samples/s", "flywheel/this (steady)",
            "flywheel/this (first)", "each row once"]
    rows = []
    for x, r in res.items():
        rows.append([x, f"{r['samples_per_s']:,.0f}", f"{r['samples_per_s_best']:,.0f}",
                     f"{r['first_epoch_samples_per_s']:,.0f}",
                     "-" if x == "flywheel" else f"{ratios[f'flywheel/{x}']:.2f}",
                     "-" if x == "flywheel" else f"{ratios_first[f'flywheel/{x}']:.2f}",
                     "yes" if r["every_row_once_per_epoch"] else "NO"])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print()
    print(" | ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(v.ljust(w) for v, w in zip(r, widths)))
    if "best_peer" in ratios:
        print(f"flywheel / best peer ({ratios['best_peer']}): {ratios['flywheel/best_peer']:.2f}")
    print()


if __name__ == "__main__":
    sys.exit(main())
