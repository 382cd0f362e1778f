"""flywheel.trace: spans as Chrome trace JSON (chrome://tracing, Perfetto).

The loader (batch assembly on its threads, the consumer's wait in next()),
replay RPCs, C++ actor steps and the RL learners record spans while tracing
is on; off (the default) they cost one atomic load each.

    import flywheel
    flywheel.trace.start("trace.json")
    with flywheel.trace.span("train", "step", step=i):
        ...
    flywheel.trace.stop()                 # writes trace.json

Or run any flywheel process with FLYWHEEL_TRACE=trace.json (written at exit).
Format: docs/observability.md, "Traces".
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Iterator

from . import _core

__all__ = ["start", "stop", "flush", "enabled", "span", "counts"]


def start(path: str, max_events: int = 4_000_000) -> None:
    """Starts collecting spans, to be written to ``path`` by :func:`stop`."""
    _core.trace_start(str(path), int(max_events))


def stop() -> None:
    """Writes the spans collected so far and stops collecting."""
    _core.trace_stop()


def flush() -> None:
    """Writes the spans collected so far and keeps collecting."""
    _core.trace_flush()


def enabled() -> bool:
    return _core.trace_enabled()


def counts() -> tuple:
    """(spans recorded, spans dropped beyond max_events) since start."""
    return tuple(_core.trace_counts())


@contextlib.contextmanager
def span(category: str, name: str, **args: Any) -> Iterator[None]:
    """A span around the ``with`` block (nothing when tracing is off);
    keyword arguments become the span's args."""
    if not _core.trace_enabled():
        yield
        return
    t0 = _core.trace_now_us()
    try:
        yield
    finally:
        _core.trace_record(category, name, t0, _core.trace_now_us(), json.dumps(args, default=str) if args else "")
