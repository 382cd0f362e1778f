"""Sampler.iter / Client.iter with prefetch: batches sampled ahead on a
background thread, in order, ending on timeout or close, stopping when the
consumer stops."""

import threading
import time

import numpy as np
import pytest

from flywheel import _core, replay


def _fill(table, n):
    with replay.Writer(table, chunk_length=4) as w:
        for i in range(n):
            w.append({"x": np.int64(i)})
            w.create_item(table, 1.0, {"x": 1}, timeout=30)


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "flywheel-replay-prefetch"]


def test_prefetch_yields_every_queue_item_once_in_order():
    q = replay.Table.queue("q", 200)
    _fill(q, 100)
    seen = []
    for batch in replay.Sampler(q).iter(batch_size=10, timeout=0.5, prefetch=3):
        seen.extend(int(v) for v in batch.data["x"][:, 0])
    assert seen == list(range(100))
    assert not _prefetch_threads()


def test_prefetch_samples_ahead_and_stops_with_the_consumer():
    t = replay.Table("u", max_size=1000)
    _fill(t, 50)
    it = replay.Sampler(t).iter(batch_size=5, timeout=5, prefetch=2)
    first = next(it)
    assert first.data["x"].shape == (5, 1)
    deadline = time.monotonic() + 10
    # One batch consumed, then the worker fills the queue (2) and holds a third.
    while t.info()["samples"] < 5 * 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert t.info()["samples"] >= 5 * 3
    it.close()  # the consumer stops: the thread goes
    assert not _prefetch_threads()


def test_prefetch_ends_on_close_and_propagates_errors():
    t = replay.Table("c", max_size=10)
    it = replay.Sampler(t).iter(batch_size=1, prefetch=1)  # no timeout: waits until closed
    threading.Timer(0.3, t.close).start()
    start = time.monotonic()
    assert list(it) == []
    assert time.monotonic() - start < 10
    with pytest.raises(ValueError, match="prefetch"):
        replay.Sampler(t).iter(prefetch=-1)


@pytest.mark.skipif(not _core.replay_service_available, reason="no gRPC replay service")
def test_client_iter_prefetches_over_the_wire():
    q = replay.Table.queue("q", 100)
    _fill(q, 30)
    with replay.Server([q]) as server, replay.Client(server.address) as client:
        got = [int(v) for b in client.iter("q", batch_size=3, timeout=0.5, prefetch=2) for v in b.data["x"][:, 0]]
    assert got == list(range(30))
