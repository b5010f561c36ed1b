"""A run's JSONL tables (metrics, events, samples) read as untrusted input.

    df = read_jsonl(run_dir / "metrics.jsonl")   # every intact row; torn lines skipped, said

Each bound is one :class:`~andrea_diag.errors.UserError` line, checked before the rows it
guards are built: only a regular file is opened (a FIFO would hang), sized by ``fstat`` of
that descriptor, at most :data:`~andrea_diag.rundir.MAX_TABLE_BYTES`; its columns are counted
as rows are read (:mod:`andrea_diag.table_width`); and it is parsed only where the memory
free holds what it parses into, by the rule of :func:`~andrea_diag.rundir.read_json` (free /
``JSON_EXPANSION``, never below ``JSON_FLOOR``). A parsed row is a dict whatever its bytes: 1 GiB
of ``{}`` lines held ~24 GiB, past a laptop's memory, where a real metrics row holds ~3x its
bytes; the OOM killer ended ``report`` without a word.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
from pathlib import Path
from typing import IO

import pandas as pd

from andrea_diag import rundir
from andrea_diag.rundir import MAX_TABLE_BYTES, check_bytes, check_size, open_regular, size_text
from andrea_diag.table_width import check_columns

log = logging.getLogger("andrea_diag.record")


def read_jsonl(path: Path) -> pd.DataFrame:
    """Read a JSONL table, skipping undecodable lines (a torn row from a crash) with a warning:
    every intact row is kept, before and after it. A row that is not a JSON object counts as
    undecodable; an absent file is an empty table."""
    rows, bad, keys = [], 0, set()
    if path.exists() or path.is_symlink():
        # the file opened is the one checked and sized (a FIFO swapped in after a stat hung here)
        with io.TextIOWrapper(open_regular(path, path.name), "utf-8", "replace") as f:
            check_size(path, path.name, MAX_TABLE_BYTES, "more than this reader takes", f)
            _check_parsable(path, f)
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:  # a torn row; deep nesting; an integer past int()'s 4300 digits
                    row = json.loads(line)
                except (ValueError, RecursionError):
                    row = None
                if isinstance(row, dict):
                    rows.append(row)
                    keys.update(row)  # before the frame: its cost is per column, not per byte
                    check_columns(path, path.name, len(keys))
                else:
                    bad += 1
    if bad:
        log.warning("%s: skipped %d unreadable line(s) (a torn row from a crash?)", path, bad)
    df = pd.DataFrame(rows)  # "inf"/"-inf" strings back to floats in numeric columns, at once
    inf = [c for c in df.columns if df[c].dtype == object and df[c].isin(["inf", "-inf"]).any()]
    if inf:  # (set one by one into ``df``, each copied it: table_width.py)
        fixed = df[inf].replace({"inf": math.inf, "-inf": -math.inf})
        fixed = fixed.apply(pd.to_numeric, errors="coerce")
        df = pd.concat([df.drop(columns=inf), fixed], axis=1)[df.columns]  # in their order
    return df


def _check_parsable(path: Path, f: IO[str]) -> None:
    """Refuse, unread, a table larger than the memory free may parse (read_json's rule; the
    module attributes are read at the call, so a test lowers the memory free there)."""
    free = rundir.available_memory()
    if free is None:  # the system does not say: the byte cap alone, as read_json does
        return
    cap = max(rundir.JSON_FLOOR, free // rundir.JSON_EXPANSION)
    if cap < MAX_TABLE_BYTES:  # past the byte cap the file's own size was said first
        said = f"more than {size_text(free, '.1f')} of free memory may parse"
        size = os.fstat(f.fileno()).st_size  # the descriptor read, as check_size sized it
        check_bytes(path, path.name, size, cap, said, hint="free memory, then retry")
