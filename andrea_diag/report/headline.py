"""The report's first finding: what this run shows, in plain words, and what it cannot.

Every number comes from the run's own tables (summary.json, metrics, events): whether the model
learned (held-out loss against the unigram level and the run verdict), the spike the run is
about (an injected one when there is one, else the strongest attributed one) with its cause,
that spike's share of Adam's ``m`` and ``v`` in the unclipped arm and how long it lasted, what
the clipped arm let into its moments, and the phase boundaries that did or did not spike. The
last sentence says what one seed cannot show and which sweep would. Pure text: ``html.py``
escapes it with the other findings::

    from andrea_diag.report.headline import headline
    for line in headline(arms):
        print(line)
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from andrea_diag import metrics as schema
from andrea_diag.presets import PRESETS
from andrea_diag.report.arms import Arm, boundaries, compared_loss, fmt, has_bandit, is_clipped
from andrea_diag.stats import MIN_PAIRS


def _num(x: Any) -> float | None:
    """A finite number from a run dir's value, or None (a damaged dir must not break the page)."""
    if isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError, OverflowError):
        return None
    return v if math.isfinite(v) else None


def _int(x: Any) -> int | None:
    v = _num(x)
    return None if v is None else int(v)


def _z(x: Any) -> str:
    """A z-score as the page says it: 6.3, 24, 601 (never 6e+02)."""
    v = _num(x)
    return "-" if v is None else f"{v:.0f}" if abs(v) >= 10 else f"{v:.2g}"


def headline(arms: list[Arm]) -> list[str]:
    """The story of the page's first unclipped arm (else its first arm) and its first clipped
    arm: learned or not, the main spike and its life in ``m``/``v``, and the one-seed caveat.
    Empty when no arm has finished (no summary)."""
    done = [a for a in arms if a.summary]
    if not done:
        return []
    base = next((a for a in done if not is_clipped(a)), done[0])
    clipped = next((a for a in done if is_clipped(a) and a is not base), None)
    out = [learned_sentence(base)]
    spike = main_spike(base)
    if spike is None:
        out.append(
            f"{base.label}: no spike detected, so there is no spike's life in m and v to follow."
        )
    else:
        out.append(spike_sentence(base, spike, clipped))
    if has_bandit(base):  # a user's loop has no bandit phases to speak of
        out.append(boundary_sentence(base))
    out.append(caveat_sentence(done, base, clipped))
    return out


def learned_sentence(arm: Arm) -> str:
    """'Learned: held-out loss 5.62 at update 300, 1.17 nats below the unigram level 6.79 ...'."""
    lock = arm.summary.get("lockin") or {}
    verdict = lock.get("verdict")
    unigram = _num(lock.get("unigram_entropy"))
    loss, what = compared_loss(arm)
    at = arm.summary.get("final_eval_update") or arm.summary.get("n_updates")
    if unigram is None or not math.isfinite(loss):
        return (
            f"{arm.label}: whether the model learned is not known ({what} {fmt(loss)}, no "
            f"unigram level recorded; verdict {fmt(verdict)})."
        )
    gap = unigram - loss
    learned = gap > 0 and verdict != "never-learned"
    where = "below" if gap > 0 else "above"
    head = "The model learned" if learned else "The model did not learn"
    tail = "" if learned else "; the spikes below are those of a model that has not learned yet"
    return (
        f"{head} ({arm.label}): {what} {fmt(loss)} at update {fmt(at)}, {abs(gap):.2f} nats "
        f"{where} the unigram level {fmt(unigram)} (verdict {fmt(verdict)}){tail}."
    )


def _injected(arm: Arm) -> dict[int, str]:
    m = arm.metrics
    if "injected" not in m or "update" not in m:
        return {}
    rows = m[m["injected"].notna() & (m["injected"].astype(str) != "")]
    return {int(u): str(k) for u, k in zip(rows["update"], rows["injected"], strict=True)}


