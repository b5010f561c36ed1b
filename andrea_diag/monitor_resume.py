"""The read-back of a SpikeMonitor run that ``resume=True`` continues: the folder is untrusted
input, checked before anything is written to it (:func:`resume_point`), and the earlier
segment's end-of-run files are set aside once the resumed run holds the folder
(:func:`set_aside_end_files`).

    start = resume_point(out_dir)            # 0 for an empty or missing folder
    ...                                      # the Recorder takes the folder
    set_aside_end_files(run_dir, start)
"""

from __future__ import annotations

import os
from pathlib import Path

from andrea_diag.errors import UserError
from andrea_diag.fields import MAX_UPDATES
from andrea_diag.parquet_read import parquet_rows
from andrea_diag.rundir import MAX_TABLE_BYTES, check_size, read_json, regular_file, remove_file
from andrea_diag.runread import clean_table, read_jsonl

# the JSONL tables a resumed monitor appends to (framework.jsonl: the callbacks' own logs)
RESUMED_TABLES = ("metrics.jsonl", "events.jsonl", "samples.jsonl", "framework.jsonl")
# the earlier segment's end-of-run files: copies of metrics.jsonl (removed) and its summaries
# (kept aside)
STALE_COPIES = ("metrics.parquet", "eval.csv")
SUMMARIES = ("summary.json", "partial_summary.json")


def resume_point(out_dir: str | Path) -> int:
    """The last update the run in ``out_dir`` recorded, for ``resume=True`` (0: nothing
    there yet). The folder is untrusted and read before anything is written to it:

    - it must hold a SpikeMonitor's run (``config.json`` a dict of ``"kind": "monitor"``),
      else the resume would overwrite another run's config, or write into any folder;
    - each table appended to must be a regular file within the readers' size cap: one that
      is not is refused now, not after the user's whole run at :meth:`SpikeMonitor.close`;
    - ``metrics.parquet`` may not hold more rows than ``metrics.jsonl`` (a table cut short or
      damaged): the resume rewrites the parquet from the JSONL, and would lose the rest.

    A refusal is one ``ValueError`` naming the file; nothing is written."""
    path = Path(out_dir)
    if not path.is_dir() or not any(path.iterdir()):
        return 0
    try:
        config = read_json(path / "config.json", "config.json", kind=dict)
        if config.get("kind") != "monitor":
            raise UserError(
                f"config.json says kind {config.get('kind')!r}, not a SpikeMonitor run",
                hint="resume=True continues a folder SpikeMonitor wrote",
            )
        for name in RESUMED_TABLES:
            table = path / name
            if table.exists() or table.is_symlink():
                regular_file(table, name)
                check_size(table, name, MAX_TABLE_BYTES, "more than this reader takes")
        for name in (
            STALE_COPIES + SUMMARIES
        ):  # set aside after the folder is taken: a folder there fails
            if (path / name).is_dir() and not (path / name).is_symlink():
                raise UserError(f"{name} is a folder, not the file a run writes there")
        jsonl = path / "metrics.jsonl"
        updates = clean_table(read_jsonl(jsonl), "metrics", jsonl).get("update")
        _check_parquet_rows(path, 0 if updates is None else len(updates))
    except UserError as e:
        hint = f" ({e.hint})" if e.hint else ""
        raise ValueError(f"SpikeMonitor: cannot resume {path}: {e.message}{hint}") from None
    known = updates.dropna() if updates is not None else []
    low, last = (int(known.min()), int(known.max())) if len(known) else (0, 0)
    if low < 0 or last > MAX_UPDATES:  # a float past 2**53, a negative or damaged row
        raise ValueError(
            f"SpikeMonitor: cannot resume {path}: metrics.jsonl records update "
            f"{low if low < 0 else last}, outside any run's 0 to {MAX_UPDATES}"
        )
    return last


def _check_parquet_rows(run_dir: Path, jsonl_rows: int) -> None:
    """Refuse a ``metrics.parquet`` with rows that ``metrics.jsonl`` no longer holds."""
    table = run_dir / "metrics.parquet"
    if not (table.exists() or table.is_symlink()):
        return
    rows = parquet_rows(table)  # None: damaged, so nothing in it to lose (it is removed)
    if rows is not None and rows > jsonl_rows:
        raise UserError(
            f"metrics.parquet holds {rows} rows but metrics.jsonl only {jsonl_rows}: the resume "
            "rewrites the parquet table from metrics.jsonl and would lose the rest",
            hint="restore metrics.jsonl, or resume into a copy",
        )


def set_aside_end_files(run_dir: Path, update: int) -> None:
    """Before a resumed monitor's first update: the earlier segment's end-of-run files. The
    metrics table and eval.csv are copies of ``metrics.jsonl`` (rewritten at close; a stale
    parquet would hide every resumed row from the report if the run were killed); the summary
    is the earlier segment's own (its spike counts are not carried on), so it is kept as
    ``summary_to_update_<N>.json`` rather than read as this run's, or deleted."""
    for name in STALE_COPIES:
        remove_file(run_dir / name, "the stale end-of-run file")
    for name in SUMMARIES:
        old = run_dir / name
        if old.is_symlink() or old.is_file():  # a link is renamed itself, never followed
            kept, n = run_dir / f"{old.stem}_to_update_{update}.json", 1
            while kept.exists() or kept.is_symlink():  # a second resume at the same update
                n += 1
                kept = run_dir / f"{old.stem}_to_update_{update}-{n}.json"
            os.replace(old, kept)
