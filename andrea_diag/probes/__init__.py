"""Probes: spike detection and attribution, Adam-state pollution, lock-in detection.

``build_probes(cfg, model, optimizer, prompts=..., tokenizer=...)`` returns the probes a
training arm runs, in the order the loop must call them (the spike probe decides
``ctx.spike`` in ``after_clip`` before the optimizer-state probe reads it in ``after_step``).
The protocol they follow is in ``base.py``; ``andrea_diag.monitor`` wraps the same probes for
a user's own training loop.

Summary keys returned by ``close``: ``spikes``, ``pollution``, ``lockin``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from andrea_diag.probes.base import Probe, UpdateContext
from andrea_diag.probes.driver import ProbeDriver
from andrea_diag.probes.layers import LayerGradNormProbe
from andrea_diag.probes.lockin import LockInProbe
from andrea_diag.probes.optstate import OptStateProbe
from andrea_diag.probes.spikes import SpikeProbe

if TYPE_CHECKING:
    import torch

    from andrea_diag.config import RunConfig

__all__ = [
    "LayerGradNormProbe",
    "LockInProbe",
    "OptStateProbe",
    "Probe",
    "ProbeDriver",
    "SpikeProbe",
    "UpdateContext",
    "build_probes",
    "make_probes",
]


def make_probes(
    model: torch.nn.Module,
    *,
    spike_window: int = 50,
    spike_z: float = 6.0,
    boundary_k: int = 3,
    shadow: bool = True,
    lockin_every: int = 30,
    total_steps: int | None = None,
    seed: int = 0,
    prompts: Mapping[str, torch.Tensor] | None = None,
    tokenizer: Any = None,
    lockin: bool = True,
    unigram_entropy: float | None = None,
    per_layer: bool = True,
    update_stats: bool = True,
) -> list[Probe]:
    """The probe list from plain arguments (what ``build_probes`` and the monitor share)."""
    optstate = OptStateProbe(shadow=shadow, per_layer=per_layer, update_stats=update_stats)
    probes: list[Probe] = []
    if per_layer:
        probes.append(LayerGradNormProbe())
    probes.append(SpikeProbe(spike_window, spike_z, boundary_k))
    probes.append(optstate)
    if lockin:
        probes.append(
            LockInProbe(
                model,
                prompts,
                tokenizer,
                every=lockin_every,
                total_steps=total_steps,
                seed=seed,
                unigram_entropy=unigram_entropy,
            )
        )
    return probes


def build_probes(
    cfg: RunConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    prompts: Mapping[str, torch.Tensor] | None = None,
    tokenizer: Any = None,
    **kwargs: Any,
) -> list[Probe]:
    """The probes for one arm of a resolved ``cfg``; extra ``kwargs`` go to :func:`make_probes`.

    ``prompts`` (source -> 1-D token ids) and ``tokenizer`` (``.decode(list[int])``) feed the
    lock-in samples; without prompts the lock-in verdict uses the loss trajectory only.
    """
    del optimizer  # the probes read it from each UpdateContext (it may be rebuilt)
    cfg = cfg.resolve()  # idempotent; the per-size defaults (shadow, lock-in cadence) live there
    return make_probes(
        model,
        spike_window=cfg.spike_window,
        spike_z=cfg.spike_z,
        boundary_k=cfg.boundary_k,
        shadow=bool(cfg.shadow),
        lockin_every=cfg.lockin_every,
        total_steps=cfg.steps,
        seed=cfg.seed,
        prompts=prompts,
        tokenizer=tokenizer,
        **kwargs,
    )
