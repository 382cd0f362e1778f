"""PyTorch integration: flywheel.Loader as a ``torch.utils.data.IterableDataset``.

The dataset yields whole batches (dicts of tensors, zero-copy over the
loader's buffers), so give it to a DataLoader with ``batch_size=None`` and
``num_workers=0``: the loader already reads ahead on its own C++ threads,
and worker processes would only add copies. Rank and world size come from
``torch.distributed`` when it is initialised, else from the ``RANK`` and
``WORLD_SIZE`` environment variables (torchrun sets both), else 0 and 1.

Example::

    import torch.distributed as dist
    from flywheel.torch import IterableDataset
    dist.init_process_group("gloo")            # or nccl; torchrun sets the env
    ds = IterableDataset("data/cifar", batch_size=256, seed=0)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0, pin_memory=True)
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for batch in dl:
            ...
        torch.save({"model": model.state_dict(), "data": ds.state_dict()}, "ckpt.pt")

JAX: use :mod:`flywheel.jax` (docs/jax.md).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

import torch
import torch.utils.data

from .loader import Loader

__all__ = ["IterableDataset", "distributed_rank"]


def distributed_rank() -> Tuple[int, int]:
    """(rank, world_size) from torch.distributed, else RANK/WORLD_SIZE, else (0, 1)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is not None and world is not None:
        try:
            r, w = int(rank), int(world)
        except ValueError:
            raise ValueError(f"RANK={rank!r} / WORLD_SIZE={world!r}: expected integers") from None
        return r, w
    return 0, 1


class IterableDataset(torch.utils.data.IterableDataset):
    """Batches of ``flywheel.Loader`` as an IterableDataset of tensor dicts.

    Takes the Loader's arguments (``rank``/``world_size`` default to
    :func:`distributed_rank`; ``format`` is always "torch"). Each
    ``iter(ds)`` runs the rest of the current epoch; call :meth:`set_epoch`
    between epochs (as with DistributedSampler) or just iterate again.
    """

    def __init__(self, tables: Any, *, batch_size: int, rank: Optional[int] = None,
                 world_size: Optional[int] = None, **loader_kwargs: Any):
        super().__init__()
        if "format" in loader_kwargs and loader_kwargs["format"] != "torch":
            raise ValueError("IterableDataset always yields torch tensors (format='torch')")
        loader_kwargs["format"] = "torch"
        if rank is None or world_size is None:
            r, w = distributed_rank()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        self._args = (tables,)
        self._kwargs = dict(loader_kwargs, batch_size=batch_size, rank=rank, world_size=world_size)
        self._loader: Optional[Loader] = None
        self._pending_state: Optional[Mapping[str, Any]] = None
        self._pending_epoch: Optional[int] = None

    @property
    def loader(self) -> Loader:
        """The underlying Loader (opened on first use, in the process that iterates)."""
        if self._loader is None:
            self._loader = Loader(*self._args, **self._kwargs)
            if self._pending_state is not None:
                self._loader.load_state_dict(self._pending_state)
                self._pending_state = None
            if self._pending_epoch is not None:
                self._loader.set_epoch(self._pending_epoch)
                self._pending_epoch = None
        return self._loader

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise ValueError(
                f"flywheel.torch.IterableDataset: DataLoader num_workers={info.num_workers}; use num_workers=0 "
                "(or 1): the loader reads ahead on its own threads (num_threads=), and each worker process "
                "would read the same batches")
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` at the next iteration."""
        if self._loader is None:
            self._pending_epoch = int(epoch)
            self._pending_state = None
        else:
            self._loader.set_epoch(epoch)

    def state_dict(self) -> Dict[str, Any]:
        """The loader's state (see Loader.state_dict)."""
        if self._loader is None and self._pending_state is not None:
            return dict(self._pending_state)
        return self.loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at ``state`` (applied when the loader opens, or now)."""
        if self._loader is None:
            self._pending_state = dict(state)
            self._pending_epoch = None
        else:
            self._loader.load_state_dict(state)

    def stats(self) -> Dict[str, Any]:
        return self.loader.stats()
