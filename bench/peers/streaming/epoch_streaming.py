#!/usr/bin/env python3
"""The Mosaic Streaming peer of bench/epoch_peers.py, run in its own environment.

Mosaic Streaming pins numpy<2.2, so it lives in the environment
bench/peers/streaming/make_env.sh makes, and epoch_peers.py runs this script
with that interpreter:

  write  --data NPY_DIR --mds OUT   MDS shards (streaming.MDSWriter, no
         compression, the default 64 MB size limit) of the rows in NPY_DIR
         (feature.npy float32[n, 64], label.npy int64, text_offsets.npy +
         text_bytes.npy); prints a JSON line describing them.
  run    [--data NPY_DIR] --mds DIR --batch B --workers W --epochs E --seed S --rows N
         (with --data, first writes the shards as `write` does when DIR has
         none: one interpreter start, ~10 s of imports, less) then
         StreamingDataset(local=DIR, shuffle=True, shuffle_seed=S,
         batch_size=B) through torch's DataLoader(batch_size=B,
         num_workers=W); E epochs, every batch through epoch_peers.train_step
         (the same step as every other loader); the first epoch includes
         building the dataset and starting the workers. Prints one JSON line:
         {"epochs": [{rows, seconds, samples_per_s, label_sum, text_bytes}],
          "versions": {...}, "written": {...} when it wrote the shards}.
"""

import argparse
import json
import os
import sys
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from epoch_peers import EpochClock, as_numpy  # noqa: E402  (bench/epoch_peers.py: train_step and its clock)

COLUMNS = {"feature": "ndarray:float32:64", "label": "int64", "text": "str"}


def write(a):
    """Writes the MDS shards; returns a dict describing them."""
    from streaming import MDSWriter
    t0 = time.perf_counter()
    feature = np.load(os.path.join(a.data, "feature.npy"), mmap_mode="r")
    label = np.load(os.path.join(a.data, "label.npy"), mmap_mode="r")
    toff = np.load(os.path.join(a.data, "text_offsets.npy"), mmap_mode="r")
    tbytes = np.load(os.path.join(a.data, "text_bytes.npy"), mmap_mode="r")
    with MDSWriter(out=a.mds, columns=COLUMNS, compression=None) as w:
        for i in range(len(label)):
            w.write({"feature": np.array(feature[i]), "label": int(label[i]),
                     "text": tbytes[toff[i]:toff[i + 1]].tobytes().decode()})
    shards = sorted(f for f in os.listdir(a.mds) if f.endswith(".mds"))
    return {"columns": COLUMNS, "compression": None, "shards": len(shards),
            "write_seconds": round(time.perf_counter() - t0, 3)}


def run(a):
    written = None
    if a.data and not os.path.exists(os.path.join(a.mds, "index.json")):
        written = write(a)
    import streaming
    import torch
    from streaming.base.util import clean_stale_shared_memory
    clean_stale_shared_memory()
    clock = EpochClock(a.rows)
    ds = streaming.StreamingDataset(local=a.mds, shuffle=True, shuffle_seed=a.seed, batch_size=a.batch)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, num_workers=a.workers)
    for _ in range(a.epochs):
        for b in dl:
            clock.batch(as_numpy(b["feature"]), as_numpy(b["label"]), b["text"])
        clock.end()
    out = {"epochs": clock.out, "versions": {"streaming": streaming.__version__, "torch": torch.__version__,
                                             "numpy": np.__version__}}
    if written:
        out["written"] = written
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--data", required=True)
    w.add_argument("--mds", required=True)
    r = sub.add_parser("run")
    r.add_argument("--data", help="write the shards from this .npy directory first if --mds has none")
    r.add_argument("--mds", required=True)
    r.add_argument("--batch", type=int, default=256)
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--epochs", type=int, default=2)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--rows", type=int, required=True)
    a = p.parse_args()
    if a.cmd == "write":
        print(json.dumps(write(a)))
    else:
        run(a)


if __name__ == "__main__":
    main()
