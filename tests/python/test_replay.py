"""flywheel.replay: tables, writers and samplers in-process (docs/replay.md, "Python")."""

import _thread
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import flywheel
from flywheel import replay

TIMEOUT = 60  # seconds; bounds every wait so a bug fails instead of hanging


def _wait_for(pred, what, timeout=TIMEOUT):
    """Polls `pred` (a state only observable by polling, like a caller being
    blocked) until true; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.002)


def _run(threads):
    for th in threads:
        th.start()
    for th in threads:
        th.join(TIMEOUT)
        assert not th.is_alive(), "thread did not finish"


def _fill(table, values, column="x", **writer_args):
    """One single-step item per value, in order; returns the keys."""
    keys = []
    with replay.Writer([table], **writer_args) as w:
        for v in values:
            w.append({column: v})
            keys.append(w.create_item(table.name, 1.0, {column: 1}, timeout=TIMEOUT))
    return keys


# --------------------------------------------------------------------------- configuration


def test_rate_limiter_presets_match_docs():
    assert replay.RateLimiter.min_size(3).min_size_to_sample == 3
    assert replay.RateLimiter.min_size(3).max_diff == sys.float_info.max
    r = replay.RateLimiter.sample_to_insert_ratio(2.0, 10, 4.0)
    assert (r.samples_per_insert, r.min_size_to_sample, r.min_diff, r.max_diff) == (2.0, 10, 16.0, 24.0)
    q = replay.RateLimiter.queue(5)
    assert (q.samples_per_insert, q.min_size_to_sample, q.min_diff, q.max_diff) == (1.0, 1, 0.0, 5.0)
    assert replay.RateLimiter(1.0, 1, 0.0, 5.0) == q
    assert repr(q) == "RateLimiter.queue(5)"


@pytest.mark.parametrize("make, field", [
    (lambda: replay.RateLimiter.queue(0), "max_diff"),
    (lambda: replay.RateLimiter.min_size(0), "min_size_to_sample"),
    (lambda: replay.RateLimiter(0.0, 1, 0.0, 10.0), "samples_per_insert"),
    (lambda: replay.RateLimiter(1.0, 1, 5.0, 1.0), "min_diff"),
    (lambda: replay.RateLimiter.sample_to_insert_ratio(1.0, 10, 0.5), "max_diff"),
])
def test_rate_limiter_rejects_bad_or_deadlocking_limits(make, field):
    with pytest.raises(ValueError, match=field):
        make()


def test_selectors_and_table_options():
    with pytest.raises(ValueError, match="priority_exponent"):
        replay.Prioritized(-1)
    assert replay.Prioritized(0.6) == replay.Prioritized(0.6)
    t = replay.Table("t", sampler=replay.Prioritized(0.6), remover=replay.MinHeap(), max_size=7,
                     max_times_sampled=3, rate_limiter=replay.RateLimiter.min_size(2))
    info = t.info()
    assert info["sampler"] == "Prioritized(priority_exponent=0.6)"
    assert info["remover"] == "MinHeap"
    assert (info["max_size"], info["max_times_sampled"], info["size"]) == (7, 3, 0)
    assert info["rate_limiter"] == (1.0, 2, -sys.float_info.max, sys.float_info.max)
    for key in ("inserts", "deletes", "samples", "blocked_inserts", "blocked_samples", "num_deleted"):
        assert info[key] == 0
    with pytest.raises(ValueError, match="max_size"):
        replay.Table("t", max_size=0)
    with pytest.raises(ValueError, match="name"):
        replay.Table("")
    with pytest.raises(TypeError, match="sampler"):
        replay.Table("t", sampler="uniform")


def test_signature_must_be_fixed_width_and_parse():
    with pytest.raises(ValueError, match="column 'name'"):
        replay.Table("t", signature={"name": "string"})
    with pytest.raises(ValueError, match="column 'x'"):
        replay.Table("t", signature={"x": "float33"})
    t = replay.Table("t", signature={"obs": "float32[ 4 ]", "a": "int32"})
    assert t.signature == {"obs": "float32[4]", "a": "int32"}


# --------------------------------------------------------------------------- selectors and limits


def test_queue_gives_each_item_exactly_once_in_fifo_order():
    t = replay.Table.queue("q", 100)
    keys = _fill(t, np.arange(50, dtype=np.int32), chunk_length=4)
    sampler = replay.Sampler(t)
    got, got_keys = [], []
    for _ in range(10):
        s = sampler.sample(5, timeout=TIMEOUT)
        assert s.data["x"].shape == (5, 1) and s.data["x"].dtype == np.int32
        got.extend(s.data["x"][:, 0].tolist())
        got_keys.extend(s.keys.tolist())
        np.testing.assert_array_equal(s.times_sampled, 1)
        np.testing.assert_array_equal(s.probabilities, 1.0)
    assert got == list(range(50))
    assert got_keys == keys
    assert len(t) == 0
    with pytest.raises(TimeoutError):
        sampler.sample(timeout=0)


def test_queue_insert_waits_when_full():
    t = replay.Table.queue("q", 2)
    w = replay.Writer([t])
    for i in range(2):
        w.append({"x": i})
        w.create_item("q", 1.0, {"x": 1}, timeout=0)
    w.append({"x": 2})
    with pytest.raises(TimeoutError, match="insert into table 'q' timed out") as e:
        w.create_item("q", 1.0, {"x": 1}, timeout=0.05)
    assert "insert: blocked" in str(e.value)
    replay.Sampler(t).sample(timeout=0)
    w.create_item("q", 1.0, {"x": 1}, timeout=0)  # the retried step goes in once there is room
    assert [replay.Sampler(t).sample(timeout=0).data["x"][0, 0] for _ in range(2)] == [1, 2]


def test_prioritized_sampling_follows_priorities():
    priorities = np.array([1.0, 2.0, 3.0, 4.0])
    t = replay.Table("p", sampler=replay.Prioritized(1.0, seed=7))
    w = replay.Writer([t])
    key_of = {}
    for i, p in enumerate(priorities):
        w.append({"i": i})
        key_of[w.create_item("p", p, {"i": 1})] = i
    n = 4000
    s = replay.Sampler(t).sample(n, timeout=TIMEOUT)
    idx = s.data["i"][:, 0]
    assert [key_of[k] for k in s.keys.tolist()] == idx.tolist()
    # Each sample reports the probability it was drawn with: p_i / sum p.
    np.testing.assert_allclose(s.probabilities, priorities[idx] / priorities.sum(), rtol=1e-12)
    np.testing.assert_array_equal(s.priorities, priorities[idx])
    first = {i: s.probabilities[np.flatnonzero(idx == i)[0]] for i in range(4)}
    assert sum(first.values()) == pytest.approx(1.0)
    freq = np.bincount(idx, minlength=4) / n
    np.testing.assert_allclose(freq, priorities / priorities.sum(), atol=0.04)  # > 5 sigma
    assert freq[3] > freq[2] > freq[1] > freq[0]

    # After an update the highest-priority item is drawn (almost) always.
    top = [k for k, i in key_of.items() if i == 0][0]
    assert t.mutate_priorities({top: 1000.0}) == 0
    s = replay.Sampler(t).sample(200, timeout=TIMEOUT)
    assert (s.data["i"][:, 0] == 0).mean() > 0.9
    assert s.probabilities[s.data["i"][:, 0] == 0][0] == pytest.approx(1000 / 1009)


def test_same_seed_same_samples():
    def draws():
        t = replay.Table("u", sampler=replay.Uniform(seed=3))
        _fill(t, range(20))
        return replay.Sampler(t).sample(50, timeout=TIMEOUT).data["x"][:, 0].tolist()

    assert draws() == draws()


def test_max_size_evicts_with_the_remover():
    t = replay.Table("t", sampler=replay.Fifo(), remover=replay.Fifo(), max_size=5)
    _fill(t, range(8))
    info = t.info()
    assert (len(t), info["num_evicted"], info["num_deleted"], info["inserts"], info["deletes"]) == (5, 3, 3, 8, 3)
    # Fifo sampler without max_times_sampled keeps returning the oldest survivor.
    assert replay.Sampler(t).sample(timeout=0).data["x"][0, 0] == 3

    t = replay.Table("t", sampler=replay.MinHeap(), remover=replay.MinHeap(), max_size=3)
    w = replay.Writer([t])
    for p in [5.0, 1.0, 9.0, 7.0, 3.0]:
        w.append({"p": p})
        w.create_item("t", p, {"p": 1})
    # 7 evicts 1, then 3 evicts 5 (the remover picks before the new item goes in).
    assert sorted(replay.Sampler(t).sample(3, timeout=0).data["p"][:, 0].tolist()) == [3.0, 3.0, 3.0]
    assert t.info()["num_evicted"] == 2
    t.mutate_priorities({int(replay.Sampler(t).sample(timeout=0).keys[0]): 100.0})
    assert replay.Sampler(t).sample(timeout=0).data["p"][0, 0] == 7.0


def test_max_times_sampled_deletes_items():
    t = replay.Table("t", max_times_sampled=2)
    keys = _fill(t, range(3))
    s = replay.Sampler(t)
    seen = {}
    for _ in range(6):
        b = s.sample(timeout=TIMEOUT)
        seen.setdefault(int(b.keys[0]), []).append(int(b.times_sampled[0]))
    assert sorted(seen) == sorted(keys)
    assert all(v == [1, 2] for v in seen.values())
    assert len(t) == 0 and t.info()["num_deleted"] == 3
    with pytest.raises(TimeoutError):
        s.sample(timeout=0)


def test_mutate_priorities_counts_unknown_keys_and_deletes():
    t = replay.Table("t", sampler=replay.MaxHeap())
    keys = _fill(t, range(4))
    assert t.mutate_priorities({keys[2]: 10.0, 12345: 1.0}, deletes=[keys[0], 999]) == 2
    assert len(t) == 3
    s = replay.Sampler(t).sample(timeout=0)
    assert s.keys[0] == keys[2] and s.priorities[0] == 10.0
    with pytest.raises(ValueError, match="priority"):
        t.mutate_priorities({keys[1]: -1.0})
    t.mutate_priorities(deletes=np.array(keys[1:], dtype=np.uint64))
    assert len(t) == 0


def test_reset_empties_table_and_limiter():
    t = replay.Table("t")
    _fill(t, range(4))
    replay.Sampler(t).sample(2, timeout=0)
    t.reset()
    info = t.info()
    assert (len(t), info["inserts"], info["samples"]) == (0, 0, 0)


# --------------------------------------------------------------------------- writer and data


def test_sampled_arrays_hold_n_step_windows_across_chunks():
    t = replay.Table("w", sampler=replay.Fifo(), max_times_sampled=1)
    w = replay.Writer([t], chunk_length=3, codec="zstd")
    n_steps, window = 11, 4
    for i in range(n_steps):
        w.append({"obs": np.full((2, 3), i, np.float32) + np.arange(6, dtype=np.float32).reshape(2, 3),
                  "act": np.int16(i), "done": i == n_steps - 1})
        if i + 1 >= window:
            w.create_item("w", 1.0, {"obs": window, "act": window, "done": 1})
    n_items = n_steps - window + 1
    s = replay.Sampler(t).sample(n_items, timeout=0)
    assert s.data["obs"].shape == (n_items, window, 2, 3) and s.data["obs"].dtype == np.float32
    assert s.data["act"].shape == (n_items, window) and s.data["act"].dtype == np.int16
    assert s.data["done"].shape == (n_items, 1) and s.data["done"].dtype == np.bool_
    for j in range(n_items):
        steps = np.arange(j, j + window)
        np.testing.assert_array_equal(s.data["act"][j], steps)
        np.testing.assert_array_equal(s.data["obs"][j, :, 0, 0], steps)
        np.testing.assert_array_equal(s.data["obs"][j, :, 1, 2], steps + 5)
        assert s.data["done"][j, 0] == (j == n_items - 1)
    assert s.data["obs"].flags.writeable


def test_items_of_unequal_length_in_one_batch_raise_value_error():
    t = replay.Table("t", sampler=replay.Fifo(), max_times_sampled=1)
    w = replay.Writer([t])
    for i in range(3):
        w.append({"obs": np.float32(i), "a": i})
    w.create_item("t", 1.0, {"obs": 2, "a": 1})
    w.create_item("t", 1.0, {"obs": 3, "a": 1})
    with pytest.raises(ValueError, match="column 'obs'.*2 steps.*3") as e:
        replay.Sampler(t).sample(2, timeout=0)
    assert "batch_size=1" in str(e.value)


def test_writer_types_inferred_then_fixed():
    t = replay.Table("t", sampler=replay.Fifo())
    w = replay.Writer({"t": t})
    w.append({"i": 3, "f": 0.5, "b": True, "v": [1.0, 2.0], "h": np.float16(1)})
    assert w.column_types == {"i": "int64", "f": "float64", "b": "bool", "v": "float64[2]", "h": "float16"}
    w.append({"i": np.int32(4), "f": np.float32(1.5), "b": 0, "v": np.ones(2, np.float32), "h": np.float16(2)})
    with pytest.raises(TypeError, match="column 'i'"):
        w.append({"i": 2.5, "f": 1.0, "b": True, "v": [0.0, 0.0], "h": np.float16(0)})
    with pytest.raises(TypeError, match="column 'h'"):
        w.append({"i": 1, "f": 1.0, "b": True, "v": [0.0, 0.0], "h": np.float32(0)})  # not a safe cast
    with pytest.raises(ValueError, match="column 'v'.*shape"):
        w.append({"i": 1, "f": 1.0, "b": True, "v": [0.0, 0.0, 0.0], "h": np.float16(0)})
    with pytest.raises(ValueError, match="column 'b'"):
        w.append({"i": 1, "f": 1.0, "b": 2, "v": [0.0, 0.0], "h": np.float16(0)})
    with pytest.raises(ValueError, match="column 'h' is missing"):
        w.append({"i": 1, "f": 1.0, "b": True, "v": [0.0, 0.0]})
    with pytest.raises(ValueError, match="column 'z' is new"):
        w.append({"i": 1, "f": 1.0, "b": True, "v": [0.0, 0.0], "h": np.float16(0), "z": 1})
    with pytest.raises(TypeError, match="column 's'"):
        replay.Writer([t]).append({"s": "text"})
    key = w.create_item(t, 1.0, {"i": 2, "f": 2, "b": 2, "v": 2, "h": 2})
    s = replay.Sampler(t).sample(timeout=0)
    assert int(s.keys[0]) == key
    assert s.data["i"].dtype == np.int64 and s.data["i"][0].tolist() == [3, 4]
    assert s.data["f"][0].tolist() == [0.5, 1.5]
    assert s.data["b"][0].tolist() == [True, False]
    assert s.data["v"].shape == (1, 2, 2) and s.data["v"][0].tolist() == [[1.0, 2.0], [1.0, 1.0]]
    # Types stay fixed across episodes.
    w.end_episode()
    with pytest.raises(TypeError, match="column 'i'"):
        w.append({"i": 0.5})


def test_writer_uses_table_signature_types():
    t = replay.Table("t", signature={"obs": "float32[4]", "action": "int32"})
    w = replay.Writer([t])
    w.append({"obs": [1, 2, 3, 4], "action": 1})
    assert w.column_types == {"obs": "float32[4]", "action": "int32"}
    w.append({"obs": np.arange(4, dtype=np.float32), "action": np.int8(2)})
    with pytest.raises(ValueError, match="column 'obs'.*shape"):
        w.append({"obs": np.zeros(3, np.float32), "action": 1})
    with pytest.raises(TypeError, match="column 'obs'"):
        w.append({"obs": np.zeros(4, np.float64), "action": 1})
    with pytest.raises(ValueError, match="column 'action'.*out of range"):
        w.append({"obs": np.zeros(4, np.float32), "action": 2**40})
    w.create_item("t", 1.0, {"obs": 2, "action": 2})
    s = replay.Sampler(t).sample(timeout=0)
    assert s.data["obs"].dtype == np.float32 and s.data["action"].dtype == np.int32
    np.testing.assert_array_equal(s.data["obs"][0], [[1, 2, 3, 4], [0, 1, 2, 3]])


def test_signature_mismatch_at_insert_names_the_column():
    sig = replay.Table("sig", signature={"obs": "float32[4]", "action": "int32"})
    plain = replay.Table("plain")
    w = replay.Writer([sig, plain])
    w.append({"obs": np.zeros(4, np.float32), "action": 1, "extra": 1.0})
    with pytest.raises(ValueError, match="column 'extra' is not in the table signature"):
        w.create_item("sig", 1.0, {"obs": 1, "action": 1, "extra": 1})
    with pytest.raises(ValueError, match="signature"):
        w.create_item("sig", 1.0, {"obs": 1})
    w.create_item("plain", 1.0, {"extra": 1})  # tables without a signature take anything
    assert len(sig) == 0 and len(plain) == 1

    other = replay.Table("other", signature={"obs": "float64[4]"})
    with pytest.raises(ValueError, match="column 'obs'.*float32\\[4\\].*float64\\[4\\]"):
        replay.Writer([sig, other])


def test_create_item_errors():
    t = replay.Table("t")
    w = replay.Writer([t], chunk_length=2, max_history=4)
    with pytest.raises(KeyError, match="no table 'nope'"):
        w.create_item("nope", 1.0, {"x": 1})
    with pytest.raises(KeyError, match="column 'x'"):
        w.create_item("t", 1.0, {"x": 1})
    for i in range(10):
        w.append({"x": i})
    with pytest.raises(ValueError, match="column 'x'"):
        w.create_item("t", 1.0, {"x": 11})
    with pytest.raises(IndexError, match="already dropped"):
        w.create_item("t", 1.0, {"x": 9})
    with pytest.raises(ValueError, match="priorit"):
        w.create_item("t", -1.0, {"x": 1})
    w.end_episode()
    with pytest.raises(KeyError, match="column 'x'"):
        w.create_item("t", 1.0, {"x": 1})
    with pytest.raises(ValueError, match="chunk_length"):
        replay.Writer([t], chunk_length=0)
    with pytest.raises(ValueError, match="codec"):
        replay.Writer([t], codec="gzip")
    with pytest.raises(KeyError, match="not one of this writer's tables"):
        w.create_item(replay.Table("t"), 1.0, {"x": 1})


# --------------------------------------------------------------------------- blocking, timeouts, threads


def test_sample_timeout_message_explains_the_limiter():
    t = replay.Table("slow", rate_limiter=replay.RateLimiter.min_size(5))
    _fill(t, range(2))
    start = time.monotonic()
    with pytest.raises(TimeoutError) as e:
        replay.Sampler(t).sample(timeout=0.25)
    assert time.monotonic() - start >= 0.25
    msg = str(e.value)
    assert "sample from table 'slow' timed out after 250ms" in msg
    assert "inserts - deletes = 2 < min_size_to_sample = 5; needs 3 more inserts" in msg

    # The same from a thread other than the main one (one C++ wait, not slices).
    errors = []

    def other():
        try:
            replay.Sampler(t).sample(timeout=0.1)
        except TimeoutError as err:
            errors.append(str(err))

    _run([threading.Thread(target=other)])
    assert len(errors) == 1 and "needs 3 more inserts" in errors[0]


def test_blocked_main_thread_call_logs_explanation_each_watchdog_period(capfd):
    t = replay.Table("wd", watchdog=0.1)
    with pytest.raises(TimeoutError):
        replay.Sampler(t).sample(timeout=0.45)
    err = capfd.readouterr().err
    assert 2 <= err.count("sample from table 'wd' blocked for") <= 4  # about every 0.1 s
    assert "needs 1 more insert" in err


def test_close_from_another_thread_releases_a_blocked_sample():
    t = replay.Table("t")
    closer = threading.Thread(target=lambda: (_wait_for(lambda: t.info()["blocked_samples"] == 1, "a blocked sample"),
                                              t.close()))
    closer.start()
    with pytest.raises(replay.Cancelled, match="closed"):
        replay.Sampler(t).sample(timeout=None)  # main thread: waits in slices
    closer.join(TIMEOUT)
    assert issubclass(replay.Cancelled, RuntimeError)
    with pytest.raises(replay.Cancelled):
        replay.Sampler(t).sample(timeout=0)


def test_close_releases_blocked_calls_in_other_threads():
    t = replay.Table.queue("q", 1)
    w = replay.Writer([t])
    w.append({"x": 0})
    w.create_item("q", 1.0, {"x": 1})
    other = replay.Table("empty")
    results = []

    def insert():
        try:
            w.create_item("q", 1.0, {"x": 1}, timeout=None)
        except replay.Cancelled as e:
            results.append(("insert", str(e)))

    def sample():
        try:
            replay.Sampler(other).sample(timeout=None)
        except replay.Cancelled as e:
            results.append(("sample", str(e)))

    threads = [threading.Thread(target=insert), threading.Thread(target=sample)]
    for th in threads:
        th.start()
    _wait_for(lambda: t.info()["blocked_inserts"] == 1 and other.info()["blocked_samples"] == 1, "blocked calls")
    t.close()
    other.close()
    for th in threads:
        th.join(TIMEOUT)
        assert not th.is_alive()
    assert sorted(r[0] for r in results) == ["insert", "sample"]
    assert all("was closed" in r[1] for r in results)


def test_ctrl_c_interrupts_a_blocked_sample_on_the_main_thread():
    t = replay.Table("t")

    def interrupt():
        _wait_for(lambda: t.info()["blocked_samples"] == 1, "a blocked sample")
        _thread.interrupt_main()

    th = threading.Thread(target=interrupt)
    th.start()
    with pytest.raises(KeyboardInterrupt):
        replay.Sampler(t).sample(timeout=None)
    th.join(TIMEOUT)
    assert t.info()["blocked_samples"] == 0


def test_writer_and_sampler_threads_run_concurrently():
    # A queue of capacity 10 passes 1000 items only if the writer and the
    # sampler make progress at the same time: a call that held the GIL while
    # blocked would stall both (and fail on the timeouts).
    n = 1000
    t = replay.Table.queue("q", 10, signature={"x": "int64", "obs": "float32[8]"})
    got, errors = [], []

    def write():
        try:
            with replay.Writer([t], chunk_length=5) as w:
                for i in range(n):
                    w.append({"x": i, "obs": np.full(8, i, np.float32)})
                    w.create_item("q", 1.0, {"x": 1, "obs": 1}, timeout=TIMEOUT)
        except Exception as e:
            errors.append(e)

    def read():
        try:
            s = replay.Sampler(t)
            while len(got) < n:
                b = s.sample(3, timeout=TIMEOUT, flexible=True)
                np.testing.assert_array_equal(b.data["obs"][:, 0, 0], b.data["x"][:, 0])
                got.extend(b.data["x"][:, 0].tolist())
        except Exception as e:
            errors.append(e)

    _run([threading.Thread(target=write), threading.Thread(target=read)])
    assert not errors
    assert got == list(range(n))
    info = t.info()
    assert (info["inserts"], info["samples"], len(t)) == (n, n, 0)


@pytest.mark.parametrize("where", ["main thread", "other thread"])
def test_batch_waits_for_all_its_items(where):
    # The main thread waits in slices (successive flexible batches), others in
    # one C++ call; both must return the whole batch in queue order.
    t = replay.Table.queue("q", 100)
    n = 20
    got, errors = [], []

    def write():
        try:
            with replay.Writer([t]) as w:
                for i in range(n):
                    _wait_for(lambda: t.info()["blocked_samples"] == 1 or len(got) == 1, "the sampler to wait")
                    w.append({"x": i})
                    w.create_item("q", 1.0, {"x": 1}, timeout=TIMEOUT)
        except Exception as e:
            errors.append(e)

    def read():
        got.append(replay.Sampler(t).sample(n, timeout=TIMEOUT).data["x"][:, 0].tolist())

    if where == "main thread":
        writer = threading.Thread(target=write)
        writer.start()
        read()
        writer.join(TIMEOUT)
    else:
        _run([threading.Thread(target=write), threading.Thread(target=read)])
    assert not errors
    assert got == [list(range(n))]


def test_iter_ends_on_timeout_and_on_close():
    t = replay.Table.queue("q", 100)
    _fill(t, range(7))
    batches = [b.data["x"][:, 0].tolist() for b in replay.Sampler(t).iter(3, timeout=0.05, flexible=True)]
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]

    t2 = replay.Table("t2")
    closer = threading.Thread(target=lambda: (_wait_for(lambda: t2.info()["blocked_samples"] == 1, "a blocked sample"),
                                              t2.close()))
    closer.start()
    assert list(replay.Sampler(t2).iter(1)) == []
    closer.join(TIMEOUT)


def test_sample_to_insert_ratio_blocks_inserts():
    t = replay.Table("r", rate_limiter=replay.RateLimiter.sample_to_insert_ratio(1.0, 2, 1.0))
    w = replay.Writer([t])
    for i in range(3):
        w.append({"x": i})
        w.create_item("r", 1.0, {"x": 1}, timeout=0)
    w.append({"x": 3})
    with pytest.raises(TimeoutError, match="needs 1 more sample"):
        w.create_item("r", 1.0, {"x": 1}, timeout=0)
    replay.Sampler(t).sample(timeout=0)
    w.create_item("r", 1.0, {"x": 1}, timeout=0)
    assert t.info()["inserts"] == 4


# --------------------------------------------------------------------------- a learner loop


def test_dqn_style_loop():
    """Transitions (obs, action, reward, next_obs) in, batches out, priorities
    updated from TD errors; plain numpy stands in for the network."""
    rng = np.random.default_rng(0)
    table = replay.Table("transitions", sampler=replay.Prioritized(0.6, seed=1), remover=replay.Fifo(),
                         max_size=500, rate_limiter=replay.RateLimiter.min_size(64),
                         signature={"obs": "float32[4]", "action": "int64", "reward": "float32",
                                    "next_obs": "float32[4]", "step": "int64"})
    sampler = replay.Sampler(table)
    weights = np.zeros((4, 2), np.float32)
    writer = replay.Writer([table], chunk_length=8)
    step = 0
    updates = 0
    for episode in range(10):
        obs = rng.normal(size=4).astype(np.float32)
        for _ in range(60):
            action = int(rng.integers(2))
            next_obs = obs + np.float32(0.1) * (2 * action - 1)
            reward = 1.0
            writer.append({"obs": obs, "action": action, "reward": reward, "next_obs": next_obs, "step": step})
            writer.create_item("transitions", 1.0, {"obs": 1, "action": 1, "reward": 1, "next_obs": 1, "step": 1},
                               timeout=TIMEOUT)
            obs, step = next_obs, step + 1
            if len(table) >= 64:
                b = sampler.sample(32, timeout=TIMEOUT)
                o, a = b.data["obs"][:, 0], b.data["action"][:, 0]
                r, o2 = b.data["reward"][:, 0], b.data["next_obs"][:, 0]
                assert o.shape == (32, 4) and o.dtype == np.float32 and a.dtype == np.int64
                np.testing.assert_array_equal(r, 1.0)
                np.testing.assert_allclose(o2 - o, (0.1 * (2 * a - 1))[:, None] * np.ones((1, 4)), atol=1e-5)
                q = (o @ weights)[np.arange(32), a]
                target = r + 0.99 * (o2 @ weights).max(axis=1)
                td = target - q
                iw = (1.0 / (b.probabilities * b.table_size)) ** 0.4
                grad = np.zeros_like(weights)
                np.add.at(grad.T, a, (iw * td)[:, None] * o)
                weights += 1e-3 * grad / 32
                table.mutate_priorities(dict(zip(b.keys.tolist(), (np.abs(td) + 1e-3).tolist())))
                updates += 1
        writer.end_episode()
    info = table.info()
    assert info["inserts"] == 600 and len(table) == 500 and info["num_evicted"] == 100
    assert updates == 600 - 63 and info["samples"] == 32 * updates
    assert np.isfinite(weights).all()


def test_example_replay_dqn_runs():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    example = os.path.join(repo, "examples", "replay_dqn.py")
    r = subprocess.run([sys.executable, example, "--steps", "300"], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stderr
    try:
        import torch  # noqa: F401
    except ImportError:
        assert "PyTorch is not installed" in r.stdout
    else:
        assert "learner steps" in r.stdout


def test_module_exports():
    assert flywheel.replay is replay
    for name in replay.__all__:
        assert hasattr(replay, name)
