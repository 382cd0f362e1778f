"""flywheel.jax: batches as jax.Array with the numpy loader's values, sharing
the loader's buffers, sharded over devices, resumable (docs/jax.md)."""

import gc
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jax

import flywheel  # noqa: E402

# The build tree's package (PYTHONPATH=<build>/python) may not carry jax.py
# until the next build copies it; then use the source tree's.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SRC = os.path.join(_ROOT, "python", "flywheel")
if not os.path.exists(os.path.join(flywheel.__path__[0], "jax.py")) and _SRC not in flywheel.__path__:
    flywheel.__path__.append(_SRC)

import flywheel.jax  # noqa: E402

N = 1000
# The same fallback for child processes, which import flywheel afresh.
_CHILD_PREAMBLE = textwrap.dedent(f"""\
    import os, flywheel
    if not os.path.exists(os.path.join(flywheel.__path__[0], "jax.py")):
        flywheel.__path__.append({_SRC!r})
    """)


def _child_env(**extra):
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **extra)


def make_table(path, n=N):
    t = flywheel.Table.create(path, {"x": "int64", "i": "int32", "f": "float32", "emb": "float32[4]",
                                     "name": "string", "ids": "list<int32>", "opt": "float32?"})
    for lo, hi in ((0, n // 2), (n // 2, n)):
        x = np.arange(lo, hi)
        t.append({"x": x, "i": (x * 7).astype(np.int32), "f": x.astype(np.float32) / 4,
                  "emb": np.stack([x, -x, 2 * x, x % 5], axis=1).astype(np.float32),
                  "name": [f"row{v}" for v in x], "ids": [list(range(v % 3)) for v in x],
                  "opt": [None if v % 10 == 0 else float(v) for v in x]})
    return path


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return make_table(str(tmp_path_factory.mktemp("jax") / "t"))


FIXED = ["x", "i", "f", "emb"]


def test_batches_equal_the_numpy_loaders_for_the_same_seed(table):
    jl = flywheel.jax.Loader(table, batch_size=64, seed=5)
    nl = flywheel.Loader(table, batch_size=64, seed=5)
    assert len(jl) == len(nl) == (N + 63) // 64
    count = 0
    for jb, nb in zip(jl, nl):
        assert set(jb) == set(nb)
        for k in FIXED:
            assert isinstance(jb[k], jax.Array), k
            assert jb[k].shape == nb[k].shape
            np.testing.assert_array_equal(np.asarray(jb[k]), nb[k])
        assert jb["i"].dtype == np.int32 and jb["f"].dtype == np.float32 and jb["emb"].dtype == np.float32
        # Without jax_enable_x64 JAX narrows int64 to int32 (the values fit here).
        assert jb["x"].dtype == (np.int64 if jax.config.jax_enable_x64 else np.int32)
        # What JAX cannot hold is passed through as the numpy loader gives it.
        assert jb["name"] == nb["name"]
        assert isinstance(jb["ids"], flywheel.ListArray)
        np.testing.assert_array_equal(jb["ids"].offsets, nb["ids"].offsets)
        np.testing.assert_array_equal(jb["ids"].values, nb["ids"].values)
        assert isinstance(jb["opt"], np.ma.MaskedArray)  # every batch of 64 has a null here
        np.testing.assert_array_equal(jb["opt"].mask, nb["opt"].mask)
        count += 1
    assert count == len(jl)
    assert jl.next() is not None  # the next epoch starts, as with flywheel.Loader


def test_columns_leaves_out_what_jax_cannot_hold(table):
    jl = flywheel.jax.Loader(table, batch_size=100, seed=1, columns=["i", "emb"])
    batches = list(jl)
    assert all(set(b) == {"i", "emb"} and all(isinstance(v, jax.Array) for v in b.values()) for b in batches)
    # A transform can fill nulls so that a nullable column arrives as a jax.Array.
    jl = flywheel.jax.Loader(table, batch_size=100, seed=1, columns=["x", "opt"],
                             transforms={"opt": lambda a: np.ma.filled(a, -1.0)})
    b = jl.next()
    assert isinstance(b["opt"], jax.Array)
    x, opt = np.asarray(b["x"]), np.asarray(b["opt"])
    np.testing.assert_array_equal(opt, np.where(x % 10 == 0, -1.0, x.astype(np.float32)))


def _recorder(columns):
    """A transform that records each batch's host buffer addresses."""
    seen = []

    def record(batch):
        seen.append({k: batch[k].ctypes.data for k in columns})
        return batch
    return seen, record


def test_fixed_width_32_bit_columns_share_the_loaders_buffer(table):
    seen, record = _recorder(["x", "i", "f", "emb"])
    jl = flywheel.jax.Loader(table, batch_size=64, seed=2, columns=["x", "i", "f", "emb"], transforms=[record])
    for n, jb in enumerate(jl, 1):
        host = seen[-1]
        for k in ("i", "f", "emb"):
            assert host[k] % 64 == 0  # the loader's buffers are 64-byte aligned ...
            assert jb[k].unsafe_buffer_pointer() == host[k], k  # ... so JAX uses them in place
        if not jax.config.jax_enable_x64:
            # int64 is narrowed to int32 without x64: a converted copy.
            assert jb["x"].unsafe_buffer_pointer() != host["x"]
    assert n == len(seen) == len(jl)


def test_to_jax_copies_only_what_xla_cannot_use_in_place():
    raw = np.zeros(4096 + 128, np.uint8)
    start = -raw.ctypes.data % 64
    aligned = raw[start:start + 4096].view(np.float32).reshape(64, 16)
    aligned[:] = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    off16 = raw[start + 16:start + 16 + 4096].view(np.float32).reshape(64, 16)
    off16[:] = aligned.copy()
    readonly = aligned.copy()
    readonly.flags.writeable = False
    out = flywheel.jax.to_jax({"a": aligned, "b": off16, "c": aligned[:, :8], "d": readonly, "s": ["x"]})
    assert out["a"].unsafe_buffer_pointer() == aligned.ctypes.data
    assert out["b"].unsafe_buffer_pointer() != off16.ctypes.data  # 16-byte aligned: XLA CPU needs 64
    assert out["s"] == ["x"]
    for k, want in (("a", aligned), ("b", off16), ("c", aligned[:, :8]), ("d", readonly)):
        np.testing.assert_array_equal(np.asarray(out[k]), want)
    # A device, per column: device_put, also in place on a CPU device.
    cpu = jax.local_devices(backend="cpu")[0]
    out = flywheel.jax.to_jax({"a": aligned, "b": off16}, {"a": cpu})
    assert out["a"].devices() == {cpu} and out["a"].unsafe_buffer_pointer() == aligned.ctypes.data
    np.testing.assert_array_equal(np.asarray(out["b"]), off16)


def test_arrays_stay_valid_after_later_batches_and_after_the_loader_is_gone(table):
    expected = [{k: nb[k].copy() for k in FIXED} for nb in flywheel.Loader(table, batch_size=50, seed=4)]
    # Control: a dropped batch's buffer is reused by later batches, so the
    # check below would see other rows if a jax.Array did not hold its buffer.
    jl = flywheel.jax.Loader(table, batch_size=50, seed=4, columns=["i"])
    first = jl.next()["i"].unsafe_buffer_pointer()
    reused = any(b["i"].unsafe_buffer_pointer() == first for b in jl)
    assert reused

    jl = flywheel.jax.Loader(table, batch_size=50, seed=4, columns=FIXED)
    held = [jl.next() for _ in range(3)]
    later = [b["i"].unsafe_buffer_pointer() for b in jl]  # the rest of the epoch
    later += [jl.next()["i"].unsafe_buffer_pointer() for _ in range(5)]  # and into the next
    assert not {b["i"].unsafe_buffer_pointer() for b in held} & set(later)
    jl.close()
    del jl
    gc.collect()
    for b, want in zip(held, expected):
        for k in FIXED:
            np.testing.assert_array_equal(np.asarray(b[k]), want[k])
    assert int(jax.numpy.sum(held[0]["i"])) == int(expected[0]["i"].sum())


def test_state_dict_after_k_batches_resumes_with_exactly_the_rest(table):
    full = [np.asarray(b["i"]) for b in flywheel.jax.Loader(table, batch_size=48, seed=9, columns=["i"])]
    jl = flywheel.jax.Loader(table, batch_size=48, seed=9, columns=["i"])
    k = 7
    for _ in range(k):
        jl.next()
    state = jl.state_dict()
    assert json.loads(json.dumps(state)) == state
    resumed = flywheel.jax.Loader(table, batch_size=48, seed=9, columns=["i"])
    resumed.load_state_dict(state)
    rest = [np.asarray(b["i"]) for b in resumed]
    assert len(rest) == len(full) - k
    for got, want in zip(rest, full[k:]):
        np.testing.assert_array_equal(got, want)
    # set_epoch passes through: epoch 2's order is the numpy loader's.
    resumed.set_epoch(2)
    mine = np.concatenate([np.asarray(b["i"]) for b in resumed])
    ref = np.concatenate([b["i"] for b in flywheel.Loader(table, batch_size=48, seed=9, epoch=2, columns=["i"])])
    np.testing.assert_array_equal(mine, ref)


def test_bad_arguments_are_refused(table):
    with pytest.raises(ValueError, match="format"):
        flywheel.jax.Loader(table, batch_size=8, format="torch")
    with pytest.raises(TypeError, match="sharding"):
        flywheel.jax.Loader(table, batch_size=8, sharding="data")


_SHARDING_CHILD = _CHILD_PREAMBLE + textwrap.dedent("""\
    import json, sys
    import jax, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import flywheel, flywheel.jax

    path = sys.argv[1]
    devices = jax.local_devices()
    assert len(devices) == 2, devices
    sharding = NamedSharding(Mesh(np.array(devices), ("data",)), P("data"))
    cols = ["i", "f", "emb"]
    seen = []
    record = lambda b: (seen.append({k: (b[k].ctypes.data, b[k].strides[0]) for k in cols}), b)[1]
    jl = flywheel.jax.Loader(path, batch_size=64, seed=3, columns=cols, sharding=sharding, transforms=[record])
    ref = flywheel.Loader(path, batch_size=64, seed=3, columns=cols, drop_last=True)
    out = {"batches": 0, "halves_ok": True, "devices_ok": True, "in_place": True}
    for jb, nb in zip(jl, ref):
        out["batches"] += 1
        for k in cols:
            arr = jb[k]
            assert arr.shape == nb[k].shape and arr.sharding == sharding
            shards = sorted(arr.addressable_shards, key=lambda s: s.index[0].start)
            addr, stride = seen[-1][k]
            for d, shard in enumerate(shards):
                half = nb[k][32 * d:32 * (d + 1)]
                out["halves_ok"] &= bool(np.array_equal(np.asarray(shard.data), half))
                out["devices_ok"] &= shard.device == devices[d] and shard.data.shape == half.shape
                out["in_place"] &= shard.data.unsafe_buffer_pointer() == addr + 32 * d * stride
    out["expected_batches"] = len(jl)
    try:
        flywheel.jax.Loader(path, batch_size=63, columns=cols, sharding=sharding).next()
        out["indivisible"] = "no error"
    except ValueError as e:
        out["indivisible"] = str(e)
    print(json.dumps(out))
    """)


def test_sharding_gives_each_device_its_half_of_the_batch(table, tmp_path):
    script = tmp_path / "shard.py"
    script.write_text(_SHARDING_CHILD)
    r = subprocess.run([sys.executable, str(script), table], capture_output=True, text=True, timeout=120,
                       env=_child_env(XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["batches"] == out["expected_batches"] == N // 64  # drop_last defaults to True with a sharding
    assert out["halves_ok"] and out["devices_ok"]
    # 32 rows of each column start 64-byte aligned, so no shard is a copy.
    assert out["in_place"]
    assert "divide evenly" in out["indivisible"] and "'i'" in out["indivisible"]


def test_training_example_learns_the_rule(tmp_path):
    example = os.path.join(_ROOT, "examples", "jax_train.py")
    code = _CHILD_PREAMBLE + f"import runpy, sys; sys.argv = [{example!r}] + sys.argv[1:]; " \
                             f"runpy.run_path({example!r}, run_name='__main__')"
    r = subprocess.run([sys.executable, "-c", code, "--dir", str(tmp_path), "--train-rows", "2048",
                        "--heldout-rows", "512", "--epochs", "3", "--min-accuracy", "0.6"],
                       capture_output=True, text=True, timeout=120, env=_child_env(JAX_PLATFORMS="cpu"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    per_epoch = [float(a) for a in re.findall(r"held-out accuracy ([0-9.]+) \(512 rows", r.stdout)]
    assert len(per_epoch) == 3
    final = float(re.search(r"final held-out accuracy ([0-9.]+)", r.stdout).group(1))
    assert final == per_epoch[-1] > 0.6  # chance is 0.25
