"""Seeds into rates and paired tests: what a sweep's cells say, and how surely.

    arms = arm_rates(table)    # per (size, lr, precision, max_norm, clip): collapse and event rates
    gaps = paired_gaps(table)  # per (size, lr, precision, max_norm): unclipped - clipped eval loss
    lines = interval_findings(arms, gaps)

``table`` is ``sweep.csv``: one row per arm per cell, a cell being one seed. For each arm:

- the **collapse rate** (diverged, locked-in or non-finite) with a Wilson 95% interval;
- the **pollution-event rate**: runs whose spikes still held at least half of ‖v‖ at the end
  (``final_v_share >= EVENT_SHARE``), with a Wilson 95% interval.

For each clipped arm against ``none``, paired by seed (same data, batches and init):

- the **final held-out loss gap**, unclipped minus clipped (positive: clipping helped): its
  n, sd, exact sign-flip p-value, 95% t- and BCa intervals, and the smallest gap these seeds
  detect at 80% power (``stats.paired_test``);
- the collapse rates compared by Fisher's exact test (``collapse_p``), and so the
  pollution-event rates (``event_p``);
- the **harm per event**: the same gap's mean over the seeds whose unclipped arm had a pollution
  event, with its BCa interval.

A difference is called only from at least ``MIN_PAIRS`` pairs and a p-value below 0.05;
otherwise "insufficient seeds" or "not distinguishable". Crashed or unfinished arms are left out
(and their seed's pair with them).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from andrea_diag.probes.verdict import COLLAPSE_VERDICTS
from andrea_diag.rundir import atomic_write_text
from andrea_diag.stats import (
    ALPHA,
    MIN_PAIRS,
    NONE,
    TARGET_GAP,
    bootstrap_mean,
    fisher,
    insufficient,
    p_text,
    paired_test,
    wilson,
)
from andrea_diag.tables import (
    CELL_KEYS,
    UNCLIPPED,
    csv_text,
    interval_columns,
    interval_of,
    read_flag,
    where,
)

EVENT_SHARE = 0.5  # a pollution event: the spikes hold at least this share of ‖v‖ at the end


def finished(table: pd.DataFrame) -> pd.DataFrame:
    """Rows of finished arms, with ``precision`` (fp32 for tables from before the axis),
    ``collapsed`` and ``event`` (None when the run recorded no final share of ‖v‖)."""
    t = table.copy()
    if "precision" not in t:
        t["precision"] = "fp32"
    t["precision"] = t["precision"].fillna("fp32")
    if "status" in t:
        t = t[t["status"].fillna("done") == "done"]
    verdict = t.get("lockin", pd.Series(None, index=t.index)).isin(COLLAPSE_VERDICTS)
    given = t.get("collapse", pd.Series(None, index=t.index)).map(read_flag)
    t["collapsed"] = [bool(v) if g is None else g for g, v in zip(given, verdict, strict=True)]
    share = pd.to_numeric(t.get("final_v_share", pd.Series(math.nan, index=t.index)))
    t["event"] = [None if math.isnan(s) else bool(s >= EVENT_SHARE) for s in share]
    t["eval"] = pd.to_numeric(t.get("final_eval_loss", pd.Series(math.nan, index=t.index)))
    return t


def arm_rates(table: pd.DataFrame) -> pd.DataFrame:
    """Per (cell, clip): seeds, collapse and pollution-event counts and rates (Wilson)."""
    t = finished(table)
    rows = []
    for key, d in t.groupby([*CELL_KEYS, "clip"], sort=True):
        known = d["event"].dropna()
        collapses = int(d["collapsed"].sum())
        rows.append(
            {**dict(zip([*CELL_KEYS, "clip"], key, strict=True)), "seeds": len(d),
             "collapses": collapses, **interval_columns("collapse", wilson(collapses, len(d))),
             **interval_columns("event", wilson(int(known.sum()), len(known))),
             "event_seeds": len(known)}
        )  # fmt: skip
    return pd.DataFrame(rows)


def _gap_columns(gap: pd.Series) -> dict[str, Any]:
    """The paired test of one cell's gaps, as gaps.csv columns."""
    test = paired_test(gap.tolist())
    return {"pairs": test.n, **interval_columns("gap", test.bca),
            **interval_columns("gap_t", test.t), "sd": test.sd, "p_value": test.p,
            "detectable_gap": test.detectable, "seeds_for_target": test.seeds_for_target}  # fmt: skip


def _event_fisher(base: pd.Series, arm: pd.Series) -> float:
    """Fisher's exact p of the two arms' pollution-event counts, over the seeds that recorded a
    final share of ‖v‖ (NaN when an arm recorded none)."""
    u, c = base.dropna().map(bool), arm.dropna().map(bool)
    return fisher(int(u.sum()), len(u), int(c.sum()), len(c)) if len(u) and len(c) else math.nan


