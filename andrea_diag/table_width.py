"""How many columns an untrusted table may have before a frame is built of it.

    from andrea_diag.table_width import check_columns, MAX_SWEEP_COLUMNS
    check_columns(path, "metrics.jsonl", n_columns)           # one UserError line past the cap
    check_columns(path, "sweep.csv", n, MAX_SWEEP_COLUMNS)

The byte caps (:mod:`andrea_diag.rundir`) bound a table's rows, not its width: pandas' cost is
per column however few the rows, so one metrics row of 200,000 keys (3 MB, far under the cap)
took minutes to read and clean, and a ``sweep.csv`` header of 200,000 names more than 10
minutes (both grow with the square of the width where columns are set one at a time). The
readers of a run's tables (``runread.read_jsonl``, ``sweep_table.read_sweep_csv``,
``parquet_read.read_parquet``) count the columns first and refuse a table past these.
"""

from __future__ import annotations

from pathlib import Path

from andrea_diag.errors import UserError

# a run's widest table is its metrics: ~80 columns for tiny, ~160 for 120m, three per layer
# group on a user's model (a 7B Llama's 291 tensors, each its own group: ~900). At 20,000 a
# table of one row is read and cleaned in seconds; 200,000 took minutes
MAX_TABLE_COLUMNS = 20_000
MAX_SWEEP_COLUMNS = 1_000  # a sweep writes 26 columns, and the ladder a few more


def check_columns(path: Path, what: str, n: int, most: int | None = None) -> None:
    """Refuse a table of ``n`` columns, more than ``most`` (:data:`MAX_TABLE_COLUMNS`), before
    a frame is built of it."""
    most = MAX_TABLE_COLUMNS if most is None else most
    if n > most:
        raise UserError(
            f"{what} {path} has more than {most:,} columns: no run writes so many",
            hint="the file is damaged or not from andrea-diag",
        )
