"""flywheel.replay.Server / Client / RemoteWriter: replay over gRPC on loopback
(docs/python.md, "Replay over gRPC")."""

import _thread
import threading
import time

import numpy as np
import pytest

from flywheel import _core, replay

TIMEOUT = 30  # seconds; bounds every wait so a bug fails instead of hanging

pytestmark = pytest.mark.skipif(not _core.replay_service_available,
                                reason="built without the gRPC replay service (FLYWHEEL_BUILD_GRPC=OFF)")


def _wait_for(pred, what, timeout=TIMEOUT):
    """Polls `pred` (a state only observable by polling) until true."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.002)


def _tables():
    return [replay.Table.queue("q", 100, signature={"obs": "float32[3]", "a": "int64"}),
            replay.Table("p", sampler=replay.Prioritized(0.5), max_size=1000)]


@pytest.fixture
def served():
    """A server on a free port with a queue table 'q' and a prioritized 'p',
    and a client of it."""
    with replay.Server(_tables(), port=0) as server, replay.Client(server.address) as client:
        yield server, client


def _obs(i):
    return np.array([i, i + 0.5, -i], np.float32)


# --------------------------------------------------------------------------- values


def test_remote_writer_items_sample_back_exactly(served):
    server, client = served
    keys = []
    with client.writer(chunk_length=2) as w:  # exit: end_episode + close (flush)
        for ep in range(3):
            for t in range(4):
                i = 10 * ep + t
                w.append({"obs": _obs(i), "a": i})
                if t >= 1:  # two-step items overlapping the previous one's chunks
                    keys.append(w.create_item("q", 1.0, {"obs": 2, "a": 2}, timeout=TIMEOUT))
            w.end_episode()
    assert len(server.tables["q"]) == 9

    s = client.sample("q", 9, timeout=TIMEOUT)
    assert isinstance(s, replay.Sample) and len(s) == 9
    assert s.data["obs"].shape == (9, 2, 3) and s.data["obs"].dtype == np.float32
    assert s.data["a"].shape == (9, 2) and s.data["a"].dtype == np.int64
    expect = [10 * ep + t for ep in range(3) for t in range(1, 4)]  # FIFO order
    np.testing.assert_array_equal(s.data["a"], [[i - 1, i] for i in expect])
    np.testing.assert_array_equal(s.data["obs"], [[_obs(i - 1), _obs(i)] for i in expect])
    assert s.keys.dtype == np.uint64 and s.keys.tolist() == keys
    np.testing.assert_array_equal(s.probabilities, 1.0)
    np.testing.assert_array_equal(s.times_sampled, 1)
    assert s.table_size.tolist() == list(range(9, 0, -1))
    assert len(server.tables["q"]) == 0  # max_times_sampled=1: the queue is drained
    assert server.stats()["items_inserted"] == 9


def test_prioritized_probabilities_and_mutate_priorities(served):
    server, client = served
    with client.writer() as w:
        keys = []
        for i in range(4):
            w.append({"v": float(i)})
            keys.append(w.create_item(server.tables["p"], priority=float(i + 1), trajectory={"v": 1}))
    s = client.sample("p", 64, timeout=TIMEOUT)
    total = sum((i + 1) ** 0.5 for i in range(4))
    by_key = {k: i for i, k in enumerate(keys)}
    for k, v, prob, prio in zip(s.keys.tolist(), s.data["v"][:, 0], s.probabilities, s.priorities):
        i = by_key[k]
        assert v == float(i) and prio == i + 1
        assert prob == pytest.approx((i + 1) ** 0.5 / total)

    # Remote mutations show in process: key 0 -> priority 0 (never sampled), key 3 deleted.
    missing = client.mutate_priorities("p", updates={keys[0]: 0.0, 12345: 1.0}, deletes=[keys[3], 999])
    assert missing == 2
    assert len(server.tables["p"]) == 3
    s = replay.Sampler(server.tables["p"]).sample(50, timeout=TIMEOUT)
    assert set(s.keys.tolist()) <= {keys[1], keys[2]}


def test_queue_items_go_out_exactly_once_across_a_remote_writer_and_the_client():
    # The writer runs on the main thread with a small run-ahead window (its
    # waits for acks are sliced), the sampler on another thread (one C++ call
    # per batch); a queue of 10 passes 300 items only if both make progress.
    n = 300
    q = replay.Table.queue("q", 10)  # inserts block while 10 are unread
    got, errors = [], []
    with replay.Server([q]) as server, replay.Client(server.address) as client:
        def sample():
            try:
                with replay.Client(server.address) as c:
                    while len(got) < n:
                        got.extend(c.sample("q", 5, timeout=TIMEOUT, flexible=True).data["x"][:, 0].tolist())
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        th = threading.Thread(target=sample)
        th.start()
        keys = []
        with client.writer(chunk_length=4, max_in_flight_items=3) as w:
            for i in range(n):
                w.append({"x": i})
                keys.append(w.create_item("q", 1.0, {"x": 1}, timeout=TIMEOUT))
        th.join(TIMEOUT)
        assert not th.is_alive() and not errors
        assert got == list(range(n))
        assert len(set(keys)) == n
        assert len(q) == 0 and q.info()["inserts"] == n and server.stats()["item_errors"] == 0


# --------------------------------------------------------------------------- errors and blocking


def test_sample_timeout_is_a_timeout_error_within_bound_and_takes_nothing(served):
    server, client = served
    with client.writer() as w:
        for i in range(2):
            w.append({"obs": _obs(i), "a": i})
            w.create_item("q", 1.0, {"obs": 1, "a": 1})
    start = time.monotonic()
    with pytest.raises(TimeoutError) as e:
        client.sample("q", 5, timeout=0.3)  # main thread: waits in slices
    assert 0.3 <= time.monotonic() - start < 3.0
    msg = str(e.value)
    assert f"sample from table 'q' on {server.address} timed out after 300ms" in msg
    assert f"[{server.address}] table 'q': 2 of 100 items" in msg  # the server's explanation
    assert len(server.tables["q"]) == 2  # a full batch is all or nothing

    # The same from another thread (one C++ call with the whole timeout).
    errors = []

    def other():
        try:
            client.sample("q", 5, timeout=0.2)
        except TimeoutError as err:
            errors.append(str(err))

    th = threading.Thread(target=other)
    th.start()
    th.join(TIMEOUT)
    assert len(errors) == 1 and "timed out after 200ms" in errors[0]
    assert len(server.tables["q"]) == 2
    assert client.sample("q", 2, timeout=TIMEOUT).data["a"][:, 0].tolist() == [0, 1]


def test_main_thread_full_batch_timeout_takes_nothing_in_process():
    # Regression: the in-process binding used to take a full batch as
    # successive flexible slices on the main thread, so a timed-out batch
    # consumed (and, in a queue, deleted) the items it had taken.
    q = replay.Table.queue("q", 10)
    with replay.Writer([q]) as w:
        for i in range(3):
            w.append({"x": i})
            w.create_item("q", 1.0, {"x": 1})
    with pytest.raises(TimeoutError):
        replay.Sampler(q).sample(5, timeout=0.25)
    assert len(q) == 3 and q.info()["samples"] == 0


def test_unknown_table_is_a_key_error_naming_it(served):
    _, client = served
    with pytest.raises(KeyError, match="no table 'nope'"):
        client.sample("nope", 1, timeout=1)
    with pytest.raises(KeyError, match="no table 'nope'"):
        client.mutate_priorities("nope", deletes=[1])
    with pytest.raises(KeyError, match="no table 'nope'"):
        client.reset("nope")
    with pytest.raises(KeyError, match="no server has table 'nope'"):
        client.explain("nope")
    w = client.writer()
    w.append({"x": 1})
    w.create_item("nope", 1.0, {"x": 1})  # sent; the server's error comes back later
    with pytest.raises(KeyError, match="no table 'nope'"):
        w.flush(timeout=TIMEOUT)
    w.close()
    with pytest.raises(RuntimeError, match="closed"):
        w.append({"x": 2})


def test_server_side_insert_timeout_surfaces_at_flush():
    q = replay.Table.queue("tiny", 1)
    with replay.Server([q]) as s2, replay.Client(s2.address) as c2:
        w = c2.writer()
        w.append({"x": 1})
        w.create_item("tiny", 1.0, {"x": 1}, timeout=TIMEOUT)
        w.create_item("tiny", 1.0, {"x": 1}, timeout=0.2)  # the queue is full: waits on the server
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=f"server {s2.address}"):
            w.flush(timeout=TIMEOUT)
        assert time.monotonic() - start < 3.0
        assert len(q) == 1
        w.flush(timeout=TIMEOUT)  # the error was reported once
        w.close()


def test_remote_writer_refuses_misfit_steps_like_the_in_process_one(served):
    _, client = served
    w = client.writer(signature={"obs": "float32[3]"})
    w.append({"obs": [1, 2, 3], "a": 1})
    assert w.column_types == {"obs": "float32[3]", "a": "int64"}
    with pytest.raises(ValueError, match="column 'a' is missing"):
        w.append({"obs": [1, 2, 3]})
    with pytest.raises(ValueError, match="column 'obs'.*shape"):
        w.append({"obs": [1, 2], "a": 1})
    with pytest.raises(KeyError, match="column 'z' has no steps"):
        w.create_item("q", 1.0, {"z": 1})
    w.create_item("q", 1.0, {"obs": 1, "a": 1})
    w.close()


def test_ctrl_c_interrupts_a_blocked_remote_sample(served):
    server, client = served
    q = server.tables["q"]

    def interrupt():
        _wait_for(lambda: q.info()["blocked_samples"] == 1, "a blocked sample on the server")
        _thread.interrupt_main()

    th = threading.Thread(target=interrupt)
    th.start()
    with pytest.raises(KeyboardInterrupt):
        client.sample("q", 1, timeout=None)
    th.join(TIMEOUT)
    _wait_for(lambda: q.info()["blocked_samples"] == 0, "the server's wait to end")
    with client.writer() as w:  # the client still works
        w.append({"obs": _obs(7), "a": 7})
        w.create_item("q", 1.0, {"obs": 1, "a": 1})
    assert client.sample("q", 1, timeout=TIMEOUT).data["a"].tolist() == [[7]]


# --------------------------------------------------------------------------- info, reset, close


def test_info_explain_reset_and_close(served):
    server, client = served
    with client.writer() as w:
        for i in range(3):
            w.append({"v": i})
            w.create_item("p", 1.0, {"v": 1})
    info = client.info()
    assert set(info) == {"q", "p"}
    local = server.tables["p"].info()
    assert set(info["p"]) == set(local) | {"explain"}
    for k in local:
        assert info["p"][k] == local[k], k
    assert info["p"]["size"] == 3 and info["p"]["sampler"] == "Prioritized(priority_exponent=0.5)"
    assert info["q"]["rate_limiter"] == replay.RateLimiter.queue(100)._options
    assert f"[{server.address}] table 'p': 3 of 1000 items" in client.explain("p")

    client.reset("p")
    assert len(server.tables["p"]) == 0 and server.tables["p"].info()["inserts"] == 0

    client.close("q")
    with pytest.raises(replay.Cancelled):
        client.sample("q", 1, timeout=TIMEOUT)
    with pytest.raises(replay.Cancelled):
        replay.Sampler(server.tables["q"]).sample(1, timeout=0)


def test_non_loopback_host_is_refused():
    with pytest.raises(ValueError, match="not loopback"):
        replay.Server(_tables(), host="0.0.0.0")
    with pytest.raises(ValueError, match="port"):
        replay.Server(_tables(), port=70000)
    with pytest.raises(ValueError, match="appears twice"):
        replay.Server([replay.Table("t"), replay.Table("t")])
    with pytest.raises(ValueError, match="given twice"):
        replay.Client(["127.0.0.1:1", "127.0.0.1:1"])


def test_disconnected_client_and_reprs(served):
    server, client = served
    assert repr(server) == f"flywheel.replay.Server('{server.address}', tables=['q', 'p'])"
    assert server.address == f"127.0.0.1:{server.port}" and server.port > 0
    assert server.restored_checkpoint is None
    c = replay.Client(server.address)
    assert c.num_shards == 1 and c.addresses == [server.address]
    c.disconnect()
    assert repr(c) == f"flywheel.replay.Client(['{server.address}'], disconnected)"
    with pytest.raises(RuntimeError, match="disconnected"):
        c.sample("q", 1, timeout=0)
    with pytest.raises(RuntimeError, match="no checkpoint directory"):
        client.checkpoint()


# --------------------------------------------------------------------------- checkpoints


def test_checkpoint_then_a_new_server_restores_the_tables(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    with replay.Server(_tables(), checkpoint_dir=ckpt) as server, replay.Client(server.address) as client:
        assert server.restored_checkpoint is None
        with client.writer(chunk_length=3) as w:
            for i in range(5):
                w.append({"obs": _obs(i), "a": i})
                w.create_item("q", 1.0, {"obs": 2 if i else 1, "a": 2 if i else 1})
        with client.writer() as w:
            for i in range(4):
                w.append({"v": 0.25 * i})
                w.create_item("p", float(i + 1), {"v": 1})
        first = client.sample("q", 1, timeout=TIMEOUT)  # one consumed before the checkpoint
        assert first.data["a"].tolist() == [[0]]
        c1 = server.checkpoint()
        assert c1["num_items"] == 8 and c1["path"].startswith(ckpt) and c1["max_pause"] >= 0
        assert set(c1["pauses"]) == {"q", "p"}
        [c2] = client.checkpoint()  # the Checkpoint RPC
        assert c2["id"] > c1["id"] and c2["address"] == server.address and c2["num_items"] == 8
        p_info = server.tables["p"].info()
        q_info = server.tables["q"].info()

    fresh = _tables()  # empty: replaced by the checkpoint's tables
    with replay.Server(fresh, checkpoint_dir=ckpt) as server, replay.Client(server.address) as client:
        assert server.restored_checkpoint == c2["id"]
        q, p = server.tables["q"], server.tables["p"]
        assert q is not fresh[0] and isinstance(q, replay.Table) and len(fresh[0]) == 0
        for restored, before in ((q, q_info), (p, p_info)):
            info = restored.info()
            for k in ("size", "max_size", "max_times_sampled", "inserts", "deletes", "samples", "sampler",
                      "remover", "rate_limiter"):
                assert info[k] == before[k], k
        assert q.sampler == replay.Fifo() and q.rate_limiter == replay.RateLimiter.queue(100)
        assert repr(q.rate_limiter) == "RateLimiter.queue(100)"
        assert q.signature == {"obs": "float32[3]", "a": "int64"}
        assert p.sampler == replay.Prioritized(0.5) and p.signature is None
        assert p.rate_limiter == replay.RateLimiter.min_size(1)

        s = client.sample("q", 4, timeout=TIMEOUT)
        np.testing.assert_array_equal(s.data["a"], [[i - 1, i] for i in range(1, 5)])
        np.testing.assert_array_equal(s.data["obs"], [[_obs(i - 1), _obs(i)] for i in range(1, 5)])
        s = replay.Sampler(p).sample(40, timeout=TIMEOUT)  # restored tables work in process too
        assert sorted(set(zip(s.priorities.tolist(), s.data["v"][:, 0].tolist()))) == \
            [(float(i + 1), 0.25 * i) for i in range(4)]

    # restore=False starts from the given (empty) tables.
    with replay.Server(_tables(), checkpoint_dir=ckpt, restore=False) as server:
        assert server.restored_checkpoint is None and len(server.tables["p"]) == 0

    # The checkpoint is a dataset: flywheel.Loader reads its items and chunks
    # tables like any other table (offline RL).
    import flywheel
    items = flywheel.Loader(f"{c2['path']}/items", batch_size=5, shuffle=False, columns=["table", "key", "priority"])
    rows = [(t, k, pr) for b in items for t, k, pr in zip(b["table"], b["key"], b["priority"])]
    # q: 4 unread items x 2 columns; p: 4 items x 1 column
    assert len(rows) == 4 * 2 + 4 and len({k for t, k, _ in rows if t == "p"}) == 4
    assert sorted(pr for t, _, pr in rows if t == "p") == [1.0, 2.0, 3.0, 4.0]
    chunks = flywheel.Loader(f"{c2['path']}/chunks", batch_size=64, seed=0)
    assert sum(len(b["key"]) for b in chunks) == flywheel.Table.open(f"{c2['path']}/chunks").num_rows > 0


# --------------------------------------------------------------------------- sharding


def test_two_servers_writer_spreads_episodes_and_samples_come_from_both():
    a_tables, b_tables = [replay.Table("t", max_size=100)], [replay.Table("t", max_size=100)]
    with replay.Server(a_tables) as a, replay.Server(b_tables) as b, \
            replay.Client([a.address, b.address], seed=7) as client:
        assert client.num_shards == 2
        keys, values = {}, {}  # key -> server index, key -> value
        with client.writer() as w:
            first = w.current_shard
            for ep in range(6):
                assert w.current_shard == (first + ep) % 2
                for t in range(3):
                    w.append({"x": 10 * ep + t})
                    k = w.create_item("t", 1.0, {"x": 1})
                    keys[k], values[k] = (first + ep) % 2, 10 * ep + t
                w.end_episode()
        assert len(a.tables["t"]) == 9 and len(b.tables["t"]) == 9
        on_a = {k for k, s in keys.items() if s == 0}
        assert on_a == set(replay.Sampler(a.tables["t"]).sample(200, timeout=TIMEOUT).keys.tolist())

        s = client.sample("t", 100, timeout=TIMEOUT)
        assert len(s) == 100
        got = s.keys.tolist()
        assert {keys[k] for k in got} == {0, 1}  # items from both servers
        assert 30 <= sum(keys[k] == 0 for k in got) <= 70  # about half each (systematic sampling)
        # Uniform 1/9 on each server, times the 1/2 chance its server was asked.
        np.testing.assert_allclose(s.probabilities, 1 / 18)
        assert s.data["x"][:, 0].tolist() == [values[k] for k in got]

        info = client.info()["t"]
        assert info["size"] == 18 and info["max_size"] == 200
        assert info["explain"].count("table 't': 9 of 100 items") == 2

        assert client.mutate_priorities("t", deletes=list(keys)) == 0  # each key was on one server
        assert [len(x.tables["t"]) for x in (a, b)] == [0, 0]


def test_two_server_queue_full_batches_get_every_item_once():
    # Full batches on the main thread, spread over two servers while a writer
    # thread fills them: every item arrives exactly once.
    n = 60
    qa, qb = replay.Table.queue("q", 8), replay.Table.queue("q", 8)
    errors = []
    with replay.Server([qa]) as a, replay.Server([qb]) as b, replay.Client([a.address, b.address]) as client:
        def write():
            try:
                with client.writer() as w:
                    for i in range(n):
                        w.append({"x": i})
                        w.create_item("q", 1.0, {"x": 1}, timeout=TIMEOUT)
                        if i % 3 == 2:
                            w.end_episode()  # episodes of 3 items alternate between the servers
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        th = threading.Thread(target=write)
        th.start()
        got = []
        for _ in range(n // 6):
            s = client.sample("q", 6, timeout=TIMEOUT)
            assert len(s) == 6
            got.extend(s.data["x"][:, 0].tolist())
        th.join(TIMEOUT)
        assert not th.is_alive() and not errors
        assert sorted(got) == list(range(n))
        assert qa.info()["inserts"] == qb.info()["inserts"] == n // 2


def test_blocked_main_thread_sample_logs_the_servers_explanation(served, capfd):
    server, _ = served
    with replay.Client(server.address, watchdog=0.1) as client:
        with pytest.raises(TimeoutError):
            client.sample("q", 1, timeout=0.45)
    err = capfd.readouterr().err
    assert 2 <= err.count(f"sample from table 'q' on {server.address} blocked for") <= 4  # about every 0.1 s
    assert "needs 1 more insert" in err


def test_a_build_without_the_service_says_so(monkeypatch):
    monkeypatch.setattr(_core, "replay_service_available", False)
    with pytest.raises(NotImplementedError, match="no gRPC replay service.*FLYWHEEL_BUILD_GRPC=OFF"):
        replay.Server(_tables())
    with pytest.raises(NotImplementedError, match="no gRPC replay service"):
        replay.Client("127.0.0.1:1")


@pytest.mark.parametrize("where", ["in-process", "remote"])
def test_extend_appends_many_steps_as_appends_would(where):
    """Writer.extend / RemoteWriter.extend: n steps in one call, items over
    them equal to the ones n appends make; mismatched lengths, shapes and
    unsafe casts are refused naming the column, with nothing appended."""
    table = replay.Table.queue("q", 100, signature={"obs": "float32[3]", "a": "int64"})
    with replay.Server([table], port=0) as server, replay.Client(server.address) as client:
        w = replay.Writer([table]) if where == "in-process" else client.writer(chunk_length=4)
        w.extend({"obs": np.stack([_obs(i) for i in range(5)]), "a": [0, 1, 2, 3, 4]})
        assert w.episode_steps == 5
        w.append({"obs": _obs(5), "a": 5})
        w.create_item("q", 1.0, {"obs": 4, "a": 6}, timeout=TIMEOUT)
        with pytest.raises(ValueError, match="column 'a' has 2 steps; the other columns have 3"):
            w.extend({"obs": np.zeros((3, 3), np.float32), "a": [1, 2]})
        with pytest.raises(ValueError, match=r"column 'obs' \(float32\[3\]\): steps have shape \(2, 4\)"):
            w.extend({"obs": np.zeros((2, 4), np.float32), "a": [1, 2]})
        with pytest.raises(TypeError, match="column 'a'.*cannot safely cast"):
            w.extend({"obs": np.zeros((1, 3), np.float32), "a": np.array([1.5])})
        assert w.episode_steps == 6
        w.end_episode()
        if where == "remote":
            w.flush(timeout=TIMEOUT)
        s = client.sample("q", 1, timeout=TIMEOUT)
        np.testing.assert_array_equal(s.data["a"], [[0, 1, 2, 3, 4, 5]])
        np.testing.assert_array_equal(s.data["obs"][0, :, 0], [2, 3, 4, 5])
        if where == "remote":
            w.close()
