"""The probe protocol: how the training loop (and ``andrea_diag.monitor``) talks to probes.

Per optimizer update the loop fills one :class:`UpdateContext` and calls, in order:

1. ``after_clip(ctx)``: gradients are final (clipped if the arm clips), the optimizer has not
   stepped yet, so Adam's ``m``/``v`` still hold the previous update's state;
2. ``after_step(ctx)``: parameters and optimizer state are updated. Gradients must still be in
   ``.grad`` here (zero them after ``after_step``, not before): the optimizer-state probe reads
   the gradient Adam just received.

Probes add metric columns to ``ctx.row`` (one row per update) and may write events/samples
through ``ctx.recorder``. Each column a probe writes is declared in ``andrea_diag.metrics`` under
the probe's ``name`` and listed in the probe's ``columns`` class attribute; the driver refuses
any other write (an undeclared column, or one the loop, the evaluator or another probe owns). At the end, ``close(run_dir, results)``
runs once for post-hoc work (e.g. the spike events table) and returns summary fields, each
probe under its own top-level key (``{"spikes": {...}}``); ``results`` holds what the probes
closed before it returned.

Probes talk to each other only through the context, and say so: the spike probe ``writes``
``ctx.spike`` in ``after_clip``, the optimizer-state probe ``reads`` it in ``after_step``; the
spike probe's ``close_reads`` the optimizer state's ``summary_key`` (``pollution``) for its
events' recovery columns. :class:`~andrea_diag.probes.driver.ProbeDriver` orders the calls
from these declarations and isolates a failing probe; nothing depends on list order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

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
    # the metrics row under construction; during a probe's hook, the driver's guarded view of it
    row: MutableMapping[str, Any]
    phase: int = 0
    boundary: bool = False  # first update of a new bandit phase
    weights: dict[str, float] = field(default_factory=dict)
    injected: str | None = None  # "outlier" / "nonfinite" when this update was injected
    applied: bool = True  # False when the update was skipped (non-finite, or by the clip mode)
    skipped: bool = False  # True when the clip mode (skip-update) chose to skip a finite update
    # Set by the spike probe in after_clip (online decision); read by the optimizer-state
    # probe in after_step, whose shadow buffers must know *now* whether this is a spike.
    spike: bool = False
    # Per-update memo shared by probes (e.g. grad norms computed once when clip is None).
    cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def grads(self) -> list[torch.Tensor]:
        """The gradients of ``params`` (those that have one), in ``param_names`` order."""
        if "grads" not in self.cache:
            self.cache["grads"] = [p.grad for p in self.params if p.grad is not None]
        return self.cache["grads"]

    def per_tensor_grad_norm(self) -> torch.Tensor:
        """(n_tensors,) pre-clip gradient norms: from ``clip`` (same pass), else computed once.

        Without ``clip`` the gradients are read as they are now, so a caller that clipped by
        other means gets post-clip norms (``andrea_diag.monitor`` rescales them back).
        """
        if "per_tensor" not in self.cache:
            if self.clip is not None:
                per = self.clip.per_tensor_norm
            else:
                from andrea_diag.clip.reference import clip_reference

                # the clipper's own chunked reduction, measuring only: torch's fp32 norm
                # kernel drifts by ~1e-4 on large, skewed tensors (the head's gradient)
                grads = self.grads()
                per = clip_reference(grads, math.inf, apply=False)[1] if grads else torch.zeros(0)
            self.cache["per_tensor"] = per.detach()
        return self.cache["per_tensor"]

    def grad_norm(self) -> float:
        """Pre-clip global gradient norm as a Python float (host sync on GPU)."""
        if "grad_norm" not in self.cache:
            if isinstance(self.row.get("grad_norm"), (int, float)):
                value = float(self.row["grad_norm"])
            elif self.clip is not None:
                value = float(self.clip.total_norm)
            else:
                per = self.per_tensor_grad_norm()
                value = float(per.double().square().sum().sqrt()) if per.numel() else 0.0
            self.cache["grad_norm"] = value
        return self.cache["grad_norm"]

    def grads_nonfinite(self) -> bool:
        """True when the gradient norm is NaN/Inf (from ``clip.nonfinite`` when available)."""
        if "grads_nonfinite" in self.cache:  # the loop read it already, in its one host sync
            return bool(self.cache["grads_nonfinite"])
        if self.clip is not None:
            return bool(self.clip.nonfinite)
        return not math.isfinite(self.grad_norm())


class ProbeState:
    """``state_dict`` / ``load_state_dict`` for a probe: its attributes, minus ``transient`` ones
    (references to the model, the recorder or a tokenizer, and caches rebuilt on first use).
    A checkpoint stores the result, so a resumed run's probes continue exactly."""

    transient: ClassVar[tuple[str, ...]] = ()

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k not in self.transient}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        vars(self).update(state)


class Probe(Protocol):
    """What the driver calls. Optional class attributes: ``name``, ``columns`` (the metrics
    columns it writes: ``andrea_diag.metrics`` entries), ``reads`` and ``writes`` (context
    fields), ``summary_key`` and ``close_reads`` (summary keys); see the module doc."""

    def after_clip(self, ctx: UpdateContext) -> None: ...

    def after_step(self, ctx: UpdateContext) -> None: ...

    def close(self, run_dir: Path, results: Mapping[str, Any] | None = None) -> dict[str, Any]: ...


def _median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else 0.5 * (s[mid - 1] + s[mid])


def robust_scale(history: list[float], rel_floor: float) -> tuple[float, float]:
    """(median, scale) of :func:`robust_z`: scale = 1.4826 * MAD, floored."""
    med = _median(history)
    mad = _median([abs(x - med) for x in history])
    return med, max(1.4826 * mad, rel_floor * abs(med), 1e-12)


def robust_z(value: float, history: Iterable[float], rel_floor: float) -> float | None:
    """Robust z-score of ``value`` against ``history``: (x - median) / (1.4826 * MAD).

    The scale is floored at ``rel_floor * |median|`` (and 1e-12) so a flat history (MAD 0)
    does not turn float noise into infinite z. Returns None for an empty history or a
    non-finite value. Pure Python on purpose: for the ~50 values of a spike window, sorting
    a list is several times faster than numpy's median (this runs every update).
    """
    h = [float(x) for x in history]
    if not h or not math.isfinite(value):
        return None
    med, scale = robust_scale(h, rel_floor)
    return (value - med) / scale
