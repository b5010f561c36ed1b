"""The probe protocol: how the training loop (and ``andrea_diag.monitor``) talks to probes.

Per optimizer update the loop fills one :class:`UpdateContext` and calls, in order:

1. ``after_clip(ctx)``: gradients are final (clipped if the arm clips), the optimizer has not
   stepped yet, so Adam's ``m``/``v`` still hold the previous update's state;
2. ``after_step(ctx)``: parameters and optimizer state are updated.

Probes add metric columns to ``ctx.row`` (one row per update, see record.py for naming) and
may write events/samples through ``ctx.recorder``. At the end, ``close(run_dir)`` runs once
for post-hoc work (e.g. the spike events table) and returns summary fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from andrea_diag.clip.api import ClipResult
    from andrea_diag.record import Recorder


@dataclass
class UpdateContext:
    """What one optimizer update saw. Tensors are detached; nothing here holds the graph."""

    update: int  # 1-based optimizer update index (the metrics table's unit)
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    param_names: list[str]  # order of clip.per_tensor_norm (parameters with a gradient)
    params: list[torch.nn.Parameter]  # same order
    loss: float  # the group's token-weighted loss
    example_loss: torch.Tensor  # (n_examples,) mean token loss of each sequence in the group
    example_source: torch.Tensor  # (n_examples,) source index into SOURCE_NAMES, or -1
    clip: ClipResult | None  # None when the user's loop does not clip through us
    recorder: Recorder
    row: dict[str, Any]  # the metrics row under construction; probes add columns
    phase: int = 0
    boundary: bool = False  # first update of a new bandit phase
    weights: dict[str, float] = field(default_factory=dict)
    injected: str | None = None  # "outlier" / "nonfinite" when this update was injected
    applied: bool = True  # False when the update was skipped (non-finite)


class Probe(Protocol):
    def after_clip(self, ctx: UpdateContext) -> None: ...

    def after_step(self, ctx: UpdateContext) -> None: ...

    def close(self, run_dir: Path) -> dict[str, Any]: ...
