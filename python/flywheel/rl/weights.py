"""Versioned policy weights over gRPC (docs/rl.md, "Weights").

A learner publishes named tensors as the next version of a model; actors
fetch a version only when it is newer than the one they hold::

    from flywheel.rl.weights import WeightClient
    wc = WeightClient(server.address)          # a flywheel.replay.Server(..., weights=True)
    v = wc.publish("policy", model.policy_tensors())
    got = wc.fetch("policy", newer_than=v - 1)  # (version, {name: ndarray}) or None

The store is served on the replay server's port (``flywheel run`` does this;
in Python: ``flywheel.replay.Server(tables, weights=True)``).
"""

from __future__ import annotations

import math
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from flywheel import _core


class WeightClient:
    """Publishes and fetches versioned named tensors. Thread-safe.

    Args:
      address: the server, ``"host:port"``.
    """

    __slots__ = ("_c", "_address")

    def __init__(self, address: str):
        if not hasattr(_core, "WeightClient"):
            raise RuntimeError("flywheel was built without gRPC: the weight store is not available")
        if not isinstance(address, str) or not address:
            raise ValueError(f"address must be 'host:port', got {address!r}")
        self._address = address
        self._c = _core.WeightClient(address)

    @property
    def address(self) -> str:
        return self._address

    def publish(self, model: str, tensors: Mapping[str, np.ndarray], version: int = 0) -> int:
        """Publishes ``tensors`` as the next version of ``model`` and returns
        the version. ``version`` 0 takes the current version + 1; otherwise it
        must exceed the current one. Arrays must have a numeric or bool dtype;
        non-contiguous ones are copied."""
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty str, got {model!r}")
        if not isinstance(tensors, Mapping) or not tensors:
            raise ValueError("tensors must be a non-empty dict of name -> array")
        return self._c.publish(model, dict(tensors), int(version))

    def fetch(self, model: str, newer_than: int = 0,
              wait: Optional[float] = 0.0) -> Optional[Tuple[int, Dict[str, np.ndarray]]]:
        """The latest ``(version, {name: array})`` of ``model`` if it is newer
        than ``newer_than``, waiting up to ``wait`` seconds (None = forever)
        for one; None when none came. A model never published is not an
        error (None)."""
        if wait is not None and (not isinstance(wait, (int, float)) or math.isnan(wait) or wait < 0):
            raise ValueError(f"wait must be None or seconds >= 0, got {wait!r}")
        got = self._c.fetch(model, int(newer_than), None if wait is None else float(wait))
        if got is None:
            return None
        version, _publish_ms, arrays = got
        return version, arrays

    def last_transfer(self) -> Dict[str, float]:
        """How the last publish or fetch went: ``bytes`` of tensors,
        ``wire_bytes`` sent or received (resent bytes included),
        ``seconds``, ``chunks``, ``resumes`` (streams re-opened at the byte
        reached after a dropped connection) and ``restarts`` (fetches begun
        again at a newer version). Weights travel in chunks, so any size
        passes, past gRPC's message limit (docs/rl.md, "Chunked transfer")."""
        return dict(self._c.last_transfer())

    def list(self) -> List[Tuple[str, int]]:
        """``(model, latest version)`` for every model on the server."""
        return [(m, v) for m, v in self._c.list()]

    def __repr__(self) -> str:
        return f"WeightClient({self._address!r})"
