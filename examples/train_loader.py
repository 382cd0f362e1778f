#!/usr/bin/env python3
"""Train a tiny PyTorch classifier from a flywheel table, with checkpoint/resume
of the model, the optimizer and the loader.

    PYTHONPATH=build/python $(make -s python-path) examples/train_loader.py --dir /tmp/fw-train
    # stop it at any point (Ctrl-C, kill), then run the same command again:
    # it resumes at the next unseen sample of the epoch it was in.

The table is synthetic (made on first run): 16x16 RGB uint8 images of 4
classes (class c has a bright stripe in row band c, plus noise) and an int64
label. The loader shuffles deterministically (seed), so a resumed run sees
exactly the samples the interrupted one had not seen, in the same order.
Options: --epochs, --batch-size, --stop-after N (exit after N steps, as if
killed; for testing resume), --world-size/--rank (run one rank of W).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn

import flywheel
from flywheel.torch import IterableDataset

CLASSES, SIDE = 4, 16


def make_table(path: str, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    t = flywheel.Table.create(path, {"image": f"uint8[{SIDE},{SIDE},3]", "label": "int64"})
    for start in range(0, rows, 4096):
        n = min(4096, rows - start)
        label = rng.integers(0, CLASSES, n)
        img = rng.integers(0, 96, (n, SIDE, SIDE, 3), dtype=np.uint8)
        band = SIDE // CLASSES
        for c in range(CLASSES):
            img[label == c, c * band:(c + 1) * band, :, :] += 128
        t.append({"image": img, "label": label.astype(np.int64)})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default="/tmp/flywheel-train-loader", help="table and checkpoint directory")
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop-after", type=int, default=0, help="exit after this many steps (simulates a crash)")
    p.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=1)
    a = p.parse_args(argv)

    table = os.path.join(a.dir, "images")
    ckpt = os.path.join(a.dir, f"ckpt-rank{a.rank}.pt")
    os.makedirs(a.dir, exist_ok=True)
    if not os.path.exists(table):
        print(f"making a synthetic table of {a.rows} images at {table}")
        make_table(table, a.rows)

    torch.manual_seed(a.seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(SIDE * SIDE * 3, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ds = IterableDataset(table, batch_size=a.batch_size, seed=a.seed, rank=a.rank, world_size=a.world_size,
                         num_threads=2)
    step = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        ds.load_state_dict(state["loader"])
        step = state["step"]
        print(f"resumed from {ckpt}: step {step}, epoch {state['loader']['epoch']}, "
              f"sample {state['loader']['consumed']} of the epoch")

    def save():
        tmp = ckpt + ".tmp"
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "loader": ds.state_dict(),
                    "step": step}, tmp)
        os.replace(tmp, ckpt)

    t0 = time.monotonic()
    while True:
        epoch = ds.state_dict()["epoch"]
        if epoch >= a.epochs:
            break
        correct = total = 0
        for batch in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0):
            x = batch["image"].float().div_(255.0)
            y = batch["label"]
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct += int((logits.argmax(1) == y).sum())
            total += len(y)
            step += 1
            if step % a.checkpoint_every == 0:
                save()
            if a.stop_after and step >= a.stop_after:
                save()
                print(json.dumps({"stopped_at_step": step, "loader": ds.state_dict()}))
                return 0
        print(f"epoch {epoch}: accuracy {correct / max(total, 1):.3f} over {total} samples, step {step}, "
              f"{time.monotonic() - t0:.1f} s")
        save()
    s = ds.stats()
    print(json.dumps({"done": True, "step": step, "rows_per_second": round(s["rows_per_second"]),
                      "consumer_wait_seconds": round(s["consumer_wait_seconds"], 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
