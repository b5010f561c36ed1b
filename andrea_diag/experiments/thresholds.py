"""The ladder's threshold statements, from per-rung tests: which procedure, n, p and interval.

    rungs = rung_tests(gaps_of_group, arms_of_group, order, "global")  # one dict per rung
    harm_statement(rungs, order, "global", where, none_text)

*Procedure.* "The smallest rung where clipping helps" looks at several rungs, so the search is
a **fixed-sequence test from the largest rung down**: the largest rung is tested at two-sided
alpha 0.05; only if it is rejected (with the gap, or the unclipped collapse rate, on the
claimed side) is the next smaller rung tested, again at 0.05, and so on. The threshold is the
smallest rung of that unbroken run. The family-wise error stays at 0.05 without adjustment,
and 6 seeds per rung (``MIN_PAIRS``) can reach it. Holm across 4 rungs would need p <= 0.0125
at its first step, which the exact sign-flip test reaches only from 8 seeds (2/256); Holm-
adjusted p-values are still given per rung, for reading one rung on its own.

The harm test is the exact sign-flip test of the paired held-out gaps; the collapse test is
Fisher's exact test of the two arms' collapse counts. Every rung needs ``MIN_PAIRS`` pairs, or
the statement is "insufficient seeds".
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from andrea_diag.stats import (
    ALPHA,
    MIN_PAIRS,
    TARGET_GAP,
    fisher_detectable,
    fixed_sequence,
    holm,
    insufficient,
    p_text,
)
from andrea_diag.tables import UNCLIPPED

PROCEDURE = "fixed-sequence test from the largest rung down, each at two-sided alpha 0.05"
SEEDS_CLAIM = "12M survives, 120M collapses without clipping"


def rung_tests(
    gaps: pd.DataFrame, arms: pd.DataFrame, order: list[str], clip: str
) -> dict[str, dict[str, Any]]:
    """Per rung: the paired gap's test columns and both arms' collapse counts (0 pairs and
    NaN where the rung has no finished pair)."""
    out = {}
    for size in order:
        g = gaps[gaps["size"] == size]
        row = g.iloc[0].to_dict() if len(g) else {"pairs": 0, "p_value": math.nan,
                                                  "gap": math.nan, "collapse_p": math.nan}  # fmt: skip
        counts = {}
        for tag, arm in (("u", UNCLIPPED), ("c", clip)):
            a = arms[(arms["size"] == size) & (arms["clip"] == arm)]
            counts[f"k_{tag}"] = int(a.iloc[0]["collapses"]) if len(a) else 0
            counts[f"n_{tag}"] = int(a.iloc[0]["seeds"]) if len(a) else 0
        out[size] = {**row, **counts, "pairs": int(row.get("pairs") or 0)}
    ps = [_signed_p(out[s], "p_value", out[s]["gap"] > 0) for s in order]
    for size, adjusted in zip(order, holm(ps), strict=True):
        out[size]["p_holm_helps"] = adjusted
    return out


def _signed_p(row: dict[str, Any], key: str, right_side: bool) -> float:
    """The p-value when the effect is on the claimed side, else 1 (a two-sided test that
    rejects on the wrong side is no evidence for the claim)."""
    p = float(row.get(key, math.nan))
    return p if not math.isfinite(p) or right_side else 1.0


def _collapse_side(r: dict[str, Any]) -> bool:
    return r["n_u"] > 0 and r["n_c"] > 0 and r["k_u"] / r["n_u"] > r["k_c"] / r["n_c"]


def _sequence(rungs: dict[str, dict], order: list[str], key: str, side) -> tuple[str | None, str | None]:  # fmt: skip
    """(threshold, the rung where the sequence stopped) of the fixed-sequence test."""
    seq = order[::-1]
    k = fixed_sequence([_signed_p(rungs[s], key, side(rungs[s])) for s in seq], ALPHA)
    return (seq[k - 1] if k else None), (seq[k] if k < len(seq) else None)


def _short(rungs: dict[str, dict], order: list[str], n_of) -> dict[str, int]:
    return {s: n_of(rungs[s]) for s in order if n_of(rungs[s]) < MIN_PAIRS}


def _gap_text(r: dict[str, Any]) -> str:
    def ends(name: str) -> str:
        lo, hi = r.get(f"{name}_lo", math.nan), r.get(f"{name}_hi", math.nan)
        return "n/a" if pd.isna(lo) else f"[{lo:+.3f}, {hi:+.3f}]"

    return (f"gap {r['gap']:+.3f} nats, n = {r['pairs']}, sd {r['sd']:.3f}, sign-flip "
            f"p = {p_text(r['p_value'])}, 95% t {ends('gap_t')}, BCa {ends('gap')}")  # fmt: skip


def _alone(rungs: dict[str, dict], order: list[str], claimed: set[str]) -> str:
    """Rungs outside the claimed run that pass on their own, Holm-adjusted across rungs."""
    hits = [f"{s} (Holm p = {p_text(rungs[s]['p_holm_helps'])})" for s in order
            if s not in claimed and rungs[s]["p_holm_helps"] < ALPHA]  # fmt: skip
    return f"; on its own, Holm across {len(order)} rungs: {', '.join(hits)}" if hits else ""


def harm_statement(
    rungs: dict[str, dict], order: list[str], clip: str, where: str, none_text: str
) -> tuple[str | None, str]:
    """(threshold, sentence) for the paired held-out gap."""
    head = f"harm threshold ({clip}): "
    short = _short(rungs, order, lambda r: r["pairs"])
    if short:
        return None, head + insufficient(short)
    found, stop = _sequence(rungs, order, "p_value", lambda r: r["gap"] > 0)
    claimed = set(order[order.index(found) :]) if found else set()
    alone = _alone(rungs, order, claimed)
    power = ""
    if stop is not None:
        r = rungs[stop]
        need = r.get("seeds_for_target")
        need = "unknown" if need is None or pd.isna(need) else f"{int(need)} seeds"
        power = (f"the smallest detectable gap {r['detectable_gap']:.3f} nats at {stop} (80% "
                 f"power, t-based; there n = {r['pairs']}, p = {p_text(r['p_value'])}; a gap of "
                 f"{TARGET_GAP} nats would need {need})")  # fmt: skip
    if found is None:
        return None, f"{head}{none_text}, with {power}{alone}"
    stops = f"; the sequence stops at {stop}: {power}" if stop else ""
    return found, (f"{head}{found} at {where} ({PROCEDURE}, {order[-1]} first; exact "
                   f"sign-flip test at {found}: {_gap_text(rungs[found])}{stops}{alone})")  # fmt: skip


def _counts(r: dict[str, Any], clip: str) -> str:
    return (f"unclipped {r['k_u']}/{r['n_u']} vs {clip} {r['k_c']}/{r['n_c']} collapsed, "
            f"Fisher p = {p_text(r.get('collapse_p', math.nan))}")  # fmt: skip


def collapse_statement(
    rungs: dict[str, dict], order: list[str], clip: str, where: str, none_text: str
) -> tuple[str | None, str]:
    """(threshold, sentence) for the collapse rates (Fisher's exact test per rung)."""
    head = f"collapse threshold ({clip}): "
    short = _short(rungs, order, lambda r: min(r["n_u"], r["n_c"]))
    if short:
        return None, head + insufficient(short)
    found, stop = _sequence(rungs, order, "collapse_p", _collapse_side)
    if found is None:
        r = rungs[stop]
        best = fisher_detectable(min(r["n_u"], r["n_c"]))
        n = min(r["n_u"], r["n_c"])
        reach = f"; {n} seeds per arm tell at best {best}/{n} from 0/{n}" if best else ""
        return None, f"{head}{none_text} (at {stop}: {_counts(r, clip)}{reach})"
    stops = f"; it stops at {stop}: {_counts(rungs[stop], clip)}" if stop else ""
    return found, (f"{head}{found} at {where} ({PROCEDURE}, {order[-1]} first; Fisher's "
                   f"exact test at {found}: {_counts(rungs[found], clip)}{stops})")  # fmt: skip


def claim_statement(
    rungs: dict[str, dict], order: list[str], clip: str, collapse: str | None, harm: str
) -> str:
    """How the ladder's result compares with the seeds' claim, in one sentence (``harm``: the
    harm threshold, "none" or "insufficient seeds")."""
    small, large = order[0], order[-1]
    head = f'the seeds\' claim "{SEEDS_CLAIM}", read as {small} against {large} ({clip}): '
    short = _short(rungs, order, lambda r: min(r["n_u"], r["n_c"]))
    if short:
        return head + "not checked, " + insufficient(short)
    s, big = rungs[small], rungs[large]
    small_text = f"{small} unclipped collapsed in {s['k_u']} of {s['n_u']} seeds"
    if collapse is None:
        verdict = (f"not seen at these settings: {large} {_counts(big, clip)}; {small_text}")  # fmt: skip
    elif collapse == small:
        verdict = f"not as claimed: {small} collapses without clipping too ({_counts(s, clip)})"
    else:
        verdict = (f"consistent: {small_text}, and {large} collapses without clipping "
                   f"({_counts(big, clip)}; collapse threshold {collapse})")  # fmt: skip
    return f"{head}{verdict}. Held-out harm threshold: {harm}."
