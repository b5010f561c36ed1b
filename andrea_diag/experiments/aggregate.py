"""Seeds into rates and differences with intervals: what a sweep's cells say, and how surely.

    arms = arm_rates(table)    # per (size, lr, precision, max_norm, clip): collapse and event rates
    gaps = paired_gaps(table)  # per (size, lr, precision, max_norm): unclipped - clipped eval loss
    lines = interval_findings(arms, gaps)

``table`` is ``sweep.csv``: one row per arm per cell, a cell being one seed. For each arm:

- the **collapse rate** (diverged, locked-in or non-finite) with a Wilson 95% interval;
- the **pollution-event rate**: runs whose spikes still held at least half of ‖v‖ at the end
  (``final_v_share >= EVENT_SHARE``), with a Wilson 95% interval.

For each clipped arm against ``none``, paired by seed (same data, batches and init):

- the **final held-out loss gap**, unclipped minus clipped (positive: clipping helped), with a
  bootstrap 95% interval of its mean;
- the **harm per event**: the same gap's mean over the seeds whose unclipped arm had a pollution
  event, with its interval.

A difference is called real only when its interval excludes 0; otherwise "not distinguishable
with N seeds". Crashed or unfinished arms are left out (and their seed's pair with them).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from andrea_diag.probes.verdict import COLLAPSE_VERDICTS
from andrea_diag.stats import NONE, Interval, bootstrap_mean, wilson

EVENT_SHARE = 0.5  # a pollution event: the spikes hold at least this share of ‖v‖ at the end
CELL_KEYS = ["size", "lr", "precision", "max_norm"]  # a cell of the grid, seeds pooled
UNCLIPPED = "none"


def _flag(value: Any) -> bool | None:
    """A bool read back from CSV ("True"/"False"), JSON or pandas; None when unknown."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        return {"true": True, "false": False}.get(value.strip().lower())
    return bool(value)


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
    given = t.get("collapse", pd.Series(None, index=t.index)).map(_flag)
    t["collapsed"] = [bool(v) if g is None else g for g, v in zip(given, verdict, strict=True)]
    share = pd.to_numeric(t.get("final_v_share", pd.Series(math.nan, index=t.index)))
    t["event"] = [None if math.isnan(s) else bool(s >= EVENT_SHARE) for s in share]
    t["eval"] = pd.to_numeric(t.get("final_eval_loss", pd.Series(math.nan, index=t.index)))
    return t


def arm_rates(table: pd.DataFrame) -> pd.DataFrame:
    """Per (cell, clip): seeds, collapse rate and pollution-event rate with Wilson intervals."""
    t = finished(table)
    rows = []
    for key, d in t.groupby([*CELL_KEYS, "clip"], sort=True):
        known = d["event"].dropna()
        collapse = wilson(int(d["collapsed"].sum()), len(d))
        event = wilson(int(known.sum()), len(known))
        rows.append(
            {**dict(zip([*CELL_KEYS, "clip"], key, strict=True)), "seeds": len(d),
             **_columns("collapse", collapse), **_columns("event", event),
             "event_seeds": len(known)}
        )  # fmt: skip
    return pd.DataFrame(rows)


def _columns(name: str, iv: Interval) -> dict[str, float]:
    return {f"{name}_rate" if name in ("collapse", "event") else name: iv.estimate,
            f"{name}_lo": iv.lo, f"{name}_hi": iv.hi}  # fmt: skip


# per interval: the column holding its number of seeds (or pairs)
N_COLUMN = {"collapse": "seeds", "event": "event_seeds", "gap": "pairs",
            "harm_per_event": "event_pairs"}  # fmt: skip


def interval_of(row: pd.Series | dict[str, Any], name: str) -> Interval:
    """Back from a table row's ``<name>[_rate]``, ``<name>_lo``, ``<name>_hi`` columns."""
    est = row.get(f"{name}_rate", row.get(name, math.nan))
    n = row.get(N_COLUMN[name], 0)
    n = 0 if n is None or (isinstance(n, float) and math.isnan(n)) else int(n)  # a merge's gap
    return Interval(float(est), float(row[f"{name}_lo"]), float(row[f"{name}_hi"]), n)


def paired_gaps(table: pd.DataFrame) -> pd.DataFrame:
    """Per (cell, clipped arm): the paired held-out gap and the harm per event, with intervals."""
    t = finished(table)
    rows = []
    for key, d in t.groupby(CELL_KEYS, sort=True):
        base = d[d["clip"] == UNCLIPPED].set_index("seed")
        for clip in [c for c in dict.fromkeys(d["clip"]) if c != UNCLIPPED]:
            arm = d[d["clip"] == clip].set_index("seed")
            seeds = sorted(set(base.index) & set(arm.index))
            gap = pd.Series({s: base.at[s, "eval"] - arm.at[s, "eval"] for s in seeds}, dtype=float)
            gap = gap[gap.map(math.isfinite)]
            hit = [s for s in gap.index if _flag(base.at[s, "event"]) is True]
            rows.append(
                {**dict(zip(CELL_KEYS, key, strict=True)), "clip": clip, "pairs": len(gap),
                 **_columns("gap", bootstrap_mean(gap.tolist())),
                 "event_pairs": len(hit),
                 **_columns("harm_per_event", bootstrap_mean(gap[hit].tolist()) if hit else NONE),
                 "gaps": ";".join(f"s{s}:{g:+.3f}" for s, g in gap.items())}
            )  # fmt: skip
    return pd.DataFrame(rows)


def verdict(iv: Interval, above: str = "above 0", below: str = "below 0") -> str:
    """The one allowed call: real when the interval excludes 0, else not distinguishable."""
    if iv.n == 0:
        return "no finished pair with a held-out loss"
    if not iv.excludes_zero():
        return f"not distinguishable from 0 with {iv.n} seed{'s' * (iv.n != 1)}"
    return f"{above if iv.lo > 0 else below} (interval excludes 0, {iv.n} seeds)"


def where(row: pd.Series | dict[str, Any]) -> str:
    prec = "" if row["precision"] == "fp32" else f" {row['precision']}"
    return f"{row['size']} lr {row['lr']:g}{prec} max_norm {row['max_norm']:g}"


def interval_findings(arms: pd.DataFrame, gaps: pd.DataFrame) -> list[str]:
    """One sentence per cell and clipped arm: the gap, the rates, and what may be called."""
    out = []
    for g in gaps.to_dict("records"):
        iv = interval_of(g, "gap")
        call = verdict(iv, "clipping helped", "clipping cost")
        sel = (arms[CELL_KEYS] == pd.Series({k: g[k] for k in CELL_KEYS})).all(axis=1)
        by = arms[sel].set_index("clip")
        rates = []
        for name in ("collapse", "event"):
            parts = [
                f"{c} {_count(by.loc[c], name)} {interval_of(by.loc[c], name).text()}"
                for c in (UNCLIPPED, g["clip"]) if c in by.index
            ]  # fmt: skip
            rates.append(f"{'pollution events' if name == 'event' else name} " + ", ".join(parts))
        harm = interval_of(g, "harm_per_event")
        out.append(
            f"{where(g)}: held-out gap none - {g['clip']} {iv.text(3)}, {call}; "
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
    arms.to_csv(out / "arms.csv", index=False)
    gaps.to_csv(out / "gaps.csv", index=False)
    return arms, gaps
