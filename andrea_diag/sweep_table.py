"""``sweep.csv`` read as untrusted input: the one reader of the sweep page and the ladder.

    from andrea_diag.sweep_table import read_sweep_table
    table = read_sweep_table(Path("runs/sweep-tiny"))   # one row per arm per cell

Both the sweep page (``report/sweep_dir.py``) and the ladder's statements
(``experiments/ladder.py``) compute on this table, so its rules live here once: the file must
parse (a link, FIFO or oversized file is refused unread, :func:`read_sweep_csv`);
text columns stay text, flags become bools, every other column a number (a bad value is NaN,
as :func:`~andrea_diag.runread.to_float` reads it); a column the page computes on that an older
file lacks is a gap; a row without a number in lr, max_norm or an integer seed has no place in
the grid and is left out with a warning; a table without one of its key columns, with no
rows or more than :data:`MAX_SWEEP_ROWS`, with an arm listed twice or with a cell name that
is no plain component of the sweep directory (``../victim``) is one
:class:`~andrea_diag.errors.UserError` line.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import pandas as pd

from andrea_diag.errors import UserError
from andrea_diag.rundir import DAMAGED, MAX_SWEEP_CSV_BYTES, check_size, child, open_regular
from andrea_diag.runread import log, to_float
from andrea_diag.table_width import MAX_SWEEP_COLUMNS, check_columns
from andrea_diag.tables import placed_rows, read_flag

TEXT = ("cell", "size", "precision", "clip", "lockin", "status", "error")
FLAGS = ("collapse",)
# an arm's place in the grid: the page and the ladder group and pair by these, so a
# sweep.csv without one of them is one line
KEYS = ("cell", "size", "clip", "lr", "max_norm", "seed")
# columns the page computes on that an older or damaged sweep.csv may lack: a gap in every row
COMPUTED = ("final_loss", "min_loss", "n_spikes", "max_grad_norm", "lockin")
# runread's 64 MiB cap is sized for 200,000 arms of ~300 bytes; rows of 50 bytes fit 1.3M
# there, and the page of 300,000 took a minute (linear: ~5 minutes at the cap)
MAX_SWEEP_ROWS = 200_000


def read_sweep_csv(out: Path, **read_csv: Any) -> pd.DataFrame:
    """A sweep's ``sweep.csv`` under ``out``, as untrusted input: a link, FIFO or file past
    ``MAX_SWEEP_CSV_BYTES`` (a planted sparse 40 GB file) is refused unread, and one that is
    not a table is one line. ``read_csv``: pandas' options for the caller's parsing."""
    path = out / "sweep.csv"
    try:
        with open_regular(path, "sweep.csv") as f:  # the file checked is the file read
            check_size(path, "sweep.csv", MAX_SWEEP_CSV_BYTES, opened=f)
            _check_header(path, f)
            f.seek(0)
            table = pd.read_csv(f, **read_csv)
    except (ValueError, UnicodeDecodeError, csv.Error, pd.errors.ParserError) as e:
        raise UserError(f"sweep.csv {path} is not a readable table ({type(e).__name__})") from None
    check_columns(path, "sweep.csv", len(table.columns), MAX_SWEEP_COLUMNS)  # whatever slipped by
    return table


def _check_header(path: Path, f: IO[bytes]) -> None:
    """Refuse, before pandas parses it, a header of more columns than a sweep writes: its
    commas bound them, as no name a sweep writes holds a comma or a quote (a header of 200,000
    names took 19 s to parse and then hours to clean, a column at a time). pandas skips blank
    lines before the header, so they are skipped here too; a quoted name (which could hide a
    line break) is refused."""
    header = f.readline()
    while header and not header.strip():
        header = f.readline()
    if b'"' in header:
        raise UserError(f"sweep.csv {path} quotes a column name: no sweep writes one",
                        hint=DAMAGED)  # fmt: skip
    check_columns(path, "sweep.csv", header.count(b",") + 1, MAX_SWEEP_COLUMNS)


def read_sweep_table(out: Path, also: Sequence[str] = ()) -> pd.DataFrame:
    """``out/sweep.csv`` typed and checked as the module docstring says; ``also``: columns
    whose absence is one line besides :data:`KEYS` (the ladder's ``status``)."""
    path = out / "sweep.csv"
    table = read_sweep_csv(out, dtype=str, keep_default_na=False, na_values=[""])
    missing = [c for c in dict.fromkeys([*KEYS, *also]) if c not in table]
    if missing:
        raise UserError(f"sweep.csv {path} has no {', '.join(missing)} column",
                        hint="the file is damaged")  # fmt: skip
    if table.empty:
        raise UserError(f"sweep.csv {path} has no rows", hint="the file is damaged")
    if len(table) > MAX_SWEEP_ROWS:  # before a row is typed, grouped or a cell looked up
        raise UserError(f"sweep.csv {path} has {len(table):,} rows, more arms than a sweep "
                        f"runs ({MAX_SWEEP_ROWS:,})", hint="the file is damaged")  # fmt: skip
    for col in table.columns:
        if col in TEXT:
            table[col] = table[col].where(table[col].notna(), None)
        elif col in FLAGS:
            # a gap stays one (the rates and the page derive it from the verdict), never False
            table[col] = table[col].map(read_flag)
        else:
            table[col] = table[col].map(to_float).astype("float64")  # a 400-digit int too
    for col in [c for c in COMPUTED if c not in table]:
        log.warning("%s: no %s column; shown as a gap", path, col)
        table[col] = None if col in TEXT else math.nan
    if "precision" in table:  # a gap is the default precision, as the rates read it (aggregate.py)
        table["precision"] = table["precision"].fillna("fp32")
    for col in ("cell", "clip", "size"):
        if table[col].isna().any():
            raise UserError(f"sweep.csv {path} has a row without a {col}")
    table = _placed(path, table)
    arm = [c for c in ("size", "lr", "max_norm", "precision", "seed", "clip") if c in table]
    if table.duplicated(subset=arm).any():  # the same arm, under one cell name or two
        raise UserError(f"sweep.csv {path} lists the same arm twice", hint="the file is damaged")
    for cell in table["cell"].unique():
        child(out, cell, "sweep.csv: cell")  # before anything is read or written
    return table


def _placed(path: Path, table: pd.DataFrame) -> pd.DataFrame:
    """The rows with a number in lr and max_norm and an integer seed: grouping would drop a
    row without one silently, so it is left out with a warning instead."""
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


__all__ = ["COMPUTED", "FLAGS", "KEYS", "MAX_SWEEP_ROWS", "TEXT", "read_sweep_table"]
