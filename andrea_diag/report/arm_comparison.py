"""The clip arms side by side: what each one cost and what it kept out of Adam's ``v``.

One row per arm: the share of updates it clipped or skipped, its spikes by cause, the peak
share of ``‖v‖`` held by spike terms and the recovery, the held-out loss, and the clip stage's
median time per update. The finding names the arm that kept spikes out of ``v`` (peak share
below ``POLLUTION_SHARE``) while touching the fewest updates.
"""

from __future__ import annotations

from typing import Any

from andrea_diag.metrics import CLIPPED_BELOW
from andrea_diag.probes.spikes import CAUSES
from andrea_diag.report.arms import Arm, compared_loss, fmt, recovery_text

# A spike term holding half of ‖v‖ is a pollution event (the seeds' 120m takeovers held 83-99%).
POLLUTION_SHARE = 0.5


def _pct(arm: Arm, key: str, column: str, test: Any) -> float | None:
    v = arm.summary.get(key)
    if v is not None:
        return float(v)
    m = arm.metrics
    if column in m and len(m):
        return float(100.0 * test(m[column]).mean())
    return None


def touched_pct(arm: Arm) -> float | None:
    """Updates the arm clipped or skipped, in percent (None when unknown)."""
    clipped = _pct(arm, "pct_clipped", "clip_coef", lambda c: c < CLIPPED_BELOW)
    skipped = _pct(arm, "pct_skipped", "skipped", lambda c: c.fillna(False).astype(bool))
    if clipped is None and skipped is None:
        return None
    return (clipped or 0.0) + (skipped or 0.0)  # an update is clipped or skipped, never both


def causes(arm: Arm) -> dict[str, int]:
    """Spike events by cause (an event with two causes counts under both)."""
    out = dict.fromkeys(CAUSES, 0)
    ev = arm.events
    if ev.empty or "causes" not in ev:
        return out
    for cs in ev.drop_duplicates(subset=["update"])["causes"]:
        for c in cs or []:
            out[c] = out.get(c, 0) + 1
    return out


def peak_v_share(arm: Arm) -> float | None:
    v = (arm.summary.get("pollution") or {}).get("max_v_share")
    return float(v) if v is not None else None


def comparison_rows(arms: list[Arm]) -> tuple[list[str], list[list[Any]]]:
    head = ["arm", "% clipped or skipped", *[f"spikes: {c}" for c in CAUSES],
            "peak v share", "v recovery (updates)", "held-out loss", "clip ms / update"]  # fmt: skip
    rows = []
    for a in arms:
        poll = a.summary.get("pollution") or {}
        rec = poll.get("recovery_v")
        loss, _ = compared_loss(a)
        by_cause = causes(a)
        ms = a.summary.get("clip_ms_median")
        if ms is None and "clip_ms" in a.metrics:
            ms = float(a.metrics["clip_ms"].median())
        rows.append([
            a.label, touched_pct(a), *[by_cause[c] for c in CAUSES], peak_v_share(a),
            recovery_text(poll, "v") if poll and rec is None else rec, loss, ms,
        ])  # fmt: skip
    return head, rows


def best_arm_finding(arms: list[Arm]) -> str | None:
    """Which clipped arm kept spikes out of ``v`` at the lowest cost in touched updates."""
    clipped = [a for a in arms if a.clipped]
    if len(clipped) < 2:
        return None  # one clipped arm: the summary's clipped-vs-unclipped findings say it all
    known = [(a, peak_v_share(a), touched_pct(a)) for a in clipped]
    known = [(a, s, t) for a, s, t in known if s is not None and t is not None]
    if not known:
        return "clip arms: no pollution measured (no spikes tracked or runs unfinished)."
    clean = [(a, s, t) for a, s, t in known if s < POLLUTION_SHARE]
    unclipped = [peak_v_share(a) for a in arms if not a.clipped]
    base = (
        f" (unclipped: peak v share {fmt(unclipped[0])})"
        if unclipped and unclipped[0] is not None
        else ""
    )
    if not clean:
        a, s, t = min(known, key=lambda k: k[1])
        return (
            f"clip arms: none kept spikes below {POLLUTION_SHARE:.0%} of ‖v‖{base}; the lowest "
            f"peak share was {a.label}'s ({fmt(s)}), clipping or skipping {t:.1f}% of updates."
        )
    a, s, t = min(clean, key=lambda k: (k[2], k[1]))
    others = ", ".join(
        f"{b.label} {tb:.1f}%" for b, _, tb in sorted(clean, key=lambda k: k[2]) if b is not a
    )
    return (
        f"clip arms: of those whose spikes never held {POLLUTION_SHARE:.0%} of ‖v‖{base}, "
        f"{a.label} touched the fewest updates ({t:.1f}% clipped or skipped, peak v share "
        f"{fmt(s)})" + (f"; the others: {others}." if others else ".")
        + " One run per arm: a rate needs seeds (sweep --seed)."
    )  # fmt: skip
