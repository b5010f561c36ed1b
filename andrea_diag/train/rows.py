"""Pieces of one update's work that are pure functions of tensors: the non-finite fault
injection (a loss hook) and the per-source losses of a metrics row.

Kept out of ``loop.py`` so the trainer reads as its pipeline; both are exercised by every
trainer test (and pinned bit-for-bit by ``tests/test_golden.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from andrea_diag.config import SOURCE_NAMES


def overflow_last(n_micro: int) -> Callable[[int, torch.Tensor], torch.Tensor]:
    """The nonfinite injection: the group's last microbatch loss overflows (an fp16-style inf)."""

    def hook(i: int, loss: torch.Tensor) -> torch.Tensor:
        return loss * math.inf if i == n_micro - 1 else loss

    return hook


def per_source_loss(
    example_loss: torch.Tensor, example_tokens: torch.Tensor, source_idx: torch.Tensor
) -> dict[str, torch.Tensor | float]:
    """Token-weighted loss of each source's sequences in this group (NaN when absent). 0-dim
    device tensors, no host sync: rows picked on the CPU from ``source_idx`` (boolean indexing
    on the device syncs), summed in the order that indexing used, so the values are unchanged."""
    out: dict[str, torch.Tensor | float] = {}
    for i, name in enumerate(SOURCE_NAMES):
        idx = (source_idx == i).nonzero().flatten().to(example_loss.device)
        loss, tok = example_loss.index_select(0, idx), example_tokens.index_select(0, idx)
        out[f"loss_{name}"] = (loss * tok).sum() / tok.sum() if idx.numel() else math.nan
    return out
