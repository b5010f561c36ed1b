"""Spike detection and attribution: which updates spiked, and why.

**Online detection** (in ``after_clip``, so the optimizer-state probe knows at update ``s``
whether ``s`` is a spike). For the loss and for the pre-clip global gradient norm:

- robust z-score ``z = (x - median) / (1.4826 * MAD)`` over the trailing window of the
  previous ``window`` (``cfg.spike_window``) *finite* values, the current value excluded;
  the scale is floored at ``REL_FLOOR * |median|`` so a flat history cannot make float noise
  look like a spike;
- **the loss signal is mix-adjusted** when the examples carry source labels (our loop): each
  sequence's loss minus the median of its source's recent per-update mean losses, averaged
  over the batch (``loss_excess`` column). The bandit's mix moves the raw loss by nats (its
  sources differ that much) without shocking the model; the excess is what the model did
  worse than its sources usually cost. Without labels (a user's loop) or in the first
  updates (fewer than 3 means per source), the raw loss is used;
- a spike is ``z > z_thresh`` (``cfg.spike_z``; upward only: a sudden *drop* is not a spike);
- **warm-up**: no z (``None`` in the ``loss_z``/``grad_norm_z`` columns, no spike by z) until
  ``warmup = max(5, window // 5)`` finite values precede the update (10 for the default 50);
- a non-finite loss or gradient norm, or an update skipped for one (``ctx.applied`` False), is
  always a spike event (cause ``numerical``), with ``z = None``. An update the clip mode chose
  to skip (``ctx.skipped``: skip-update) is an event only if its z says so.

**Attribution** (each event gets one or more causes; ``cause`` joins them with "+"):

- ``phase-transition``: the update is within ``boundary_k`` updates after a bandit boundary
  (``0 <= update - boundary <= boundary_k``; the boundary is the first update of a phase);
- ``outlier``: a few sequences carry the batch's loss excess: the excess has robust z above
  ``EXCESS_Z`` (3) and the batch *without its worst quarter of sequences* is ordinary again
  (z below ``REST_Z``, 2). A phase shift raises every sequence's loss, so its rest stays high.
  Without source labels, the fallback: robust z of the worst example's loss against the rest
  of the batch above ``outlier_z`` (5.0);
- ``numerical``: non-finite loss, non-finite gradient (``ctx.clip.nonfinite``) or an update
  skipped for a non-finite value;
- ``unexplained``: none of the above.

``ctx.injected`` is never read here: it is the ground truth the tests compare against.

**Cascades**: phase-transition spikes that follow *successive* boundaries (boundary ordinals
``j, j+1, ...``, at least two) form one cascade; their events carry its id (0, 1, ...), every
other event has ``cascade = None``.

**OLMo 2 spike score** (:func:`spike_score`): the percentage of values at least 7 standard
deviations (population std) from the mean of the previous 1,000 values. Warm-up for short
runs: a value is scored once ``OLMO_MIN_HISTORY = 50`` finite values precede it (the window is
then whatever history exists, up to 1,000); a non-finite value with enough history counts as a
spike; ``None`` when nothing was scored.

Metric columns every update: ``loss_z``, ``grad_norm_z`` (None during warm-up), ``spike``
(bool, the online decision), ``loss_excess`` (the mix-adjusted loss, None without source
labels or in warm-up) and ``example_loss_max_z`` (robust z of the batch's worst
example, so an outlier sequence that did not cause a spike is still visible).

Events (one row per (update, metric); an update whose loss and grad norm both spike gives two
rows) are written at ``close()``, because cascades need the boundaries that come later.
Summary counts: ``n_spikes`` = event rows; ``by_cause`` counts every cause of every event
(so it can sum to more than ``n_spikes``).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch

from andrea_diag import metrics
from andrea_diag.config import SOURCE_NAMES
from andrea_diag.probes.base import ProbeState, UpdateContext, robust_scale
from andrea_diag.probes.spike_stats import (
    OLMO_MIN_HISTORY,
    OLMO_N_STD,
    OLMO_WINDOW,
    batch_outlier,
    spike_score,
)

CAUSES = ("phase-transition", "outlier", "numerical", "unexplained")
REL_FLOOR = 1e-3  # spike z scale floor, relative to the window median
OUTLIER_Z = 5.0
EXCESS_Z = 3.0  # outlier cause: the batch's mix-adjusted loss excess is unusual ...
REST_Z = 2.0  # ... and ordinary again once its worst quarter of sequences is left out


def warmup_for(window: int) -> int:
    """Finite values needed before a robust z is computed."""
    return max(5, window // 5)


class SpikeProbe(ProbeState):
    """Online spike flags (``loss_z``, ``grad_norm_z``, ``spike`` columns) + events at close."""

    # the recorder is set again from the context at every update; the memo is rebuilt
    transient = ("recorder", "_version", "_scales")
    name = "spikes"
    columns: ClassVar[tuple[metrics.Column, ...]] = (
        metrics.LOSS_EXCESS, metrics.EXAMPLE_LOSS_MAX_Z, metrics.LOSS_Z, metrics.GRAD_NORM_Z,
        metrics.SPIKE,
    )  # fmt: skip
    writes = ("spike",)  # ctx.spike, decided in after_clip
    pipeline_safe = True  # host values and the clip pass's norms only (train/pipeline.py)
    summary_key = "spikes"
    close_reads = ("pollution",)  # per-spike recovery for the events table

    def __init__(
        self,
        window: int = 50,
        z_thresh: float = 6.0,
        boundary_k: int = 3,
        outlier_z: float = OUTLIER_Z,
        source_names: Sequence[str] = SOURCE_NAMES,
    ) -> None:
        self.window, self.z_thresh, self.boundary_k = int(window), float(z_thresh), boundary_k
        self.outlier_z = outlier_z
        self.warmup = warmup_for(self.window)
        self.source_names = tuple(source_names)
        self._win = {
            "loss": deque(maxlen=self.window),
            "grad_norm": deque(maxlen=self.window),
            "excess": deque(maxlen=self.window),  # mix-adjusted loss (see _residuals)
        }
        self.history: dict[str, list[float]] = {"loss": [], "grad_norm": []}
        self.boundaries: list[int] = []
        self._src_hist: dict[int, deque[float]] = {}  # source -> recent per-update mean losses
        self.events: list[dict[str, Any]] = []
        self.recorder: Any = None
        self._closed: dict[str, Any] | None = None
        self._version = 0  # bumped as the windows move: the key of the memo below
        self._scales: dict[str, tuple[int, tuple[float, float]]] = {}  # window_scale's memo

    # -- online ---------------------------------------------------------------------------
    def _z(self, metric: str, value: float) -> float | None:
        win = self._win[metric]
        if len(win) < self.warmup or not win or not math.isfinite(value):
            return None  # robust_z's rule: no z for an empty window or a non-finite value
        med, scale = self.window_scale(metric)
        return (value - med) / scale

    def window_scale(self, metric: str) -> tuple[float, float]:
        """(median, scale) of a window (:func:`robust_scale`), computed once per state of the
        windows: the pipelined bound (spike_bound.py), this update's z and the concentration
        test read the same windows, six sorts of 50 values an update in the host time the
        device waits for at 12m (issue 20). The same function of the same values: same bits."""
        hit = self._scales.get(metric)
        if hit is not None and hit[0] == self._version:
            return hit[1]
        scale = robust_scale(list(self._win[metric]), REL_FLOOR)
        self._scales[metric] = (self._version, scale)
        return scale

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._scales, self._version = {}, 0  # new windows: nothing memoized holds for them

    def after_clip(self, ctx: UpdateContext) -> None:
        self.recorder = ctx.recorder
        u = ctx.update
        if ctx.boundary:  # decided once, by the probe driver
            self.boundaries.append(u)
        loss, gn = float(ctx.loss), ctx.grad_norm()
        grad_bad = ctx.grads_nonfinite() or not math.isfinite(gn)
        loss_bad = not math.isfinite(loss)
        resid, mix_adjusted = (
            self._residuals(ctx) if ctx.example_loss.numel() else (ctx.example_loss, False)
        )
        excess = float(resid.mean()) if mix_adjusted else math.nan
        # With source labels, the loss signal is the batch's excess over what its sources
        # usually cost: a bandit shift towards a harder source moves the raw loss by nats
        # without shocking the model, and would otherwise hide a real spike in the noise.
        loss_signal = "excess" if mix_adjusted and math.isfinite(excess) else "loss"
        z = {
            "loss": self._z(loss_signal, excess if loss_signal == "excess" else loss),
            "grad_norm": self._z("grad_norm", gn),
        }
        if loss_bad:
            z["loss"] = None  # a non-finite loss has no z; it is an event of its own below
        flagged = [m for m in ("loss", "grad_norm") if z[m] is not None and z[m] > self.z_thresh]
        if loss_bad and "loss" not in flagged:
            flagged.append("loss")
        if grad_bad and "grad_norm" not in flagged:
            flagged.append("grad_norm")
        if not ctx.applied and not ctx.skipped and not flagged:
            flagged.append("grad_norm")  # a skipped update is always an event
        # every update, not only at spikes: an outlier sequence that moves neither the loss nor
        # the grad norm enough to spike is still visible in the metrics (16 values: ~50 us)
        worst, worst_z = batch_outlier(resid) if resid.numel() else (None, None)
        concentrated = self._concentrated(resid, excess) if loss_signal == "excess" else None
        ctx.row["loss_excess"] = excess if loss_signal == "excess" else None
        ctx.row["example_loss_max_z"] = worst_z
        ctx.row["loss_z"] = z["loss"]
        ctx.row["grad_norm_z"] = z["grad_norm"]
        ctx.row["spike"] = bool(flagged)
        ctx.spike = bool(flagged)
        if flagged:
            self._record(
                ctx,
                flagged,
                {"loss": loss, "grad_norm": gn},
                z,
                loss_bad or grad_bad,
                worst,
                worst_z,
                concentrated,
            )
        for metric, value in (("loss", loss), ("grad_norm", gn)):
            self.history[metric].append(value)
            if math.isfinite(value):
                self._win[metric].append(value)
        if math.isfinite(excess):
            self._win["excess"].append(excess)
        self._version += 1  # the windows moved: window_scale recomputes

    def _residuals(self, ctx: UpdateContext) -> tuple[torch.Tensor, bool]:
        """Each example's loss minus its source's recent typical loss.

        The bandit mixes sources whose loss levels differ by nats, so against the raw batch
        every batch looks like it holds "outliers" (the hardest source's sequences). Against
        the median of its own source's last ``window`` per-update means, an example is an
        outlier only when it is far from what that source usually costs. Until every source in
        the batch has 3 such means (warm-up), or without source labels (a user's loop), the
        raw losses are used; the flag says which.
        """
        loss = ctx.example_loss.detach().reshape(-1).float().cpu()
        src = ctx.example_source.detach().reshape(-1).tolist()  # host copy of n ints
        if len(src) != loss.numel() or min(src, default=0) < 0:
            return loss, False
        # Plain Python over ~16 numbers: cheaper than tensor ops of this size.
        values = loss.tolist()
        ref = self.source_refs(src)  # judged against the past only: before this batch's means
        groups: dict[int, list[float]] = {}
        for i, x in zip(src, values, strict=True):
            groups.setdefault(i, []).append(x)
        for i, xs in groups.items():
            m = sum(xs) / len(xs)
            if math.isfinite(m):
                self._src_hist.setdefault(i, deque(maxlen=self.window)).append(m)
        if ref is None:
            return loss, False
        return torch.tensor([x - r for x, r in zip(values, ref, strict=True)]), True

    def source_refs(self, sources: list[int]) -> list[float] | None:
        """Each example's reference, the median of its source's recent per-update mean
        losses; None where the raw loss is the signal: no source labels, or a source of the
        batch with fewer than 3 means (the warm-up). The pipelined bound reads it too
        (spike_bound.py)."""
        if not sources or min(sources) < 0:
            return None
        hist = {i: self._src_hist.get(i) for i in set(sources)}
        if not all(h is not None and len(h) >= 3 for h in hist.values()):
            return None
        ref = {i: statistics.median(h) for i, h in hist.items() if h is not None}
        return [ref[i] for i in sources]

    def _concentrated(self, resid: torch.Tensor, excess: float) -> bool | None:
        """Is this batch's loss excess carried by a few sequences (an outlier example)?

        True when the excess is itself unusual (robust z > ``EXCESS_Z``) and the batch without
        its worst quarter of sequences is ordinary again (z < ``REST_Z``): a few examples explain
        the batch. A phase shift raises every sequence's loss, so its rest stays high.
        """
        win = self._win["excess"]
        if len(win) < self.warmup or not math.isfinite(excess) or resid.numel() < 4:
            return None
        k = math.ceil(resid.numel() / 4)
        rest = float(resid.sort().values[:-k].mean())
        z_all, z_rest = self._z("excess", excess), self._z("excess", rest)
        return z_all > EXCESS_Z and z_rest < REST_Z

    def _record(
        self,
        ctx: UpdateContext,
        flagged: list[str],
        values: dict[str, float],
        z: dict[str, float | None],
        nonfinite: bool,
        idx: int | None,
        oz: float | None,
        concentrated: bool | None = None,
    ) -> None:
        u = ctx.update
        causes: list[str] = []
        boundary = next(
            (b for b in reversed(self.boundaries) if 0 <= u - b <= self.boundary_k), None
        )
        if boundary is not None:
            causes.append("phase-transition")
        if (
            concentrated
            if concentrated is not None
            else (oz is not None and math.isfinite(oz) and oz > self.outlier_z)
        ):
            causes.append("outlier")
        if nonfinite or not (ctx.applied or ctx.skipped):
            causes.append("numerical")
        if not causes:
            causes.append("unexplained")
        source = None
        if idx is not None and ctx.example_source.numel() > idx:
            s = int(ctx.example_source.reshape(-1)[idx])
            source = self.source_names[s] if 0 <= s < len(self.source_names) else None
        for metric in flagged:
            self.events.append(
                {
                    "update": u,
                    "metric": metric,
                    "value": values[metric],
                    "z": z[metric],
                    "causes": list(causes),
                    "cause": "+".join(causes),
                    "phase": ctx.phase,
                    **{f"w_{k}": v for k, v in ctx.weights.items()},
                    "boundary_update": boundary,
                    "cascade": None,
                    "outlier_example": idx if "outlier" in causes or oz == math.inf else None,
                    "outlier_source": source if "outlier" in causes or oz == math.inf else None,
                    "outlier_z": oz,
                }
            )

    def after_step(self, ctx: UpdateContext) -> None:
        return None

    # -- post hoc -------------------------------------------------------------------------
    def _cascades(self) -> int:
        """Label phase-transition events at successive boundaries with a cascade id."""
        ordinal = {b: j for j, b in enumerate(self.boundaries)}
        hit = sorted(
            {ordinal[e["boundary_update"]] for e in self.events if e["boundary_update"] is not None}
        )
        runs: list[list[int]] = []
        for j in hit:
            if runs and runs[-1][-1] == j - 1:
                runs[-1].append(j)
            else:
                runs.append([j])
        cascade_of: dict[int, int] = {}
        n = 0
        for run in runs:
            if len(run) >= 2:
                cascade_of.update({j: n for j in run})
                n += 1
        for e in self.events:
            b = e["boundary_update"]
            e["cascade"] = cascade_of.get(ordinal[b]) if b is not None else None
        return n

    def close(self, run_dir: Path, results: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Write the events; ``results["pollution"]`` (when present) adds recovery columns."""
        if self._closed is not None:  # idempotent: the monitor and the loop may both close
            return self._closed
        n_cascades = self._cascades()
        per_spike = ((results or {}).get("pollution") or {}).get("per_spike") or []
        recovery = {r["update"]: r for r in per_spike}
        for e in self.events:
            r = recovery.get(e["update"], {})
            e["recovery_m"] = r.get("recovery_m")
            e["recovery_v"] = r.get("recovery_v")
            if self.recorder is not None:
                self.recorder.event(e)
        by_cause = {c: sum(c in e["causes"] for e in self.events) for c in CAUSES}
        self._closed = {
            "spikes": {
                "n_spikes": len(self.events),
                "n_grad_spikes": sum(e["metric"] == "grad_norm" for e in self.events),
                "n_loss_spikes": sum(e["metric"] == "loss" for e in self.events),
                "spike_score_loss": spike_score(self.history["loss"]),
                "spike_score_grad": spike_score(self.history["grad_norm"]),
                "by_cause": by_cause,
                "n_cascades": n_cascades,
                "spike_updates": sorted({e["update"] for e in self.events}),
                "n_boundaries": len(self.boundaries),
                "thresholds": {
                    "spike_window": self.window,
                    "spike_z": self.z_thresh,
                    "warmup": self.warmup,
                    "z_scale_rel_floor": REL_FLOOR,
                    "boundary_k": self.boundary_k,
                    "outlier_z": self.outlier_z,
                    "olmo_window": OLMO_WINDOW,
                    "olmo_n_std": OLMO_N_STD,
                    "olmo_min_history": OLMO_MIN_HISTORY,
                },
            }
        }
        return self._closed
