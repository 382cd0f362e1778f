#!/usr/bin/env python3
"""The PIL peer of bench/transforms_bench.cc's JPEG figure.

Measures, in one process on one thread, what torchvision's training
transform RandomResizedCrop(64) + RandomHorizontalFlip() + a numpy uint8 HWC
array does with PIL (Pillow, from the locked environment), on the same JPEG bytes as the
C++ pipeline:

    img = Image.open(BytesIO(jpeg)).convert("RGB")       # full decode
    i, j, h, w = <torchvision RandomResizedCrop.get_params, same algorithm>
    img = img.crop((j, i, j + w, i + h)).resize((64, 64), Image.BILINEAR)
    if random() < 0.5: img = img.transpose(Image.FLIP_LEFT_RIGHT)
    out[k] = np.asarray(img)                            # into a batch slot

("draft" variant: the same after img.draft("RGB", crop-sized) — PIL's
scaled JPEG decode, which torchvision does not use; reported for fairness.)

Input: --corpus DIR of *.jpg files (transforms_bench writes its corpus there),
or, without --corpus, the synthetic corpus generated here with PIL/numpy by
the same pixel formula as jpeg_testing.h's SyntheticImage and encoded at
quality 90 with 4:2:0 chroma (PIL and TurboJPEG both use libjpeg-turbo, so the
files have comparable sizes; the C++ bench passes its own files anyway).

Prints one JSON object: {"images": n, "bytes": total, "pil": {"images_per_s": ...,
"samples": [...]}, "pil_draft": {...}}.
"""

import argparse
import io
import json
import math
import os
import random
import sys
import time

import numpy as np
from PIL import Image

MASK64 = (1 << 64) - 1


def mix64(x):
    """SplitMix64 finalizer (flywheel/base/rng.h Mix64), on numpy uint64."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def synthetic_size(i):
    w = 224 + int(mix64(np.uint64(2 * i)) % np.uint64(65))
    h = 224 + int(mix64(np.uint64(2 * i + 1)) % np.uint64(65))
    return w, h


def synthetic_image(i, w, h):
    """jpeg_testing.h SyntheticImage(i, w, h): uint8 [h, w, 3]."""
    y, x, c = np.meshgrid(np.arange(h, dtype=np.uint64), np.arange(w, dtype=np.uint64),
                          np.arange(3, dtype=np.uint64), indexing="ij")
    iu = np.uint64(i)
    v = (x * np.uint64(1 + i % 3) + y * np.uint64(2 + i % 5) + np.uint64(85) * c
         + np.uint64(37 * i)) % np.uint64(256)
    rect = (x >= w // 4) & (x < w // 2) & (y >= h // 3) & (y < 2 * h // 3)
    v = np.where(rect, (np.uint64(60) * c + np.uint64(50 * i)) % np.uint64(256), v)
    flat = (y * np.uint64(w) + x) * np.uint64(3) + c
    with np.errstate(over="ignore"):
        v = v + mix64((iu << np.uint64(32)) + flat) % np.uint64(24)
    return np.minimum(v, 255).astype(np.uint8)


def synthetic_corpus(n):
    out = []
    for i in range(n):
        w, h = synthetic_size(i)
        buf = io.BytesIO()
        Image.fromarray(synthetic_image(i, w, h), "RGB").save(buf, "JPEG", quality=90, subsampling=2)
        out.append(buf.getvalue())
    return out


def rrc_params(rng, width, height, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision.transforms.RandomResizedCrop.get_params."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            i = rng.randint(0, height - h)
            j = rng.randint(0, width - w)
            return i, j, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def run(corpus, size, draft, seconds, batch):
    rng = random.Random(0)
    out = np.empty((batch, size, size, 3), np.uint8)
    done = 0
    start = time.perf_counter()
    while True:
        for k, jpeg in enumerate(corpus):
            img = Image.open(io.BytesIO(jpeg))
            i, j, h, w = rrc_params(rng, img.width, img.height)
            if draft:
                # Largest libjpeg scale that keeps the crop >= size pixels.
                full = (img.width, img.height)
                img.draft("RGB", (max(1, img.width * size // w), max(1, img.height * size // h)))
                sx, sy = img.width / full[0], img.height / full[1]
                box = (j * sx, i * sy, (j + w) * sx, (i + h) * sy)
                img = img.convert("RGB").resize((size, size), Image.BILINEAR, box=box)
            else:
                img = img.convert("RGB").crop((j, i, j + w, i + h)).resize((size, size), Image.BILINEAR)
            if rng.random() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
            out[(done + k) % batch] = np.asarray(img)
        done += len(corpus)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", help="directory of .jpg files (default: generate --images)")
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    if args.corpus:
        names = sorted(f for f in os.listdir(args.corpus) if f.endswith(".jpg"))
        corpus = [open(os.path.join(args.corpus, f), "rb").read() for f in names]
    else:
        corpus = synthetic_corpus(args.images)
    if not corpus:
        sys.exit("jpeg_pil_baseline.py: empty corpus")
    result = {"images": len(corpus), "bytes": sum(len(b) for b in corpus),
              "pil_version": Image.__version__}
    for name, draft in (("pil", False), ("pil_draft", True)):
        samples = [run(corpus, args.size, draft, args.seconds, args.batch) for _ in range(args.repeats)]
        result[name] = {"images_per_s": max(samples), "samples": samples}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
