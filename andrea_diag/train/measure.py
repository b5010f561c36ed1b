"""The update's measurement: its one host read, as a typed :class:`UpdateRead`.

    read = read_group(batch, group, clip, trainer.reducer, trainer.dist)  # host sync
    read.loss, read.grad_norm, read.applied  # host values: no further device read

The trainer (``loop.py``) builds the metrics row's loop columns and the probes'
:class:`~andrea_diag.probes.UpdateContext` from this one value, so neither reads the device
again. Kept apart from ``loop.py`` so ``Trainer._measure`` reads as its three steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from andrea_diag.clip.api import ClipResult
from andrea_diag.train.accumulation import IGNORE, GroupResult
from andrea_diag.train.components import Reducer
from andrea_diag.train.distributed import DDPReducer, DistInfo, gather_examples
from andrea_diag.train.rows import read_update

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
    accum = batch.tokens.size(0)
    example_loss = gather_examples(group.example_loss, dist, accum)
    # every replica's sequences, from the host tokens: no device op, no gather (A, m·D)
    example_tokens = (batch.tokens[:, :, 1:] != IGNORE).sum(dim=2).reshape(-1)
    # host sync: the update's one read (the spike probe's z, the step-or-not decision)
    *head, example_loss_host = read_update(  # every replica: the global loss
        reducer.all_reduce_sum(group.loss), clip, example_loss
    )
    loss, grad_norm, clip_nonfinite, clip_skip, post = head  # post: float64, as read
    nonfinite = bool(clip_nonfinite) or not math.isfinite(loss)
    skipped = clip.skip is not None and bool(clip_skip) and not nonfinite  # the mode's choice
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