def paired_gaps(table: pd.DataFrame) -> pd.DataFrame:
    """Per (cell, clipped arm): the paired held-out gap's test and intervals, the collapse
    rates' Fisher p-value, and the harm per event."""
    t = finished(table)
    rows = []
    for key, d in t.groupby(CELL_KEYS, sort=True):
        base = d[d["clip"] == UNCLIPPED].set_index("seed")
        for clip in [c for c in dict.fromkeys(d["clip"]) if c != UNCLIPPED]:
            arm = d[d["clip"] == clip].set_index("seed")
            seeds = sorted(set(base.index) & set(arm.index))
            gap = pd.Series({s: base.at[s, "eval"] - arm.at[s, "eval"] for s in seeds}, dtype=float)
            gap = gap[gap.map(math.isfinite)]
            hit = [s for s in gap.index if read_flag(base.at[s, "event"]) is True]
            k_u, k_c = int(base["collapsed"].sum()), int(arm["collapsed"].sum())
            rows.append(
                {**dict(zip(CELL_KEYS, key, strict=True)), "clip": clip, **_gap_columns(gap),
                 "collapse_p": fisher(k_u, len(base), k_c, len(arm)),
                 "event_p": _event_fisher(base["event"], arm["event"]),
                 "event_pairs": len(hit),
                 **interval_columns("harm_per_event",
                                    bootstrap_mean(gap[hit].tolist()) if hit else NONE),
                 "gaps": ";".join(f"s{s}:{g:+.3f}" for s, g in gap.items())}
            )  # fmt: skip
    return pd.DataFrame(rows)


def gap_call(row: pd.Series | dict[str, Any], at: str | None = None, needs: str = "a call") -> str:
    """The one allowed call on a paired gap: from ``MIN_PAIRS`` pairs on, clipping helped or
    cost when the sign-flip p is below 0.05; otherwise not distinguishable, with the power."""
    n = int(row.get("pairs") or 0)
    if n == 0:
        return "no finished pair with a held-out loss"
    p = float(row["p_value"])
    if n < MIN_PAIRS:
        return insufficient({at or where(row): n}, needs)
    if p < ALPHA:
        side = "clipping helped" if row["gap"] > 0 else "clipping cost"
        return f"{side} (sign-flip p = {p_text(p)}, {n} pairs)"
    need = row.get("seeds_for_target")
    need = "" if need is None or pd.isna(need) else f"; {TARGET_GAP} nats would need {int(need)}"
    return (f"not distinguishable from 0 with {n} pairs (sign-flip p = {p_text(p)}; smallest "
            f"detectable gap {row['detectable_gap']:.3f} nats at 80% power{need})")  # fmt: skip


def interval_findings(arms: pd.DataFrame, gaps: pd.DataFrame) -> list[str]:
    """One sentence per cell and clipped arm: the gap, the rates, and what may be called."""
    out = []
    for g in gaps.to_dict("records"):
        iv, t_iv = interval_of(g, "gap"), interval_of(g, "gap_t")
        sel = (arms[CELL_KEYS] == pd.Series({k: g[k] for k in CELL_KEYS})).all(axis=1)
        by = arms[sel].set_index("clip")
        rates = []
        for name in ("collapse", "event"):
            parts = [
                f"{c} {_count(by.loc[c], name)} {interval_of(by.loc[c], name).text()}"
                for c in (UNCLIPPED, g["clip"]) if c in by.index
            ]  # fmt: skip
            rates.append(f"{'pollution events' if name == 'event' else name} " + ", ".join(parts))
        rates[0] += f" (Fisher p = {p_text(g['collapse_p'])})"
        harm = interval_of(g, "harm_per_event")
        out.append(
            f"{where(g)}: held-out gap none - {g['clip']} {iv.text(3)}"
            + ("" if math.isnan(t_iv.lo) else f" (BCa; t [{t_iv.lo:.3f}, {t_iv.hi:.3f}])")
            + f", {gap_call(g)}; "
            + "; ".join(rates)
            + (f"; harm per event {harm.text(3)} over {harm.n} seeds" if harm.n else "")
            + "."
        )
    return out


def _count(row: pd.Series, name: str) -> str:
    n = int(row["seeds"] if name == "collapse" else row["event_seeds"])
    return f"{round(row[f'{name}_rate'] * n) if n else 0}/{n}"


def write_interval_tables(out: Path, table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``arms.csv`` and ``gaps.csv`` beside ``sweep.csv``: the tables every page reads."""
    arms, gaps = arm_rates(table), paired_gaps(table)
    # through a temp file and a rename: a link planted in the run is replaced, not written through
    atomic_write_text(out / "arms.csv", csv_text(arms))
    atomic_write_text(out / "gaps.csv", csv_text(gaps))
    return arms, gaps
