"""flywheel.Loader from Python: order, ranks, elastic resume, zero-copy,
mixtures, transforms, torch integration and errors (docs/loader.md)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import flywheel

N = 1000


def make_table(path, n=N, appends=4, start=0):
    t = flywheel.Table.create(path, {"x": "int64", "emb": "float32[4]", "name": "string"})
    per = n // appends
    for a in range(appends):
        lo, hi = start + a * per, start + (n if a == appends - 1 else (a + 1) * per)
        x = np.arange(lo, hi, dtype=np.int64)
        t.append({"x": x, "emb": np.repeat(x[:, None], 4, 1).astype(np.float32),
                  "name": [f"row{i}" for i in x]})
    return flywheel.Table.open(path)


@pytest.fixture
def table(tmp_path):
    return make_table(str(tmp_path / "t"))


def epoch_rows(loader):
    return [int(v) for b in loader for v in b["x"]]


def test_one_epoch_serves_every_row_once_with_consistent_columns(table):
    loader = flywheel.Loader(table.path, batch_size=64, seed=3)
    assert len(loader) == (N + 63) // 64
    seen = []
    for b in loader:
        assert b["x"].dtype == np.int64 and b["emb"].shape == (len(b["x"]), 4)
        np.testing.assert_array_equal(b["emb"][:, 0], b["x"].astype(np.float32))
        assert b["name"] == [f"row{v}" for v in b["x"]]
        seen.extend(int(v) for v in b["x"])
    assert sorted(seen) == list(range(N))
    assert seen != list(range(N))  # shuffled
    assert loader.next() is not None  # the next epoch starts


def test_order_is_deterministic_across_runs_and_thread_counts(table):
    ref = epoch_rows(flywheel.Loader(table.path, batch_size=50, seed=7, num_threads=1))
    for threads in (1, 2, 4):
        assert epoch_rows(flywheel.Loader(table.path, batch_size=50, seed=7, num_threads=threads)) == ref
    assert epoch_rows(flywheel.Loader(table.path, batch_size=50, seed=8)) != ref
    l2 = flywheel.Loader(table.path, batch_size=50, seed=7, epoch=1)
    assert sorted(epoch_rows(l2)) == list(range(N)) and epoch_rows(l2) != ref
    assert epoch_rows(flywheel.Loader(table.path, batch_size=50, shuffle=False)) == list(range(N))
    # no shuffle ignores the shuffle mode (regression: block mode without shuffle failed to open)
    assert epoch_rows(flywheel.Loader(table.path, batch_size=50, shuffle=False, shuffle_mode="block")) == list(range(N))


@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_row_once_per_epoch_across_ranks(table, world):
    per_rank = [epoch_rows(flywheel.Loader(table.path, batch_size=32, seed=1, rank=r, world_size=world))
                for r in range(world)]
    allrows = sorted(v for rows in per_rank for v in rows)
    assert allrows == list(range(N))
    # Global batch g is the rank-ordered concatenation of the ranks' batches.
    single = epoch_rows(flywheel.Loader(table.path, batch_size=32 * world, seed=1))
    merged = []
    for g in range((N + 32 * world - 1) // (32 * world)):
        for r in range(world):
            merged.extend(per_rank[r][g * 32:(g + 1) * 32])
    assert merged == single


@pytest.mark.parametrize("w1,b1,w2,b2", [(1, 32, 2, 32), (2, 32, 3, 32), (4, 32, 1, 32), (2, 32, 2, 48),
                                         (3, 16, 2, 48)])
def test_elastic_resume_is_exactly_the_epoch(table, w1, b1, w2, b2):
    before = []
    loaders = [flywheel.Loader(table.path, batch_size=b1, seed=5, rank=r, world_size=w1) for r in range(w1)]
    for _ in range(5):  # 5 steps on every rank
        for l in loaders:
            before.extend(int(v) for v in l.next()["x"])
    state = loaders[0].state_dict()
    assert all(l.state_dict() == state for l in loaders)
    assert state["consumed"] == 5 * b1 * w1
    json.dumps(state)  # JSON-able
    after = []
    for r in range(w2):
        l = flywheel.Loader(table.path, batch_size=b2, seed=5, rank=r, world_size=w2)
        l.load_state_dict(state)
        after.extend(epoch_rows(l))
    assert len(before) + len(after) == N
    assert sorted(before + after) == list(range(N))


def test_batches_are_zero_copy_writable_views_that_outlive_the_loader(table):
    loader = flywheel.Loader(table.path, batch_size=100, seed=0)
    b = loader.next()
    x = b["x"]
    assert x.base is not None and not x.flags.owndata  # a view over the loader's buffer
    assert x.flags.writeable
    expected = x.copy()
    del loader, b
    import gc
    gc.collect()
    np.testing.assert_array_equal(x, expected)  # the batch buffer stayed alive


def test_state_restores_the_exact_next_batch_and_rejects_other_tables_or_seeds(table, tmp_path):
    a = flywheel.Loader(table.path, batch_size=64, seed=2)
    for _ in range(3):
        a.next()
    s = a.state_dict()
    want = a.next()["x"].copy()
    b = flywheel.Loader(table.path, batch_size=64, seed=2)
    b.load_state_dict(s)
    np.testing.assert_array_equal(b.next()["x"], want)
    with pytest.raises(ValueError, match="seed"):
        flywheel.Loader(table.path, batch_size=64, seed=3).load_state_dict(s)
    other = make_table(str(tmp_path / "other"), n=500)
    with pytest.raises(ValueError):
        flywheel.Loader(other.path, batch_size=64, seed=2).load_state_dict(s)
    with pytest.raises(ValueError):
        b.load_state_dict({**s, "consumed": "many"})
    with pytest.raises(TypeError):
        b.load_state_dict("not a dict")


def test_versions_tags_and_deleted_rows(table):
    v_full = table.version
    table.delete(list(range(0, N, 2)))  # drop the even rows
    t = flywheel.Table.open(table.path)
    rows = epoch_rows(flywheel.Loader(t.path, batch_size=64, seed=0))
    assert sorted(rows) == list(range(1, N, 2))
    old = epoch_rows(flywheel.Loader(t.path, version=v_full, batch_size=64, seed=0))
    assert sorted(old) == list(range(N))
    t.tag("full", v_full)
    assert epoch_rows(flywheel.Loader(t.path, tag="full", batch_size=64, seed=0)) == old
    pinned = flywheel.Table.open(t.path, version=v_full)
    assert epoch_rows(flywheel.Loader(pinned, batch_size=64, seed=0)) == old


def test_mixture_proportions_and_exact_resume(tmp_path):
    a = make_table(str(tmp_path / "a"), n=2000, appends=2, start=0)
    b = make_table(str(tmp_path / "b"), n=2000, appends=2, start=100000)
    kw = dict(batch_size=100, seed=4, mixture_weights=[3, 1], samples_per_epoch=4000, return_indices=True)
    loader = flywheel.Loader([a, b], **kw)
    xs = []
    for _ in range(10):
        xs.extend(int(v) for v in loader.next()["x"])
    state = loader.state_dict()
    rest = epoch_rows(loader)
    frac_a = sum(v < 100000 for v in xs + rest) / len(xs + rest)
    # 4000 draws at p = 0.75: sd 0.0068; allow 5 sd.
    assert abs(frac_a - 0.75) < 0.035, frac_a
    resumed = flywheel.Loader([a, b], **kw)
    resumed.load_state_dict(state)
    assert epoch_rows(resumed) == rest
    assert "mixture" in state and len(state["tables"]) == 2


def test_transforms_run_on_batched_arrays_in_order(table):
    def scale(b):
        b["emb"] = b["emb"] / 2
        return b
    loader = flywheel.Loader(table.path, batch_size=10, seed=0, columns=["x", "emb"],
                             transforms=[scale, lambda b: {**b, "y": b["x"] + 1}])
    b = loader.next()
    assert set(b) == {"x", "emb", "y"}
    np.testing.assert_array_equal(b["y"], b["x"] + 1)
    np.testing.assert_allclose(b["emb"][:, 0], b["x"] / 2)
    per_column = flywheel.Loader(table.path, batch_size=10, seed=0, columns=["x"], transforms={"x": np.negative})
    assert (per_column.next()["x"] <= 0).all()
    with pytest.raises(KeyError, match="nope"):
        flywheel.Loader(table.path, batch_size=10, columns=["x"], transforms={"nope": abs}).next()


def test_bad_arguments_raise_clear_errors(table, tmp_path):
    with pytest.raises((KeyError, ValueError), match="nope"):
        flywheel.Loader(table.path, batch_size=8, columns=["x", "nope"])
    with pytest.raises(FileNotFoundError):
        flywheel.Loader(str(tmp_path / "missing"), batch_size=8)
    with pytest.raises(FileNotFoundError):
        flywheel.Loader(table.path, version=99, batch_size=8)
    with pytest.raises(ValueError, match="batch_size"):
        flywheel.Loader(table.path, batch_size=0)
    with pytest.raises(ValueError, match="rank"):
        flywheel.Loader(table.path, batch_size=8, rank=2, world_size=2)
    with pytest.raises(ValueError, match="format"):
        flywheel.Loader(table.path, batch_size=8, format="tf")
    with pytest.raises(ValueError, match="shuffle"):
        flywheel.Loader(table.path, batch_size=8, shuffle_mode="sideways")


def test_block_shuffle_is_a_permutation_and_deterministic(table):
    kw = dict(batch_size=64, seed=9, shuffle_mode="block", block_rows=50, window_blocks=4)
    rows = epoch_rows(flywheel.Loader(table.path, **kw))
    assert sorted(rows) == list(range(N)) and rows != list(range(N))
    assert epoch_rows(flywheel.Loader(table.path, num_threads=1, **kw)) == rows


def test_compressed_table_reads_the_same_with_and_without_io_uring(tmp_path):
    t = flywheel.Table.create(str(tmp_path / "z"), {"x": "int64", "emb": "float32[4]"}, codec="zstd")
    x = np.arange(5000, dtype=np.int64)
    t.append({"x": x, "emb": np.repeat(x[:, None], 4, 1).astype(np.float32)})
    runs = {}
    for uring in (True, False):
        l = flywheel.Loader(t.path, batch_size=128, seed=4, use_io_uring=uring)
        runs[uring] = np.concatenate([b["x"] for b in l])
        s = l.stats()
        assert s["pages_fetched"] > 0
        if uring and not s["uring_unavailable"]:
            assert s["uring_pages"] > 0
        if not uring:
            assert s["uring_pages"] == 0
    np.testing.assert_array_equal(runs[True], runs[False])
    assert sorted(runs[True]) == list(range(5000))


def test_stats_count_what_was_handed_out(table):
    loader = flywheel.Loader(table.path, batch_size=100, seed=0, columns=["x", "emb"])
    n = sum(len(b["x"]) for b in loader)
    s = loader.stats()
    assert s["rows"] == n == N and s["batches"] == 10
    assert s["bytes"] == N * (8 + 16)
    assert s["rows_per_second"] > 0
    for k in ("io_seconds", "decode_seconds", "assemble_seconds", "consumer_wait_seconds"):
        assert s[k] >= 0
    assert s["raw_read_bytes_per_second"] > 0 and s["fraction_of_raw_read"] > 0
    text = flywheel.metrics_text()
    line = [l for l in text.splitlines() if l.startswith("flywheel_loader_rows_total") and table.path in l]
    assert line and float(line[0].split()[-1]) >= N


torch = pytest.importorskip("torch")


def test_torch_format_and_dataloader(table):
    from flywheel.torch import IterableDataset
    loader = flywheel.Loader(table.path, batch_size=64, seed=0, columns=["x", "emb"], format="torch")
    b = loader.next()
    assert isinstance(b["x"], torch.Tensor) and b["emb"].shape == (64, 4)
    ds = IterableDataset(table.path, batch_size=64, seed=0, columns=["x", "emb"], rank=0, world_size=1)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    rows = [int(v) for b in dl for v in b["x"]]
    assert sorted(rows) == list(range(N))
    assert rows == epoch_rows(flywheel.Loader(table.path, batch_size=64, seed=0, columns=["x"]))
    # State before the loader opens is applied when it opens.
    ds2 = IterableDataset(table.path, batch_size=64, seed=0, columns=["x"], rank=0, world_size=1)
    ds2.load_state_dict({**ds.state_dict(), "epoch": 0, "consumed": 640})
    assert [int(v) for b in ds2 for v in b["x"]] == rows[640:]
    bad = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    with pytest.raises(ValueError, match="num_workers"):
        next(iter(bad))


def test_two_process_torch_distributed_gloo_run_covers_the_table_once(table, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, sys
        import torch, torch.distributed as dist
        from flywheel.torch import IterableDataset
        dist.init_process_group("gloo", init_method="env://")
        ds = IterableDataset({table.path!r}, batch_size=32, seed=11, columns=["x"])
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
        mine = torch.cat([b["x"] for b in dl])
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
        dist.all_gather(sizes, torch.tensor([len(mine)]))
        n = int(max(s.item() for s in sizes))
        padded = torch.full((n,), -1, dtype=torch.int64); padded[:len(mine)] = mine
        out = [torch.zeros(n, dtype=torch.int64) for _ in range(dist.get_world_size())]
        dist.all_gather(out, padded)
        if dist.get_rank() == 0:
            allrows = sorted(int(v) for o in out for v in o if v >= 0)
            print(json.dumps({{"rows": len(allrows), "ok": allrows == list(range({N})),
                               "next": [ds.state_dict()["epoch"], ds.state_dict()["consumed"]]}}))
        dist.destroy_process_group()
    """))
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   GLOO_SOCKET_IFNAME="lo")
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    result = json.loads(outs[0][0].strip().splitlines()[-1])
    assert result == {"rows": N, "ok": True, "next": [1, 0]}  # at the start of epoch 1


