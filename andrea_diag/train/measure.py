"""The update's measurement: its one host read, as a typed :class:`UpdateRead`.

    read = read_group(batch, group, clip, trainer.reducer, trainer.dist)  # host sync
    read.loss, read.grad_norm, read.applied  # host values: no further device read

The trainer (``loop.py``) builds the metrics row's loop columns and the probes'
:class:`~andrea_diag.probes.UpdateContext` from this one value, so neither reads the device
again. Kept apart from ``loop.py`` so ``Trainer._measure`` reads as its three steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from andrea_diag.clip.api import ClipResult
from andrea_diag.device import HostCopy
from andrea_diag.train.accumulation import IGNORE, GroupResult
from andrea_diag.train.components import Reducer
from andrea_diag.train.distributed import DDPReducer, DistInfo, gather_examples
from andrea_diag.train.rows import (
    pack_scalars,
    per_source_loss,
    read_update,
    split_update,
    unpack_scalars,
    update_values,
)

if TYPE_CHECKING:  # data is a lower layer; the type is for readers and checkers
    from andrea_diag.data.batches import Batch


@dataclass(frozen=True)
class UpdateRead:
    """What the update's one host read brought over, and the flags decided from it."""

    loss: float  # the group's global token-weighted loss (every replica's)
    grad_norm: float  # pre-clip global gradient norm
    post: float  # post-clip norm, float64 as read
    grads_nonfinite: bool  # the clip pass's own flag (a non-finite gradient)
    nonfinite: bool  # that flag, or a non-finite loss
    skipped: bool  # the clip mode chose to skip a finite update
    example_loss: torch.Tensor  # (A·m·D,) host, per-example losses of every replica, exact
    example_tokens: torch.Tensor  # (A·m·D,) host, supervised tokens of each sequence

    @property
    def applied(self) -> bool:
        """Whether the optimizer steps on this update."""
        return not (self.nonfinite or self.skipped)


def read_group(
    batch: Batch,
    group: GroupResult,
    clip: ClipResult,
    reducer: Reducer | DDPReducer,
    dist: DistInfo,
) -> UpdateRead:
    """The update's one host read (loss, norms, flags, per-example losses), every replica's."""
    example_loss, loss = _global(batch, group, reducer, dist)
    # host sync: the update's one read (the spike probe's z, the step-or-not decision)
    return _decided(batch, clip, read_update(loss, clip, example_loss))  # every replica's loss


class PendingRead:
    """The same read, started without waiting (the pipelined update, ``train/pipeline.py``):
    one device-to-host copy into pinned memory behind the update's work, and an event; its
    :meth:`result` waits for that event only, so the host can do other work meanwhile. On the
    CPU the copy is the value itself. Same values as :func:`read_group`, bit for bit."""

    def __init__(
        self, batch: Batch, group: GroupResult, clip: ClipResult, reducer: Reducer | DDPReducer,
        dist: DistInfo,
    ) -> None:  # fmt: skip
        example_loss, loss = _global(batch, group, reducer, dist)
        self.batch, self.clip, self.example_loss = batch, clip, example_loss
        self.values = update_values(loss, clip, example_loss)
        flat = pack_scalars(*self.values)
        assert flat is not None  # the loss is always there
        self.copy = HostCopy(flat)
        # what the device-side skip reads (StepRunner.step_unless): 1 where the eager path would
        # not step (a non-finite gradient or loss, or the clip mode's skip), as a float32 flag
        self.skip_flag = skip_flag(loss.detach(), clip)

    def result(self) -> UpdateRead:
        """The read, once its copy has landed (waits for that, not for later work)."""
        host = unpack_scalars(self.copy.wait().tolist(), *self.values)
        self.copy.release()  # read once: its pinned buffer serves a later update's read
        return _decided(self.batch, self.clip, split_update(host, self.example_loss))


def skip_flag(loss: torch.Tensor, clip: ClipResult) -> torch.Tensor:
    """0-dim float32 on the loss's device: 1 where the eager path would not step. On CUDA one
    launch of the clipper's extension (k_skip_flag): the torch ops are four, host time the
    device waited for at 12m bf16 on the H200 (issue 20); they stay the CPU's and the fallback."""
    if loss.device.type == "cuda" and loss.numel() == 1:
        from andrea_diag.clip import cuda

        if cuda.available()[0]:
            try:
                return cuda.skip_flag(clip.nonfinite.reshape(()), loss.reshape(()), clip.skip)
            except cuda.unsupported_errors():
                pass
    return torch_skip_flag(loss, clip)


def torch_skip_flag(loss: torch.Tensor, clip: ClipResult) -> torch.Tensor:
    """:func:`skip_flag` through torch's ops: any device."""
    lo = loss  # x - x: 0 where finite, NaN at ±inf or NaN (2 kernels, isfinite 4)
    bad = torch.logical_or(clip.nonfinite, (lo - lo).ne(0))
    return (bad if clip.skip is None else bad | clip.skip).float()


def _global(
    batch: Batch, group: GroupResult, reducer: Reducer | DDPReducer, dist: DistInfo
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every replica's per-example losses and the global loss, on the device."""
    example_loss = gather_examples(group.example_loss, dist, batch.tokens.size(0))
    return example_loss, reducer.all_reduce_sum(group.loss)


def _decided(batch: Batch, clip: ClipResult, read: tuple) -> UpdateRead:
    """The :class:`UpdateRead` of what :func:`~andrea_diag.train.rows.read_update` brought."""
    *head, example_loss_host = read
    loss, grad_norm, clip_nonfinite, clip_skip, post = head  # post: float64, as read
    nonfinite = bool(clip_nonfinite) or not math.isfinite(loss)
    skipped = clip.skip is not None and bool(clip_skip) and not nonfinite  # the mode's choice
    # every replica's sequences, from the host tokens: no device op, no gather (A, m·D)
    example_tokens = (batch.tokens[:, :, 1:] != IGNORE).sum(dim=2).reshape(-1)
    return UpdateRead(
        loss=loss,
        grad_norm=grad_norm,
        post=post,
        grads_nonfinite=bool(clip_nonfinite),
        nonfinite=nonfinite,
        skipped=skipped,
        example_loss=example_loss_host,
        example_tokens=example_tokens,
    )


def loop_columns(
    update: int, batch: Batch, read: UpdateRead, boundary: bool, source_names: Sequence[str],
    *, lr: float, counts: dict[str, int], clip_ms: float, loss_scale: float | None,
) -> dict[str, Any]:  # fmt: skip
    """The row's columns the loop owns: host arithmetic on the values read, no launch."""
    # host tensors: per-source losses without a launch or a copy of the indices
    sources = per_source_loss(
        read.example_loss, read.example_tokens, batch.source_idx.reshape(-1), source_names
    )
    norm = read.grad_norm
    row: dict[str, Any] = {
        "update": update,
        **counts,
        "phase": batch.phase,
        "boundary": boundary,
        **{f"w_{k}": v for k, v in batch.weights.items()},
        "loss": read.loss,
        **sources,
        "grad_norm": norm,
        "lr": lr,
        "grad_norm_post": read.post,
        "clip_coef": read.post / norm if norm > 0 and math.isfinite(norm) else 1.0,
        "clip_ms": clip_ms,
        "nonfinite": read.nonfinite,
        "skipped": read.skipped,
    }
    if loss_scale is not None:  # the loss scale this group's backward used (fp16)
        row["loss_scale"] = loss_scale
    return row
