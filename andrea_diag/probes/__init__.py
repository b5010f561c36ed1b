"""Probes: spike detection and attribution, Adam-state pollution, lock-in detection.

``build_probes(cfg, model, prompts=..., tokenizer=...)`` returns the probes a training arm runs;
:class:`ProbeDriver` (``driver.py``) runs them in the order their declarations require (the spike
probe decides ``ctx.spike`` in ``after_clip`` before the optimizer-state probe reads it in
``after_step``). The protocol they follow is in ``base.py``; ``andrea_diag.monitor`` drives the
same probes, through the same driver, in a user's own training loop.

Summary keys returned by ``close``: ``spikes``, ``pollution``, ``lockin``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from andrea_diag.config import ProbeConfig
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
    cfg: ProbeConfig | None = None,
    *,
    total_steps: int | None = None,
    seed: int = 0,
    prompts: Mapping[str, torch.Tensor] | None = None,
    tokenizer: Any = None,
    unigram_entropy: float | None = None,
    groups: Mapping[str, tuple[str, str]] | None = None,
    vocab_size: int | None = None,
    block_size: int | None = None,
    source_names: Sequence[str] | None = None,
) -> list[Probe]:
    """The probes of a resolved ``ProbeConfig`` (what the trainer and the monitor share).

    ``prompts`` (source -> 1-D token ids) and ``tokenizer`` (``.decode(list[int])``) feed the
    lock-in samples; without prompts the lock-in verdict uses the loss trajectory only.
    ``groups`` (parameter name -> (layer, kind)), ``vocab_size`` and ``block_size``: what the
    caller knows of a model that is not ours (None: read from names and the model's config).
    """
    cfg = (cfg or ProbeConfig()).resolve(total_steps)  # idempotent on a resolved config
    probes: list[Probe] = []
    if cfg.per_layer:
        probes.append(LayerGradNormProbe(groups))
    names = {} if source_names is None else {"source_names": tuple(source_names)}  # who spiked
    probes.append(SpikeProbe(cfg.spike_window, cfg.spike_z, cfg.boundary_k, **names))
    probes.append(
        OptStateProbe(
            shadow=bool(cfg.shadow),
            per_layer=cfg.per_layer,
            update_stats=cfg.update_stats,
            update_stats_every=cfg.update_stats_every,
            groups=groups,
        )
    )
    if cfg.lockin:
        probes.append(
            LockInProbe(
                model,
                prompts,
                tokenizer,
                every=int(cfg.lockin_every or 1),
                total_steps=total_steps,
                seed=seed,
                unigram_entropy=unigram_entropy,
                vocab_size=vocab_size,
                block_size=block_size,
            )
        )
    return probes


def build_probes(
    cfg: RunConfig,
    model: torch.nn.Module,
    *,
    prompts: Mapping[str, torch.Tensor] | None = None,
    tokenizer: Any = None,
    unigram_entropy: float | None = None,
    source_names: Sequence[str] | None = None,
) -> list[Probe]:
    """The probes for one arm of a resolved ``RunConfig``."""
    cfg = cfg.resolve()  # idempotent; the per-size defaults (shadow, lock-in cadence) live there
    return make_probes(
        model,
        cfg.probes,
        total_steps=cfg.steps,
        seed=cfg.seed,
        prompts=prompts,
        tokenizer=tokenizer,
        unigram_entropy=unigram_entropy,
        source_names=source_names,
    )
