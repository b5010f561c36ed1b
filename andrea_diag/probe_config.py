"""Every probe default, in one place (``RunConfig.probes``; ``config.py`` re-exports it).

    >>> from andrea_diag.probe_config import ProbeConfig
    >>> ProbeConfig().resolve(steps=240, size="120m").shadow   # the size's preset decides
    False

This module imports only the standard library and the config layer's leaves.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from andrea_diag.errors import BadArgument, UserError
from andrea_diag.field_types import plain_fields
from andrea_diag.fields import MAX_UPDATES, check_bounds, cli
from andrea_diag.presets import PRESETS

UPDATE_STATS_EVERY = 10  # the optimizer-state probe's update RMS / cosine: every N updates
MOMENT_NORMS_EVERY = 10  # ... its norms of m and v (and around spikes: optstate_schedule.py)

LOCKIN_SAMPLES_PER_RUN = 1  # lock-in samples when not given: the final state only (issue 19)
LOCKIN_EVERY_OPEN_ENDED = 100  # ... and for a loop of unknown length (SpikeMonitor)


@dataclass(frozen=True)
class ProbeConfig:
    """Every probe default, in one place: the trainer, ``SpikeMonitor``, the CLI and the report
    read these fields (the report from the run's own ``config.json``)."""

    spike_window: int = field(
        default=50,
        metadata=cli(
            help="Trailing updates of the spike detector's robust z-score.", lo=1, hi=MAX_UPDATES
        ),
    )
    spike_z: float = field(
        default=6.0,
        metadata=cli(
            help="Robust z-score above which an update's gradient norm is a spike.", positive=True
        ),
    )
    boundary_k: int = field(
        default=3,
        metadata=cli(
            help="A spike up to this many updates after a phase boundary is attributed to the "
            "phase transition.",
            lo=0,
            hi=MAX_UPDATES,
        ),
    )
    shadow: bool | None = field(
        default=None,
        metadata=cli(
            flags=("--shadow/--no-shadow",),
            help="Shadow buffers for exact Adam-state pollution (2 fp32 copies of the parameters).",
            shown="on, except for " + ", ".join(n for n, p in PRESETS.items() if not p.shadow),
        ),
    )
    lockin_every: int | None = None  # None: about LOCKIN_SAMPLES_PER_RUN samples per run
    per_layer: bool = True  # per-layer grad / m / v norms
    update_stats: bool = True  # update RMS and its cosine with the gradient (a param snapshot)
    # ... every N updates (and at every spike): the snapshot is ~10 parameter-sized memory
    # passes an update, the optimizer-state probe's largest device cost (issue 20). Every 10:
    # the engine at 0.95x a graphed plain loop at 120m fp32, 0.92 with every update (H200,
    # reports/bench-train/h200-2026-12-02b/)
    update_stats_every: int = field(
        default=UPDATE_STATS_EVERY,
        metadata=cli(
            help="The optimizer-state probe's update RMS and update/gradient cosine (from a "
            "parameter snapshot: about ten parameter-sized memory passes) every N updates and "
            "at every spike; the other rows leave those two columns out (--cuda-graph still "
            "takes the snapshot every update, for a spike known only after the step).",
            lo=1,
            hi=MAX_UPDATES,
        ),
    )
    # ‖m‖ and ‖v‖ read both moments whole: 0.215 ms an update at 120m bf16 on an H200, most of
    # the engine's cost over a graphed plain loop there (reports/bench-train/h200-2026-12-03b/)
    moment_norms_every: int = field(
        default=MOMENT_NORMS_EVERY,
        metadata=cli(
            help="The optimizer-state probe's norms of Adam's m and v (m_norm, v_norm, layer_m/*, "
            "layer_v/*, the shadow's shares) every N updates, at every spike, and every update "
            "from a spike until its recovery is known, so per-spike recovery stays exact; the "
            "other rows leave those columns out.",
            lo=1,
            hi=MAX_UPDATES,
        ),
    )
    lockin: bool = True

    def resolve(self, steps: int | None, size: str | None = None) -> ProbeConfig:
        """Concrete ``shadow`` and ``lockin_every`` for a run of ``steps`` updates; every field
        of its type (a numpy scalar as the number it holds: ``field_types.py``) and bounds."""
        plain = plain_fields(self, "ProbeConfig")
        cfg = dataclasses.replace(self, **plain) if plain else self
        check_bounds(cfg, UserError)
        every = cfg.lockin_every
        if every is not None and every < 1:  # given: it was taken as 1 without a word
            raise BadArgument(f"lockin_every must be at least 1 (a sample every N updates), "
                              f"got {every}")  # fmt: skip
        if every is None:
            every = max(1, steps // LOCKIN_SAMPLES_PER_RUN) if steps else LOCKIN_EVERY_OPEN_ENDED
        if every > MAX_UPDATES:
            raise UserError(f"lockin_every must be at most {MAX_UPDATES}, got {every}")
        shadow = cfg.shadow
        if shadow is None:  # a loop of no preset size (SpikeMonitor) keeps them on
            shadow = PRESETS[size].shadow if size in PRESETS else True
        return dataclasses.replace(cfg, shadow=shadow, lockin_every=every)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProbeConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
