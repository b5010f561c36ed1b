"""Column conventions of the seed tables, shared by the experiments that write them and the
pages that read them (``arms.csv``, ``gaps.csv``, ``ladder.csv``), so neither imports the other.

    iv = interval_of(row, "gap")       # the row's gap, gap_lo, gap_hi and pairs as an Interval
    row.update(interval_columns("collapse", wilson(3, 8)))

An interval named ``<name>`` is stored as ``<name>`` (``<name>_rate`` for a rate), ``<name>_lo``
and ``<name>_hi``; its n is in the column ``N_COLUMN[name]``. This module sits beside
``stats.py`` at the bottom of the layers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from andrea_diag.stats import Interval

CELL_KEYS = ["size", "lr", "precision", "max_norm"]  # a cell of the grid, seeds pooled
GROUP = ["lr", "precision", "max_norm"]  # a ladder states one threshold per group
UNCLIPPED = "none"
RATES = ("collapse", "event")  # stored as <name>_rate

# per interval: the column holding its number of seeds (or pairs)
N_COLUMN = {"collapse": "seeds", "event": "event_seeds", "gap": "pairs", "gap_t": "pairs",
            "harm_per_event": "event_pairs"}  # fmt: skip
# intervals whose estimate is another column's (the t-interval is around the same mean gap)
ESTIMATE = {"gap_t": "gap"}


def interval_columns(name: str, iv: Interval) -> dict[str, float]:
    """The columns that store ``iv`` under ``name``."""
    est = f"{name}_rate" if name in RATES else ESTIMATE.get(name, name)
    return {est: iv.estimate, f"{name}_lo": iv.lo, f"{name}_hi": iv.hi}


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def interval_of(row: Mapping[str, Any], name: str) -> Interval:
    """Back from a table row's ``<name>[_rate]``, ``<name>_lo``, ``<name>_hi`` columns."""
    base = ESTIMATE.get(name, name)
    est = row.get(f"{base}_rate", row.get(base, math.nan))
    n = row.get(N_COLUMN[name], 0)
    n = 0 if n is None or (isinstance(n, float) and math.isnan(n)) else int(n)  # a merge's gap
    lo, hi = row.get(f"{name}_lo"), row.get(f"{name}_hi")
    return Interval(_number(est), _number(lo), _number(hi), n)


def where(row: Mapping[str, Any]) -> str:
    """``12m lr 0.0003 max_norm 1`` (the precision named when it is not fp32)."""
    prec = "" if row["precision"] == "fp32" else f" {row['precision']}"
    return f"{row['size']} lr {row['lr']:g}{prec} max_norm {row['max_norm']:g}"


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may run as a formula


def _defused(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_text(table: pd.DataFrame) -> str:
    """``table.to_csv(index=False)``, with every text cell that a spreadsheet would run as a
    formula (it starts with ``= + - @``, a tab or a CR) behind an apostrophe, OWASP's advice:
    an arm's error, status or verdict comes from a run directory, which may be someone else's.
    Numbers are left alone (a negative gap is a float, not text).

    >>> print(csv_text(pd.DataFrame({"error": ["=HYPERLINK(1)", "ok"], "gap": [-0.5, 1.0]})))
    error,gap
    '=HYPERLINK(1),-0.5
    ok,1.0
    <BLANKLINE>
    """
    text_columns = [c for c in table.columns if not pd.api.types.is_numeric_dtype(table[c])]
    safe = table.copy()
    for col in text_columns:
        safe[col] = safe[col].map(_defused)
    return safe.to_csv(index=False)


def read_flag(value: Any) -> bool | None:
    """A bool read back from CSV ("True"/"False"), JSON or pandas; None (a gap, which the rates
    fill from the arm's verdict) when unknown: an empty cell or a word other than true/false.

    >>> read_flag("True"), read_flag(" false"), read_flag(""), read_flag(float("nan"))
    (True, False, None, None)
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        return {"true": True, "false": False}.get(value.strip().lower())
    return bool(value)


def placed_rows(table: pd.DataFrame) -> pd.Series:
    """Per row of a sweep.csv (numbers already read), whether it has a place in the grid: a
    number in ``lr`` and ``max_norm`` and an integer ``seed`` a float holds exactly (inf, or
    a 400-digit seed, is not one). Grouping drops a row without one silently, so both the
    sweep page and the ladder leave such rows out with a warning instead."""
    seed = table["seed"]
    placed = table[["lr", "max_norm"]].notna().all(axis=1) & (seed == seed.round())
    return placed & (seed.abs() < 2**53)
