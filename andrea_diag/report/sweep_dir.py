"""Re-render a sweep directory someone else made: every finished cell's report, then the page.

    from andrea_diag.report.sweep_dir import render_sweep_dir
    render_sweep_dir(Path("runs/sweep-tiny"))      # what `andrea-diag report runs/sweep-tiny` does

The sweep directory is untrusted input (:mod:`andrea_diag.rundir`): ``sweep.json`` must be a JSON
object whose fields have the types the page formats (:data:`andrea_diag.runread.SWEEP`; a wrong
one is dropped and shown as "-"), ``sweep.csv`` must parse and its columns are made the kind
the page computes on (a wrong value, or a loss column it lacks, is a gap; a row without a
number in lr, max_norm or seed is left out with a warning; a table without one of those
columns is one line), and every cell name must be one plain component inside the sweep, so a
cell named ``../victim`` is refused before anything is read or written.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from andrea_diag.errors import UserError
from andrea_diag.record import read_cascade_meta
from andrea_diag.report.html import render_cascade
from andrea_diag.rundir import child, read_json
from andrea_diag.runread import SWEEP, clean, log, read_sweep_csv, to_float
from andrea_diag.tables import placed_rows

TEXT = ("cell", "size", "precision", "clip", "lockin", "status", "error")
FLAGS = ("collapse",)
# an arm's place in the grid: the page groups and pairs by these, so a sweep.csv without one
# of them is one line (as the ladder's reader says it: experiments/ladder.py)
KEYS = ("cell", "size", "clip", "lr", "max_norm", "seed")
# columns the page computes on that an older or damaged sweep.csv may lack: a gap in every row
COMPUTED = ("final_loss", "min_loss", "n_spikes", "max_grad_norm", "lockin")


def read_sweep_meta(out: Path) -> dict[str, Any]:
    """sweep.json as a cleaned dict, its lists holding only values of the listed kind."""
    path = out / "sweep.json"
    meta = clean(read_json(path, "sweep.json", kind=dict), SWEEP, str(path))
    for key, kind in (("sizes", str), ("clips", str), ("precisions", str), ("cells", str)):
        meta[key] = [v for v in meta.get(key) or [] if isinstance(v, kind)]
    for key in ("lrs", "max_norms", "seeds"):
        meta[key] = [v for v in meta.get(key) or []
                     if isinstance(v, (int, float)) and not isinstance(v, bool)]  # fmt: skip
    if not isinstance(meta.get("throughput"), dict):
        meta.pop("throughput", None)
    return meta


def read_sweep_table(out: Path) -> pd.DataFrame:
    """sweep.csv with text columns as text, number columns as numbers (a bad value: NaN, as
    :func:`andrea_diag.runread.to_float` reads it), a column the page computes on that is
    absent as a gap, and the rows that have no place in the grid left out with a warning."""
    path = out / "sweep.csv"
    table = read_sweep_csv(out, dtype=str, keep_default_na=False, na_values=[""])
    missing = [c for c in KEYS if c not in table]
    if missing:
        raise UserError(f"sweep.csv {path} has no {', '.join(missing)} column",
                        hint="the file is damaged")  # fmt: skip
    if table.empty:
        raise UserError(f"sweep.csv {path} has no rows", hint="the file is damaged")
    for col in table.columns:
        if col in TEXT:
            table[col] = table[col].where(table[col].notna(), None)
        elif col in FLAGS:
            table[col] = table[col].map(lambda v: None if v is None else str(v).lower() == "true")
        else:
            table[col] = table[col].map(to_float).astype("float64")
    for col in [c for c in COMPUTED if c not in table]:
        log.warning("%s: no %s column; shown as a gap", path, col)
        table[col] = None if col in TEXT else math.nan
    if "precision" in table:  # a gap is the default precision, as the rates read it (aggregate.py)
        table["precision"] = table["precision"].fillna("fp32")
    for col in ("cell", "clip", "size"):
        if table[col].isna().any():
            raise UserError(f"sweep.csv {path} has a row without a {col}")
    table = _placed(path, table)
    keys = [
        c for c in ("cell", "size", "lr", "max_norm", "precision", "seed", "clip") if c in table
    ]
    if table.duplicated(subset=keys).any() or table.duplicated(subset=keys[1:]).any():
        raise UserError(f"sweep.csv {path} lists the same arm twice", hint="the file is damaged")
    for cell in table["cell"].unique():
        child(out, cell, "sweep.csv: cell")  # before anything is read or written
    return table


def _placed(path: Path, table: pd.DataFrame) -> pd.DataFrame:
    """The rows with a number in lr and max_norm and an integer seed: the page places an arm by
    them, and pandas' grouping would drop a row without one silently (the ladder's rule)."""
    placed = placed_rows(table)
    if not placed.any():
        raise UserError(f"sweep.csv {path} has no row with a number in lr, max_norm and seed",
                        hint="the file is damaged")  # fmt: skip
    if not placed.all():
        log.warning("%s: %d row(s) without a number in lr, max_norm or seed left out", path,
                    int((~placed).sum()))  # fmt: skip
    table = table[placed].copy()
    table["seed"] = table["seed"].astype("int64")
    return table.reset_index(drop=True)


def _finished(cell_dir: Path) -> bool:
    if not (cell_dir / "cascade.json").exists():
        return False
    return read_cascade_meta(cell_dir).get("status") == "done"


def render_sweep_dir(out: Path) -> Path:
    """Re-render every finished cell's report and the sweep page (no training)."""
    from andrea_diag.report.sweep_page import render_sweep

    out = Path(out)
    if not (out / "sweep.json").exists() or not (out / "sweep.csv").exists():
        raise UserError(f"{out} is not a finished sweep directory (no sweep.json / sweep.csv)")
    meta = read_sweep_meta(out)
    table = read_sweep_table(out)
    shared = out if meta.get("plotly") == "shared" else None
    for cell in table["cell"].unique():
        cell_dir = child(out, cell, "sweep.csv: cell")
        if _finished(cell_dir):
            render_cascade(cell_dir, shared)
    return render_sweep(out, table, meta)
