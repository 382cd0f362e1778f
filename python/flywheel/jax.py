"""JAX integration: flywheel.Loader batches as dicts of ``jax.Array``.

``flywheel.jax.Loader`` takes the arguments of ``flywheel.Loader`` plus
``sharding=`` and yields each batch as a dict of ``jax.Array``. Fixed-width
columns (``int32``, ``float32[4]``, ``uint8[32,32,3]``, ...) become JAX
arrays; columns JAX cannot hold are passed through unchanged, as
``flywheel.Loader`` gives them: ``string``/``binary`` (lists of str/bytes),
``list<T>`` (:class:`flywheel.ListArray`) and nullable columns in batches
that contain nulls (``numpy.ma.MaskedArray``). Leave them out with
``columns=``, or turn them into fixed-width arrays with a ``transforms=``
callable (which runs before the conversion).

Where the arrays live (docs/jax.md):

* ``sharding=None`` (default): on the host CPU device, imported through
  DLPack from the loader's own batch buffer, without a copy. The buffers are
  64-byte aligned, which is what XLA's CPU client needs to use them in
  place; JAX copies instead when a column is 64-bit and ``jax_enable_x64``
  is off (it narrows ``int64``/``float64`` to 32 bits), when a transform
  returned an array that is not C-contiguous, not writable or not 64-byte
  aligned. Each array keeps the loader's buffer alive, also after later
  batches and after the loader is closed or deleted.
* ``sharding=`` a ``jax.Device``: the whole batch on that device
  (``jax.device_put``: a host-to-device copy on accelerators).
* ``sharding=`` a ``jax.sharding.Sharding`` (or a dict column -> Sharding):
  one global array per column laid out by the sharding, e.g.
  ``NamedSharding(mesh, P("data"))`` gives each device its slice of rows.
  With several processes each one loads its rank's rows
  (``rank``/``world_size`` default to ``jax.process_index()`` /
  ``jax.process_count()``) and the global batch is the rank-ordered
  concatenation, ``batch_size * world_size`` rows, as flywheel.Loader
  defines it. On CPU devices the shards point into the loader's buffer where
  their first row is 64-byte aligned. The batch dimension must divide
  evenly among the shards, so ``drop_last`` defaults to True here.

Example::

    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import flywheel.jax

    mesh = Mesh(jax.devices(), ("data",))
    loader = flywheel.jax.Loader("data/cifar", batch_size=256, seed=0,
                                 columns=["image", "label"],
                                 sharding=NamedSharding(mesh, P("data")))
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:            # {"image": jax.Array, "label": jax.Array}
            state = train_step(state, batch)
        save({"model": state, "data": loader.state_dict()})
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Mapping, Optional, Union

import jax
import numpy as np

from .loader import Loader as _Loader

__all__ = ["Loader", "to_jax"]

ShardingLike = Union[None, "jax.Device", "jax.sharding.Sharding", Mapping[str, Any]]

# numpy dtype kinds JAX arrays hold: bool, signed, unsigned, float, complex.
_JAX_KINDS = frozenset("biufc")


def _convertible(v: Any) -> bool:
    """True for plain numeric ndarrays; lists, ListArrays, masked and string/
    object arrays are passed through."""
    return (isinstance(v, np.ndarray) and not isinstance(v, np.ma.MaskedArray)
            and v.dtype.kind in _JAX_KINDS and v.ndim >= 1)


def _host_array(v: np.ndarray, cpu: "jax.Device") -> jax.Array:
    """``v`` as a jax.Array on ``cpu``, sharing ``v``'s memory where JAX can.

    DLPack needs a C-contiguous, writable array (numpy exports no read-only
    flag through the legacy DLPack capsule JAX asks for); anything else goes
    through ``jax.device_put``, which copies what XLA cannot alias. Either
    way the jax.Array holds a reference to ``v`` (and so to the loader's
    buffer) for as long as it uses the memory."""
    if v.flags.c_contiguous and v.flags.writeable:
        return jax.dlpack.from_dlpack(v)
    return jax.device_put(v, cpu)


def _place(name: str, v: np.ndarray, target: Any, cpu: "jax.Device") -> jax.Array:
    if target is None:
        return _host_array(v, cpu)
    if isinstance(target, jax.sharding.Sharding):
        try:
            if jax.process_count() == 1:
                return jax.device_put(v, target)
            return jax.make_array_from_process_local_data(target, v)
        except ValueError as e:
            raise ValueError(f"column {name!r}: cannot lay out a batch of shape {v.shape} with {target}: {e}. "
                             "The batch dimension must divide evenly among the shards (drop_last=True and a "
                             "batch_size divisible by the number of shards)") from None
    return jax.device_put(v, target)  # a Device


def to_jax(batch: Mapping[str, Any], sharding: ShardingLike = None) -> Dict[str, Any]:
    """One batch from ``flywheel.Loader`` (numpy format) as a dict of jax.Array.

    Numeric, non-null ndarrays are converted as described for
    :class:`Loader` (``sharding``: None, a Device, a Sharding, or a dict
    column -> any of those; columns missing from the dict stay on the host
    CPU device); other values are returned as they are. The result is a
    plain dict, so JAX takes it as a pytree (a ``flywheel.Batch`` is a
    mapping JAX does not know).
    """
    cpu = jax.local_devices(backend="cpu")[0]
    out: Dict[str, Any] = {}
    for name, v in batch.items():
        target = sharding.get(name) if isinstance(sharding, Mapping) else sharding
        out[name] = _place(name, v, target, cpu) if _convertible(v) else v
    return out


class Loader:
    """Batches of ``flywheel.Loader`` as dicts of ``jax.Array``.

    Takes the arguments of ``flywheel.Loader`` (``format`` is always
    "numpy"; ``rank``/``world_size`` default to ``jax.process_index()`` and
    ``jax.process_count()``), plus:

    Args:
      sharding: None (host CPU device, zero-copy through DLPack), a
        ``jax.Device``, a ``jax.sharding.Sharding`` applied to every
        converted column (``NamedSharding(mesh, P("data"))`` splits rows
        across the mesh's "data" axis), or a dict column -> one of those.
      drop_last: as for flywheel.Loader; defaults to True when a sharding
        is given, so every batch divides among the devices.

    Iterating runs the rest of the current epoch, as with flywheel.Loader;
    ``state_dict``/``load_state_dict``/``set_epoch`` are the loader's, so a
    checkpoint saved after k batches resumes at batch k + 1.
    """

    def __init__(self, tables: Any, *, batch_size: int, sharding: ShardingLike = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 drop_last: Optional[bool] = None, **loader_kwargs: Any):
        if loader_kwargs.get("format", "numpy") != "numpy":
            raise ValueError("flywheel.jax.Loader converts numpy batches; leave format= unset")
        loader_kwargs["format"] = "numpy"
        if sharding is not None and not isinstance(sharding, (jax.Device, jax.sharding.Sharding, Mapping)):
            raise TypeError(f"sharding: expected None, a jax.Device, a jax.sharding.Sharding or a dict of them, "
                            f"got {type(sharding).__name__}")
        if rank is None:
            rank = jax.process_index()
        if world_size is None:
            world_size = jax.process_count()
        if drop_last is None:
            drop_last = sharding is not None
        self._sharding = sharding
        self._loader = _Loader(tables, batch_size=batch_size, rank=rank, world_size=world_size,
                               drop_last=drop_last, **loader_kwargs)

    @property
    def loader(self) -> _Loader:
        """The underlying flywheel.Loader (numpy batches)."""
        return self._loader

    @property
    def sharding(self) -> ShardingLike:
        return self._sharding

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        """Batches until the end of the current epoch."""
        while True:
            batch = self.next()
            if batch is None:
                return
            yield batch

    def next(self) -> Optional[Dict[str, Any]]:
        """This rank's next batch as jax arrays, or None at the end of the epoch."""
        batch = self._loader.next()
        if batch is None:
            return None
        return to_jax(batch, self._sharding)

    def __len__(self) -> int:
        """Batches this rank yields per epoch."""
        return len(self._loader)

    @property
    def epoch_size(self) -> int:
        return self._loader.epoch_size

    @property
    def schema(self) -> Dict[str, str]:
        return self._loader.schema

    def state_dict(self) -> Dict[str, Any]:
        """The loader's state after the batches handed out (see flywheel.Loader.state_dict)."""
        return self._loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at ``state`` (see flywheel.Loader.load_state_dict)."""
        self._loader.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        """Move to the start of ``epoch``."""
        self._loader.set_epoch(epoch)

    def stats(self) -> Dict[str, Any]:
        return self._loader.stats()

    def close(self) -> None:
        """Stop reading ahead; arrays already handed out stay valid."""
        self._loader.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
