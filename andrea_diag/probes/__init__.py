"""Probes: spike detection and attribution, Adam-state pollution, lock-in detection.

``build_probes(cfg, model, prompts=..., tokenizer=...)`` returns the probes a training arm runs:
one per factory registered in :data:`PROBES` (``@register_probe(name)``: a new probe is its class
and one factory). :class:`ProbeDriver` (``driver.py``) runs them in the order their declarations require (the spike
probe decides ``ctx.spike`` in ``after_clip`` before the optimizer-state probe reads it in
``after_step``). The protocol they follow is in ``base.py``; ``andrea_diag.monitor`` drives the
same probes, through the same driver, in a user's own training loop.

Summary keys returned by ``close``: ``spikes``, ``pollution``, ``lockin``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from andrea_diag.config import ProbeConfig
from andrea_diag.probes.base import Probe, UpdateContext
from andrea_diag.probes.driver import ProbeDriver
from andrea_diag.probes.layers import LayerGradNormProbe
from andrea_diag.probes.lockin import LockInProbe
from andrea_diag.probes.optstate import OptStateProbe
from andrea_diag.probes.optstate_graph import ScalarGraph
from andrea_diag.probes.spikes import SpikeProbe

if TYPE_CHECKING:
    import torch

    from andrea_diag.config import RunConfig

__all__ = [
    "PROBES",
    "LayerGradNormProbe",
    "LockInProbe",
    "OptStateProbe",
    "Probe",
    "ProbeDriver",
    "ProbeSetup",
    "SpikeProbe",
    "UpdateContext",
    "build_probes",
    "make_probes",
    "register_probe",
]


@dataclass(frozen=True)
class ProbeSetup:
    """What a probe's factory may read: the resolved probe config and what the caller knows."""

    model: torch.nn.Module
    cfg: ProbeConfig  # resolved
    total_steps: int | None = None
    seed: int = 0
    prompts: Mapping[str, torch.Tensor] | None = None
    tokenizer: Any = None
    unigram_entropy: float | None = None
    groups: Mapping[str, tuple[str, str]] | None = None
    vocab_size: int | None = None
    block_size: int | None = None
    source_names: Sequence[str] | None = None


ProbeFactory = Callable[[ProbeSetup], "Probe | None"]  # None: off under this config
# The default probes, in registration order (the driver orders them by reads/writes anyway).
PROBES: dict[str, ProbeFactory] = {}


def register_probe(name: str) -> Callable[[ProbeFactory], ProbeFactory]:
    """Decorator: ``factory(setup)`` builds probe ``name`` for every run (None when off)."""

    def deco(factory: ProbeFactory) -> ProbeFactory:
        PROBES[name] = factory
        return factory

    return deco


@register_probe("layers")
def _layers(s: ProbeSetup) -> Probe | None:
    return LayerGradNormProbe(s.groups) if s.cfg.per_layer else None


@register_probe("spikes")
def _spikes(s: ProbeSetup) -> Probe:
    names = {} if s.source_names is None else {"source_names": tuple(s.source_names)}  # who
    return SpikeProbe(s.cfg.spike_window, s.cfg.spike_z, s.cfg.boundary_k, **names)


@register_probe("optstate")
def _optstate(s: ProbeSetup) -> Probe:
    return OptStateProbe(shadow=bool(s.cfg.shadow), per_layer=s.cfg.per_layer,
                         update_stats=s.cfg.update_stats,
                         update_stats_every=s.cfg.update_stats_every, groups=s.groups,
                         moment_norms_every=s.cfg.moment_norms_every)  # fmt: skip


@register_probe("lockin")
def _lockin(s: ProbeSetup) -> Probe | None:
    if not s.cfg.lockin:
        return None
    return LockInProbe(s.model, s.prompts, s.tokenizer, every=int(s.cfg.lockin_every or 1),
                       total_steps=s.total_steps, seed=s.seed, unigram_entropy=s.unigram_entropy,
                       vocab_size=s.vocab_size, block_size=s.block_size)  # fmt: skip


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
    """The probes of a resolved ``ProbeConfig`` (what the trainer and the monitor share): every
    registered factory's (:data:`PROBES`), those its config turns off left out.

    ``prompts`` (source -> 1-D token ids) and ``tokenizer`` (``.decode(list[int])``) feed the
    lock-in samples; without prompts the lock-in verdict uses the loss trajectory only.
    ``groups`` (parameter name -> (layer, kind)), ``vocab_size`` and ``block_size``: what the
    caller knows of a model that is not ours (None: read from names and the model's config).
    """
    cfg = (cfg or ProbeConfig()).resolve(total_steps)  # idempotent on a resolved config
    setup = ProbeSetup(model, cfg, total_steps, seed, prompts, tokenizer, unigram_entropy,
                       groups, vocab_size, block_size, source_names)  # fmt: skip
    return [p for factory in PROBES.values() if (p := factory(setup)) is not None]


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
    probes = make_probes(
        model,
        cfg.probes,
        total_steps=cfg.steps,
        seed=cfg.seed,
        prompts=prompts,
        tokenizer=tokenizer,
        unigram_entropy=unigram_entropy,
        source_names=source_names,
    )
    spikes = next((p for p in probes if isinstance(p, SpikeProbe)), None)
    for probe in probes:
        if isinstance(probe, OptStateProbe):
            probe.spike_source = spikes  # its decision bounds the pipelined copies
            probe.fused_norms = cfg.clip_impl != "reference"  # the extension, where it builds
            probe.graphs = ScalarGraph() if cfg.cuda_graph else None  # its arithmetic, replayed
    return probes
