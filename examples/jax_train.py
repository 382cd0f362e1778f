#!/usr/bin/env python3
"""Train a small flax (nnx) + optax classifier fed by flywheel.jax.

    PYTHONPATH=build/python python examples/jax_train.py
    # two CPU devices, batches split between them by a NamedSharding:
    XLA_FLAGS=--xla_force_host_platform_device_count=2 PYTHONPATH=build/python python examples/jax_train.py

The data is synthetic and made in code: two flywheel tables, "train" and
"heldout", of ``x: float32[16]`` (standard normal) and ``label: int32``,
where the label is the argmax of 4 fixed random linear functions of x (a
rule an MLP learns to well above the 25% of chance). The training loader
shuffles deterministically (seed); batches arrive as dicts of jax.Array,
without a host copy (the columns are 32-bit, see docs/jax.md), and, when
JAX has more than one device, sharded over the batch dimension. Held-out
accuracy is printed after each epoch; the program exits with status 1 when
the final accuracy is below --min-accuracy.
"""

import argparse
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import flywheel
import flywheel.jax

FEATURES, CLASSES = 16, 4


def make_tables(root: str, train_rows: int, heldout_rows: int, seed: int):
    """The train and held-out tables under ``root`` (one rule, disjoint rows)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(FEATURES, CLASSES)).astype(np.float32)
    paths = []
    for name, rows in (("train", train_rows), ("heldout", heldout_rows)):
        path = os.path.join(root, name)
        x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
        if not os.path.exists(path):  # a second run with the same --dir reuses them
            t = flywheel.Table.create(path, {"x": f"float32[{FEATURES}]", "label": "int32"})
            t.append({"x": x, "label": np.argmax(x @ w, axis=1).astype(np.int32)})
        paths.append(path)
    return paths


class MLP(nnx.Module):
    def __init__(self, hidden: int, rngs: nnx.Rngs):
        self.l1 = nnx.Linear(FEATURES, hidden, rngs=rngs)
        self.l2 = nnx.Linear(hidden, CLASSES, rngs=rngs)

    def __call__(self, x):
        return self.l2(jax.nn.relu(self.l1(x)))


@nnx.jit
def train_step(model, optimizer, x, label):
    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), label).mean()
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


@nnx.jit
def correct(model, x, label):
    return jnp.sum(jnp.argmax(model(x), axis=-1) == label)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=None,
                   help="where to make the tables, or find them from an earlier run with the same sizes and "
                        "seed (default: a temporary directory)")
    p.add_argument("--train-rows", type=int, default=8192)
    p.add_argument("--heldout-rows", type=int, default=2048)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=128,
                   help="rows per step (divisible by the number of devices)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-accuracy", type=float, default=0.85,
                   help="exit with status 1 when the final held-out accuracy is below this")
    a = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        root = a.dir or tmp
        os.makedirs(root, exist_ok=True)
        train_path, heldout_path = make_tables(root, a.train_rows, a.heldout_rows, a.seed)

        # One device: arrays on the host CPU device, sharing the loader's
        # buffers. Several: each device gets its rows of every batch.
        devices = jax.devices()
        sharding = NamedSharding(Mesh(np.array(devices), ("data",)), P("data")) if len(devices) > 1 else None
        train = flywheel.jax.Loader(train_path, batch_size=a.batch_size, seed=a.seed, sharding=sharding,
                                    drop_last=True)
        # The held-out pass keeps every row (a short last batch when the
        # sizes do not divide); with a sharding that tail must divide too.
        heldout = flywheel.jax.Loader(heldout_path, batch_size=a.batch_size, shuffle=False, sharding=sharding,
                                      drop_last=sharding is not None)
        print(f"{len(devices)} device(s); train {a.train_rows} rows ({len(train)} steps/epoch), "
              f"held-out {a.heldout_rows} rows", flush=True)

        model = MLP(a.hidden, nnx.Rngs(a.seed))
        optimizer = nnx.Optimizer(model, optax.adam(a.lr), wrt=nnx.Param)
        accuracy = 0.0
        for epoch in range(a.epochs):
            t0 = time.perf_counter()
            train.set_epoch(epoch)
            losses = [train_step(model, optimizer, b["x"], b["label"]) for b in train]
            heldout.set_epoch(epoch)
            hits = rows = 0
            for b in heldout:
                hits += int(correct(model, b["x"], b["label"]))
                rows += b["label"].shape[0]
            accuracy = hits / rows
            print(f"epoch {epoch + 1}: train loss {float(jnp.mean(jnp.stack(losses))):.4f}, "
                  f"held-out accuracy {accuracy:.4f} ({rows} rows, {time.perf_counter() - t0:.1f} s)", flush=True)
        train.close()
        heldout.close()

    print(f"final held-out accuracy {accuracy:.4f} (chance {1 / CLASSES:.2f}, threshold {a.min_accuracy})")
    if accuracy < a.min_accuracy:
        print(f"held-out accuracy {accuracy:.4f} is below --min-accuracy {a.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
