"""Probes: spike detection and attribution, Adam-state pollution, lock-in detection.

``build_probes(cfg, model, optimizer)`` returns the probes a training arm runs; the
protocol they follow is in ``base.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from andrea_diag.probes.base import Probe, UpdateContext

if TYPE_CHECKING:
    import torch

    from andrea_diag.config import RunConfig

__all__ = ["Probe", "UpdateContext", "build_probes"]


def build_probes(
    cfg: RunConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer, **kwargs: object
) -> list[Probe]:
    """The probes for one arm. Filled in by the probes module (spikes, optstate, lockin)."""
    return []
