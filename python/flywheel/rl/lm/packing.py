"""Sequence packing: variable-length trajectories (prompt + response) laid
end to end into micro-batches of at most ``token_budget`` tokens per row, so
a learner step computes on tokens, not padding (docs/rl.md, "Language
models").

Each packed row carries ``segment_ids`` (which sequence a token belongs to;
-1 for padding) and ``position_ids`` (restarting at 0 for every sequence):
:class:`flywheel.llm.Transformer` given both attends only within a segment,
so packed sequences see exactly what they would see alone. ``loss_mask``
marks the tokens that get loss (the policy's own response tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import torch


@dataclass
class PackedBatch:
    input_ids: torch.Tensor     # (rows, L) int64, 0 on padding
    segment_ids: torch.Tensor   # (rows, L) int64, -1 on padding
    position_ids: torch.Tensor  # (rows, L) int64
    loss_mask: torch.Tensor     # (rows, L) bool: tokens that get loss
    # Where each input sequence went: (row, start, length), in input order.
    places: List[tuple]

    @property
    def efficiency(self) -> float:
        """Real tokens / tokens computed (1 = no padding)."""
        total = self.input_ids.numel()
        return float((self.segment_ids >= 0).sum()) / total if total else 1.0


def pack(sequences: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[bool]], token_budget: int) -> PackedBatch:
    """Packs ``sequences`` (token ids) into rows of ``token_budget`` tokens,
    first-fit in decreasing length (deterministic: ties keep input order).
    ``loss_masks[i]`` has one flag per token of ``sequences[i]``. A sequence
    longer than the budget is refused, naming it."""
    if token_budget < 1:
        raise ValueError(f"token_budget must be positive, got {token_budget}")
    if len(sequences) != len(loss_masks):
        raise ValueError(f"{len(sequences)} sequences but {len(loss_masks)} loss masks")
    for i, (s, m) in enumerate(zip(sequences, loss_masks)):
        if len(s) == 0:
            raise ValueError(f"sequence {i} is empty")
        if len(s) > token_budget:
            raise ValueError(f"sequence {i} has {len(s)} tokens, more than the token budget {token_budget}")
        if len(m) != len(s):
            raise ValueError(f"sequence {i} has {len(s)} tokens but its loss mask {len(m)}")
    order = sorted(range(len(sequences)), key=lambda i: (-len(sequences[i]), i))
    rows: List[List[int]] = []  # indices per row
    room: List[int] = []
    for i in order:
        n = len(sequences[i])
        for r, free in enumerate(room):
            if n <= free:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(token_budget - n)
    length = max((token_budget - free for free in room), default=0)
    shape = (len(rows), length)
    ids = torch.zeros(shape, dtype=torch.long)
    seg = torch.full(shape, -1, dtype=torch.long)
    pos = torch.zeros(shape, dtype=torch.long)
    lm = torch.zeros(shape, dtype=torch.bool)
    places: List[tuple] = [None] * len(sequences)
    for r, members in enumerate(rows):
        at = 0
        for i in members:
            n = len(sequences[i])
            ids[r, at:at + n] = torch.as_tensor(list(sequences[i]), dtype=torch.long)
            seg[r, at:at + n] = i
            pos[r, at:at + n] = torch.arange(n)
            lm[r, at:at + n] = torch.as_tensor(list(loss_masks[i]), dtype=torch.bool)
            places[i] = (r, at, n)
            at += n
    return PackedBatch(ids, seg, pos, lm, places)


def unpack(values: torch.Tensor, batch: PackedBatch) -> List[torch.Tensor]:
    """Per-token values of a packed batch (rows, L, ...) back to one tensor per
    input sequence, in input order."""
    return [values[r, at:at + n] for (r, at, n) in batch.places]
