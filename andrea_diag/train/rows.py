"""Pieces of one update's work that are pure functions of tensors: the non-finite fault
injection (a loss hook), the per-source losses of a metrics row, the update's one host read
(:func:`read_scalars`) and the host-to-device copy of the batch (:func:`to_device`).

Kept out of ``loop.py`` so the trainer reads as its pipeline; both are exercised by every
trainer test (and pinned bit-for-bit by ``tests/test_golden.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from andrea_diag.clip.api import ClipResult
from andrea_diag.config import SOURCE_NAMES
from andrea_diag.metrics import LOSS_SOURCE


def overflow_last(n_micro: int) -> Callable[[int, torch.Tensor], torch.Tensor]:
    """The nonfinite injection: the group's last microbatch loss overflows (an fp16-style inf)."""

    def hook(i: int, loss: torch.Tensor) -> torch.Tensor:
        return loss * math.inf if i == n_micro - 1 else loss

    return hook


def pack_scalars(*values: torch.Tensor | None) -> torch.Tensor | None:
    """The values of :func:`read_scalars` as ONE flat device vector (None when all are None).
    Floats and bools are concatenated as they are: ``cat`` promotes them to the widest float
    among them, which holds every value exactly (bool, bf16, fp16 in float32), so each float
    equals ``.item()``'s, with one launch instead of a cast a value; anything else goes through
    float64 first."""
    present = [(v.detach() if v.requires_grad else v).reshape(-1) for v in values if v is not None]
    if not all(v.is_floating_point() or v.dtype == torch.bool for v in present) or not any(
        v.is_floating_point() for v in present
    ):
        present = [v.double() for v in present]
    return torch.cat(present) if present else None


def unpack_scalars(flat: list[float], *values: torch.Tensor | None) -> list[float | None]:
    """``flat`` (the packed vector on the host) back in ``values``' order: a 0-dim value gives
    one float, a vector its elements, None stays None."""
    out: list[float | None] = []
    pos = 0
    for v in values:
        if v is None:
            out.append(None)
            continue
        out.extend(flat[pos : pos + v.numel()])
        pos += v.numel()
    return out


def read_scalars(*values: torch.Tensor | None) -> list[float | None]:
    """Device scalars and vectors as Python floats, in order, in ONE copy to the host (the
    update's host sync): :func:`pack_scalars`, then :func:`unpack_scalars`."""
    flat = pack_scalars(*values)
    return unpack_scalars(flat.tolist() if flat is not None else [], *values)  # host sync


def update_values(
    loss: torch.Tensor, clip: ClipResult, example_loss: torch.Tensor
) -> tuple[torch.Tensor | None, ...]:
    """The device values of the update's one host read: loss, grad norm, non-finite flag, skip
    flag (or None), post-clip norm, per-example losses."""
    return loss, clip.total_norm, clip.nonfinite, clip.skip, clip.post_norm, example_loss


def split_update(
    host: list[float | None], example_loss: torch.Tensor
) -> tuple[float, float, float, float | None, float, torch.Tensor]:
    """:func:`update_values` as read: the five scalars, and the per-example losses as a host
    tensor of their own dtype (values exact)."""
    ex = torch.tensor(host[5:], dtype=example_loss.dtype)
    return host[0], host[1], host[2], host[3], host[4], ex  # type: ignore[return-value]


def read_update(
    loss: torch.Tensor, clip: ClipResult, example_loss: torch.Tensor
) -> tuple[float, float, float, float | None, float, torch.Tensor]:
    """The update's one host read: (loss, grad norm, non-finite, skip or None, post-clip norm,
    the per-example losses as a host tensor of their own dtype, values exact). The post-clip
    norm rides along, so the row's ``grad_norm_post`` and ``clip_coef`` are host arithmetic
    (float64 division either way: the same bits as on the device)."""
    return split_update(read_scalars(*update_values(loss, clip, example_loss)), example_loss)


def to_device(tokens: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The batch on ``device``: on CUDA from pinned memory with ``non_blocking`` (no host
    sync, the CPU queues on); elsewhere ``.to`` (a no-op on the CPU)."""
    if device.type != "cuda":
        return tokens.to(device)
    return tokens.pin_memory().to(device, non_blocking=True)


def per_source_loss(
    example_loss: torch.Tensor,
    example_tokens: torch.Tensor,
    source_idx: torch.Tensor,
    names: Sequence[str] = SOURCE_NAMES,
) -> dict[str, torch.Tensor | float]:
    """Token-weighted loss of each source's sequences in this group (NaN when absent), as 0-dim
    tensors on ``example_loss``'s device. The trainer passes host tensors (the per-example
    losses its one read brought over, token counts from the host batch): nothing is launched.
    With device tensors there is no host sync either: the rows of each source are picked on the
    host from ``source_idx`` (a host tensor: boolean indexing on the device syncs) and reach the
    device in one copy; summed in the order that indexing used, so the values are unchanged."""
    src = source_idx.reshape(-1).numpy()  # refuses a device tensor: this must stay host-side
    picks = [np.flatnonzero(src == i) for i in range(len(names))]  # source_idx indexes names
    flat = torch.from_numpy(np.concatenate(picks).astype(np.int64))
    flat = to_device(flat, example_loss.device)
    out: dict[str, torch.Tensor | float] = {}
    start = 0
    for name, pick in zip(names, picks, strict=True):
        idx = flat[start : start + len(pick)]
        start += len(pick)
        loss, tok = example_loss.index_select(0, idx), example_tokens.index_select(0, idx)
        value = (loss * tok).sum() / tok.sum() if len(pick) else math.nan
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            value = value.item()  # a host value: the float the flush would make of it
        out[LOSS_SOURCE.name_for(name)] = value
    return out
