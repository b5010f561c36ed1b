"""The loss-trajectory tests of the run verdicts (``verdict.py`` is their one public owner).

Pure functions on lists: the judged trajectory (held-out or smoothed training loss), the
non-finite count, the divergence test, and :func:`loss_collapse_reason`, the collapse test of a
run the verdict could not judge (too short, or one recorded before the verdict existed): the
report's findings import it through ``verdict.py`` instead of keeping their own copy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# a run the verdict could not judge: per-source training losses, smoothed by a rolling median
FALLBACK_SMOOTH_UPDATES = 25  # window: the bandit mixes sources whose losses differ by nats
FALLBACK_DIVERGE_NATS = 1.0  # final smoothed loss this far above its smoothed minimum: collapsed


def smoothed(losses: Sequence[float], window: int) -> np.ndarray:
    """Trailing median over ``window`` finite values (robust to single-batch noise)."""
    x = np.asarray([v for v in losses if v is not None and math.isfinite(v)], dtype=np.float64)
    if x.size == 0:
        return x
    return np.array([np.median(x[max(0, i - window + 1) : i + 1]) for i in range(x.size)])


def _finite(updates: Sequence[int], values: Sequence[float | None]) -> list[tuple[int, float]]:
    """(update, value) pairs of the finite values."""
    return [
        (int(u), float(v))
        for u, v in zip(updates, values, strict=True)
        if v is not None and math.isfinite(v)
    ]


def _is_nonfinite(v: float | None) -> bool:
    """inf or NaN; None is "not measured", not non-finite."""
    return v is not None and not math.isfinite(v)


def _nonfinite_reasons(
    losses: Sequence[float | None],
    eval_losses: Sequence[float | None] | None,
    nonfinite_updates: int,
    th: Mapping[str, float],
) -> tuple[int, list[str]]:
    """(count of non-finite updates, reasons for the non-finite verdict; empty: not non-finite)."""
    # a non-finite training loss skips its update, so it is one; the caller's count may add
    # updates whose gradient alone was non-finite (fp16 overflow): take the larger
    n_loss = sum(_is_nonfinite(v) for v in losses)
    n = max(int(nonfinite_updates), n_loss)
    # GradScaler skips an overflowed update by design and lowers its scale: a few such
    # gradient-only skips (finite loss) are fp16 working, not a run meeting inf/NaN
    grad_only_allowed = th["grad_only_skip_share"] * len(losses)
    reasons = []
    if n_loss >= th["nonfinite_updates"] or (
        n - n_loss >= th["nonfinite_updates"] and n - n_loss > grad_only_allowed
    ):
        reasons.append(f"{n} non-finite update{'s' * (n != 1)} (skipped)")
    for name, seq in (("training", losses), ("held-out", eval_losses or [])):
        last = next((v for v in reversed(seq) if v is not None), None)
        if _is_nonfinite(last):
            reasons.append(f"final {name} loss is {last}")
    return n, reasons


def _trajectory(
    updates: Sequence[int],
    losses: Sequence[float | None],
    eval_updates: Sequence[int] | None,
    eval_losses: Sequence[float | None] | None,
    th: Mapping[str, float],
) -> tuple[str, list[int], np.ndarray, float, int]:
    """(kind "eval"/"train", updates, smoothed losses, divergence margin, hold) of the judged loss."""
    evals = _finite(eval_updates or [], eval_losses or []) if eval_losses is not None else []
    if len(evals) >= th["min_evals"]:
        ups, vals = zip(*evals, strict=True)
        sm = smoothed(vals, int(th["smooth_eval"]))
        return "eval", list(ups), sm, th["diverge_nats_eval"], int(th["diverge_hold_eval"])
    pairs = _finite(updates, losses)
    ups_t = [u for u, _ in pairs]
    sm = smoothed([v for _, v in pairs], int(th["smooth"]))
    return "train", ups_t, sm, th["diverge_nats"], int(th["diverge_hold"])


def _divergence(
    ups: list[int], sm: np.ndarray, margin: float, hold: int, what: str
) -> tuple[dict[str, Any], str | None]:
    """The numbers of the divergence test, and its reason when the run diverged (else None)."""
    if sm.size <= hold:  # no "before" to compare the held tail with
        return {"running_min": None, "rise_above_min": None}, None
    i = int(np.argmin(sm[:-hold]))
    lo, final = float(sm[i]), float(sm[-1])
    tail = sm[-hold:]
    nums = {"running_min": lo, "running_min_update": ups[i], "rise_above_min": final - lo}
    if not bool(np.all(tail >= lo + margin)):
        return nums, None
    unit = "evaluations" if what.startswith("held-out") else "updates"
    return nums, (
        f"{what} ended at {final:.2f}, {final - lo:.2f} nats above its minimum "
        f"{lo:.2f} (update {ups[i]}), and stayed >= {lo + margin:.2f} (minimum + {margin:g}) "
        f"for the last {hold} {unit} (updates {ups[-hold]}-{ups[-1]})"
    )


def _rolling_median(values: Sequence[Any], window: int) -> np.ndarray:
    """Rolling median (min one value) of the finite values, as pandas' rolling().median()."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(float(v))], dtype=float)
    return np.array([np.median(x[max(0, i - window + 1) : i + 1]) for i in range(x.size)])


def loss_collapse_reason(columns: Mapping[str, Sequence[Any]]) -> str | None:
    """Why a run the verdict could not judge counts as collapsed (None: it did not).

    ``columns``: the per-source training losses (``loss_<source>``), else ``{"loss": ...}``.
    Per source, because the bandit's mix moves even a smoothed total loss by nats (a phase of the
    hardest source), so "rose above its minimum" is judged on each source's own loss, smoothed
    by a :data:`FALLBACK_SMOOTH_UPDATES` rolling median, and the rises are averaged.
    """
    w = FALLBACK_SMOOTH_UPDATES
    rises = []
    for col, values in columns.items():
        sm = _rolling_median(values, w)
        if sm.size >= w:
            lo, last = float(sm[w - 1 :].min()), float(sm[-1])
            rises.append((last - lo, last, lo, col))
    if not rises:
        return None  # too short to smooth: single-update minima are not a level
    rise = sum(r[0] for r in rises) / len(rises)
    if rise <= FALLBACK_DIVERGE_NATS:
        return None
    if len(rises) == 1:
        _, last, lo, _ = rises[0]
        return f"smoothed loss ended at {last:.3g}, {rise:.2f} nats above its smoothed minimum {lo:.3g}"
    return (
        f"per-source smoothed losses ended {rise:.2f} nats above their smoothed "
        f"minima on average ({', '.join(r[3][5:] for r in rises)})"
    )
