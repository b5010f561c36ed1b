"""A run's JSONL tables (metrics, events, samples) read as untrusted input.

    df = read_jsonl(run_dir / "metrics.jsonl")   # every intact row; torn lines skipped, said

Each bound is one :class:`~andrea_diag.errors.UserError` line, checked before the rows it
guards are built: only a regular file is opened (a FIFO would hang), sized by ``fstat`` of
that descriptor, at most :data:`~andrea_diag.rundir.MAX_TABLE_BYTES`; its columns are counted
as rows are read (:mod:`andrea_diag.table_width`); and the memory its rows will hold, estimated
from each line's text before it is parsed (:func:`parsed_bytes`), stays under half the memory
free. The estimate is by structure, not bytes: a ``{}`` line is a dict whatever its 3 bytes
(1 GiB of them held ~24 GiB, past a laptop's memory, and the OOM killer ended ``report``
without a word), while a real metrics row holds ~3x its bytes, so a bytes rule strict enough
for the first refused the writer's own long tables at close.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
from pathlib import Path
from typing import IO, NoReturn

import pandas as pd

from andrea_diag import rundir
from andrea_diag.errors import UserError
from andrea_diag.rundir import (
    MAX_DEPTH,
    MAX_TABLE_BYTES,
    check_size,
    open_regular,
    shallow,
    size_text,
)
from andrea_diag.surrogates import mended
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
            budget, held = _memory_budget(f), 0
            for line in f:
                line = line.strip()
                if not line:
                    continue
                held += parsed_bytes(line)
                if budget is not None and held > budget:  # before the line is parsed
                    _too_big(path, held, budget)
                try:  # a torn row; deep nesting; an integer past int()'s 4300 digits
                    row = mended(json.loads(line), line)  # "\ud800": no frame takes it
                    if line.count("[") + line.count("{") > MAX_DEPTH:  # else it cannot be
                        shallow(row)  # nested past what the table's readers walk
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


def _memory_budget(f: IO[str]) -> int | None:
    """Half the memory free (the frame built of the rows needs about as much again), or None:
    a table of at most ``JSON_FLOOR`` bytes is read whatever the memory free says, as
    ``read_json`` reads one, and so is any where the system does not say. The module
    attributes are read at the call, so a test lowers the memory free there."""
    free = rundir.available_memory()
    if free is None or os.fstat(f.fileno()).st_size <= rundir.JSON_FLOOR:
        return None
    return free // 2


def _too_big(path: Path, held: int, budget: int) -> NoReturn:
    raise UserError(
        f"{path.name} {path}: its rows would hold more than {size_text(held, '.1f')} of memory,"
        f" past half the memory free ({size_text(budget, '.1f')})",
        hint="free memory, then retry",
    )


def parsed_bytes(line: str) -> int:
    """About what ``json.loads(line)`` holds in memory, from the line's text alone: a dict per
    ``{``, a list per ``[``, an item per ``,``, a key per ``:``, and the text itself (x2: a
    non-ASCII string is stored 2-4 bytes a character). Calibrated on real metrics rows (~1.5x
    what they hold) and on hostile ones (``{}`` lines, nested lists, deep dicts: 1.5-4x); a
    string holding braces or commas only over-counts.

    >>> parsed_bytes("{}"), parsed_bytes('{"loss": 3.5, "update": 1}')
    (236, 444)
    """
    count = line.count
    return (2 * len(line) + 232 * count("{") + 64 * count("[") + 64 * count(",")
            + 48 * count(":"))  # fmt: skip