def test_training_example_resumes_model_and_loader(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cmd = [sys.executable, os.path.join(root, "examples", "train_loader.py"), "--dir", str(tmp_path),
           "--rows", "2000", "--batch-size", "100", "--epochs", "2", "--checkpoint-every", "7"]
    first = subprocess.run(cmd + ["--stop-after", "25"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    stopped = json.loads(first.stdout.strip().splitlines()[-1])
    assert stopped["stopped_at_step"] == 25
    assert (stopped["loader"]["epoch"], stopped["loader"]["consumed"]) == (1, 500)
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resumed from" in second.stdout and "step 25, epoch 1, sample 500" in second.stdout
    done = json.loads(second.stdout.strip().splitlines()[-1])
    assert done["done"] and done["step"] == 40  # 2 epochs x 20 batches, none repeated or skipped
    assert "accuracy" in second.stdout


# ---------------------------------------------------------------- transforms

def _jpeg(color, size=(48, 40)):
    import io
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


@pytest.fixture
def image_table(tmp_path):
    pytest.importorskip("PIL")
    colors = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]
    n = 30
    jpegs = [_jpeg(colors[i % 3]) for i in range(n)]
    jpegs[7] = b"definitely not a jpeg"
    jpegs[22] = jpegs[22][: len(jpegs[22]) // 2]
    t = flywheel.Table.create(str(tmp_path / "img"), {"jpeg": "binary", "label": "int64"})
    t.append({"jpeg": jpegs, "label": np.arange(n) % 3})
    return t.path, colors


def test_decode_image_yields_decoded_batches_deterministically(image_table):
    from flywheel.transforms import DecodeImage
    path, colors = image_table
    kw = dict(batch_size=8, seed=1, on_error="skip", return_indices=True,
              transforms=[DecodeImage("jpeg", 16, 24, crop="center", flip=0.0)])
    loader = flywheel.Loader(path, **kw)
    assert loader.schema["jpeg"] == "uint8[16,24,3]"
    rows, pixels = [], []
    for b in loader:
        assert b["jpeg"].dtype == np.uint8 and b["jpeg"].shape == (len(b["label"]), 16, 24, 3)
        for img, label, idx in zip(b["jpeg"], b["label"], b["__index__"]):
            assert np.abs(img.reshape(-1, 3).mean(0) - colors[label]).max() < 6, (idx, img.reshape(-1, 3).mean(0))
        rows.extend(int(i) for i in b["__index__"])
        pixels.append(b["jpeg"].copy())
    assert sorted(rows) == [i for i in range(30) if i not in (7, 22)]
    assert loader.stats()["skipped_rows"] == 2
    again = flywheel.Loader(path, num_threads=1, **kw)
    np.testing.assert_array_equal(np.concatenate([b["jpeg"] for b in again]), np.concatenate(pixels))


def test_decode_image_random_crops_float_chw_and_errors(image_table):
    from flywheel.transforms import DecodeImage
    path, _ = image_table
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    loader = flywheel.Loader(path, batch_size=4, seed=0, on_error="skip",
                             transforms=[DecodeImage("jpeg", 8, dtype="float32", layout="chw", mean=mean, std=std)])
    b = loader.next()
    assert b["jpeg"].dtype == np.float32 and b["jpeg"].shape == (len(b["label"]), 3, 8, 8)
    assert b["jpeg"].min() >= (0 - 0.5) / 0.25 - 1e-5 and b["jpeg"].max() <= (1 - 0.5) / 0.25 + 1e-5
    failing = flywheel.Loader(path, batch_size=30, seed=0, transforms=[DecodeImage("jpeg", 8)])
    with pytest.raises(Exception, match=r"row (7|22) column 'jpeg'"):
        failing.next()
    with pytest.raises(ValueError, match="binary"):
        flywheel.Loader(path, batch_size=4, transforms=[DecodeImage("label", 8)])
    with pytest.raises(ValueError, match="crop"):
        flywheel.Loader(path, batch_size=4, transforms=[DecodeImage("jpeg", 8, crop="diagonal")])
    with pytest.raises(ValueError, match="on_error"):
        flywheel.Loader(path, batch_size=4, on_error="ignore")


def test_decode_image_fast_paths_give_libjpegs_pixels(tmp_path):
    # flywheel's Huffman decoder and entropy indexes (later epochs) against
    # libjpeg's decoder without indexes: the same bytes, epoch by epoch.
    pytest.importorskip("PIL")
    import io
    from PIL import Image
    from flywheel.transforms import DecodeImage
    rng = np.random.default_rng(4)
    jpegs = []
    for i in range(24):
        w, h = int(rng.integers(90, 200)), int(rng.integers(90, 200))
        yy, xx = np.mgrid[0:h, 0:w]
        px = np.stack([xx * 255 // w, yy * 255 // h, (xx + yy + 37 * i) % 256], -1)
        px = np.clip(px + rng.integers(-20, 20, px.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(px).save(buf, format="JPEG", quality=90)
        jpegs.append(buf.getvalue())
    t = flywheel.Table.create(str(tmp_path / "img"), {"jpeg": "binary"})
    t.append({"jpeg": jpegs})
    fast = flywheel.Loader(t.path, batch_size=8, seed=2, transforms=[DecodeImage("jpeg", 32)])
    ref = flywheel.Loader(t.path, batch_size=8, seed=2,
                          transforms=[DecodeImage("jpeg", 32, fast_huffman=False, index_cache_mb=0)])
    for epoch in range(3):
        a = np.concatenate([b["jpeg"] for b in fast])
        b = np.concatenate([b["jpeg"] for b in ref])
        assert a.shape == (24, 32, 32, 3)
        np.testing.assert_array_equal(a, b, err_msg=f"epoch {epoch}")
    assert fast.stats()["indexed_images"] >= 12  # epoch 3, bar whole-image crops
    assert ref.stats()["indexed_images"] == 0


def test_pack_tokens_keeps_every_token_once(tmp_path):
    from flywheel.transforms import PackTokens, pack_tokens
    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 1000, rng.integers(1, 40)).astype(np.int32) for _ in range(300)]
    t = flywheel.Table.create(str(tmp_path / "tok"), {"tokens": "list<int32>"})
    t.append({"tokens": flywheel.ListArray(np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64),
                                           np.concatenate(docs))})
    pack = PackTokens("tokens", seq_len=16, eos_token=0)
    loader = flywheel.Loader(t.path, batch_size=32, seed=2, return_indices=True, transforms=[pack])
    got, want = [], []
    for b in loader:
        assert b["tokens"].shape[1] == 16 and b["tokens"].dtype == np.int32
        got.append(b["tokens"][b["mask"] == 1])
        # position ids restart at each document: position 0 exactly where a segment starts
        starts = np.zeros_like(b["mask"], dtype=bool)
        starts[:, 0] = b["mask"][:, 0] == 1
        starts[:, 1:] = (b["segment_ids"][:, 1:] != b["segment_ids"][:, :-1]) & (b["mask"][:, 1:] == 1)
        assert ((b["positions"] == 0) == starts | (b["mask"] == 0)).all()
        assert len(b["document_rows"]) == len(b["tokens"])
    order = epoch_rows_of(t.path)
    for i in order:
        want.append(np.append(docs[i], 0))
    np.testing.assert_array_equal(np.concatenate(got), np.concatenate(want))
    direct = pack_tokens([0, 3, 5], np.array([1, 2, 3, 4, 5], np.int32), 4)
    np.testing.assert_array_equal(direct["tokens"], [[1, 2, 3, 4], [5, 0, 0, 0]])
    np.testing.assert_array_equal(direct["segment_ids"], [[1, 1, 1, 2], [1, 0, 0, 0]])
    np.testing.assert_array_equal(direct["positions"], [[0, 1, 2, 0], [0, 0, 0, 0]])


def epoch_rows_of(path):
    return [int(i) for b in flywheel.Loader(path, batch_size=32, seed=2, return_indices=True, columns=["tokens"])
            for i in b["__index__"]]


def test_table_files_are_the_versions_data_files_from_its_manifest(tmp_path):
    # The loader's raw-read baseline reads the table's data files as the
    # manifest lists them (no directory walk): two appends, two shard files.
    from flywheel.loader import _table_files
    t = flywheel.Table.create(str(tmp_path / "t"), {"x": "int64"})
    t.append({"x": np.arange(10)})
    t.append({"x": np.arange(5)})
    (tmp_path / "t" / "data" / "stray.shard").write_bytes(b"not listed")
    files = _table_files([str(tmp_path / "t")])
    assert len(files) == 2 and all(os.path.isfile(f) and f.endswith(".shard") for f in files), files
    assert str(tmp_path / "t" / "data" / "stray.shard") not in files