def main_spike(arm: Arm) -> dict[str, Any] | None:
    """The spike event the story is about: the first caught injection (a spike at its update
    or the next), else the highest-z attributed spike, else the highest-z spike."""
    ev = arm.events
    if ev.empty or "update" not in ev:
        return None
    ev = ev.assign(
        update=pd.to_numeric(ev["update"], errors="coerce"),
        _z=pd.to_numeric(ev.get("z"), errors="coerce").fillna(-math.inf),
    )
    ev = ev[ev["update"].notna() & ev["update"].abs().lt(math.inf)]
    if ev.empty:
        return None
    for u, kind in sorted(_injected(arm).items()):
        hit = ev[(ev["update"] >= u) & (ev["update"] <= u + 1)]
        if len(hit):
            row = hit.sort_values("_z", ascending=False).iloc[0].to_dict()
            return {**row, "injected": kind, "injected_at": u}
    cause = ev.get("cause", pd.Series("", index=ev.index)).astype(str)
    attributed = ev[~cause.str.contains("unexplained") & (cause != "")]
    pool = attributed if len(attributed) else ev
    return pool.sort_values("_z", ascending=False).iloc[0].to_dict()


def _per_spike(arm: Arm, update: int) -> dict[str, Any] | None:
    pollution = arm.summary.get("pollution")
    entries = pollution.get("per_spike") if isinstance(pollution, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("update") == update:  # a damaged dir: skip
            return entry
    return None


def _life(entry: dict[str, Any] | None, share: float) -> str:
    """'97% of m and 12% of v; below 10% of m after 27 updates, of v after 36'."""
    if entry is None:
        return "not tracked in m and v (the probe did not flag this update)"

    def pct(x: Any) -> str:
        v = _num(x)
        return "-" if v is None else f"{100 * v:.3g}%"

    def rec(key: str) -> str:
        r = _int(entry.get(f"recovery_{key}"))
        if entry.get(f"censored_{key}"):
            return f"in {key} it stayed above {pct(share)} to the run's end"
        if r is None:
            return f"its decay in {key} is not known"
        if r == 0:
            return f"in {key} it was never above {pct(share)}"
        return f"in {key} it fell below {pct(share)} after {r} updates"

    # a share is ||spike term|| / ||moment||: above 100% when the other terms partly cancel it
    return (
        f"a term of {pct(entry.get('share_m0'))} of the norm of Adam's m and "
        f"{pct(entry.get('share_v0'))} of v's; {rec('m')}, {rec('v')}"
    )


def spike_sentence(base: Arm, spike: dict[str, Any], clipped: Arm | None) -> str:
    """The spike, its attribution, its life in the unclipped arm's moments and in the clipped
    arm's."""
    u = int(spike["update"])
    cause = spike.get("cause") or "+".join(spike.get("causes") or []) or "unattributed"
    what = (
        f"The {spike['injected']} injected at update {spike['injected_at']}"
        if spike.get("injected")
        else f"The strongest spike, at update {u},"
    )
    src = spike.get("outlier_source")
    seq = (
        f" (sequence {fmt(spike.get('outlier_example'))}, from {src})"
        if isinstance(src, str)
        else ""
    )
    verb = "left it unexplained" if cause == "unexplained" else f"attributed it to: {cause}{seq}"
    later = f" at update {u}" if spike.get("injected_at", u) != u else ""
    pollution = base.summary.get("pollution")
    share = _num(pollution.get("recovery_share")) if isinstance(pollution, dict) else None
    share = 0.1 if share is None else share
    where = f"In this clipped run ({base.label})" if is_clipped(base) else (
        f"In the unclipped arm ({base.label})")  # fmt: skip
    text = (
        f"{what} raised {spike.get('metric', '?')} to {fmt(spike.get('value'))} (z "
        f"{_z(spike.get('z'))}){later}, and the spike probe {verb}. {where} that update "
        f"made {_life(_per_spike(base, u), share)}."
    )
    if clipped is None:
        missing = "unclipped" if is_clipped(base) else "clipped"
        return text + f" No {missing} arm on this page to compare with."
    coef = _at(clipped.metrics, u, "clip_coef")
    scaled = f"scaled that gradient by {fmt(coef)}" if coef is not None else "clipped"
    return text + (
        f" The clipped arm ({clipped.label}, max_norm {fmt(clipped.config.get('max_norm'))}) "
        f"{scaled}: there it made {_life(_per_spike(clipped, u), share)}."
    )


def _at(metrics: pd.DataFrame, update: int, col: str) -> float | None:
    if col not in metrics or "update" not in metrics:
        return None
    v = metrics.loc[metrics["update"] == update, col]
    return float(v.iloc[0]) if len(v) and pd.notna(v.iloc[0]) else None


def boundary_sentence(arm: Arm) -> str:
    """How many of the bandit's phase boundaries raised a spike attributed to the transition,
    and the strongest one in plain words: what it raised, and the mix shift behind it."""
    bs = boundaries(arm.metrics)
    ev = arm.events
    pt = pd.DataFrame()
    if not ev.empty and "update" in ev and "cause" in ev:
        pt = ev[ev["cause"].astype(str).str.contains("phase-transition")]
    hit = sorted({u for v in pt.get("update", []) if (u := _int(v)) is not None})
    if not bs:
        return f"{arm.label}: no bandit phase boundary in this run."
    if not hit:
        return (
            f"{arm.label}: none of the {len(bs)} bandit phase boundaries raised a spike "
            "(a phase transition is attributed only when one does)."
        )
    text = (
        f"{arm.label}: {len(hit)} spike update(s) followed a bandit phase boundary and were "
        f"attributed to the phase transition (updates {', '.join(map(str, hit))}; "
        f"{len(bs)} boundaries in all)."
    )
    z = pd.to_numeric(pt["z"], errors="coerce") if "z" in pt else pd.Series(math.nan, pt.index)
    top = pt.iloc[int(z.fillna(-math.inf).to_numpy().argmax())].to_dict()
    u = _int(top.get("update"))
    b = _int(top.get("boundary_update"))
    b = b if b is not None else max((x for x in bs if u is not None and x <= u), default=None)
    if u is None or b is None:
        return text
    when = "as" if u == b else f"{u - b} update(s) after"
    return text + (
        f" The strongest: {top.get('metric', '?')} rose to {fmt(top.get('value'))} (z "
        f"{_z(top.get('z'))}) at update {u}, {when} the mix changed at update "
        f"{b}{_mix_shift(arm.metrics, b)}."
    )


def _mix_shift(m: pd.DataFrame, boundary: int) -> str:
    """' from mostly gutenberg (85%) to mostly hermes3-general (84%)', from the w_<source>
    columns of the updates either side of the boundary ('' when they are not recorded)."""
    cols = list(schema.members(schema.WEIGHT, m.columns).items()) if "update" in m else []
    rows = [m.loc[m["update"] == u] for u in (boundary - 1, boundary)] if cols else []
    if not cols or any(r.empty for r in rows):
        return ""
    tops = []
    for r in rows:
        w = {src: _num(r[col].iloc[0]) for src, col in cols}
        w = {src: x for src, x in w.items() if x is not None}
        if not w:
            return ""
        src = max(w, key=lambda n: w[n])
        tops.append(f"mostly {src} ({100 * w[src]:.0f}%)")
    return f", from {tops[0]} to {tops[1]}"


def caveat_sentence(arms: list[Arm], base: Arm, clipped: Arm | None) -> str:
    """What one run cannot show, and the sweep that would."""
    seeds = sorted({s for a in arms if (s := _int(a.config.get("seed"))) is not None})
    cfg = base.config
    cmd = f"andrea-diag sweep --size {cfg.get('size', 'tiny')} --lr {fmt(cfg.get('lr'))}"
    preset = PRESETS.get(str(cfg.get("size")))
    if cfg.get("steps") is not None and (preset is None or preset.steps != cfg.get("steps")):
        cmd += f" --steps {cfg['steps']}"
    cmd += " --seed " + ",".join(str(s) for s in range(MIN_PAIRS + 2))
    gap = ""
    if clipped is not None:
        d = compared_loss(clipped)[0] - compared_loss(base)[0]
        if math.isfinite(d):
            gap = f" (here clipped minus unclipped held-out loss is {d:+.3f} nats)"
    which = f"one seed ({seeds[0]})" if len(seeds) == 1 else f"{len(seeds) or 'no'} seed(s)"
    if not has_bandit(base):  # a user's loop: no andrea-diag sweep reproduces it
        return (
            f"What this cannot show: this is {which} of your own loop, so it says nothing about "
            f"whether clipping helps or costs in general{gap}; that needs ≥{MIN_PAIRS} seeds of "
            "it with and without clipping, the same batches in each pair."
        )
    return (
        f"What this cannot show: this is {which}, so it says nothing about whether "
        f"clipping helps or costs in general{gap}; a sweep over ≥{MIN_PAIRS} seeds is needed: "
        f"`{cmd}`."
    )
