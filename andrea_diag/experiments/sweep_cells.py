"""Which of a sweep's cell folders are finished, and which folders under its ``--out`` are
cells of another grid (sweep.py reads both before it writes anything).

    finished(out / "tiny-lr0.001-mn1-s0", ["none", "global"])   # cascade.json done, summaries
    outside(out, {"tiny-lr0.001-mn1-s0"})                       # other cells, by name
"""

from __future__ import annotations

import os
from pathlib import Path

from andrea_diag.experiments.status import DONE
from andrea_diag.rundir import read_json

SUMMARY = "summary.json"  # a finished arm's: without it, the cell is not finished


def said_done(cell_dir: Path) -> bool:
    """The cell's ``cascade.json`` says done (a link or FIFO there: read_json's one line)."""
    meta = cell_dir / "cascade.json"
    if not os.path.lexists(meta):
        return False
    return read_json(meta, f"cell {cell_dir.name}'s cascade.json", kind=dict).get("status") == DONE


def finished(cell_dir: Path, clips: list[str]) -> bool:
    """Its cascade.json says done and every arm has its summary: an arm that lost it is
    continued as ``cascade --resume`` continues it (from its checkpoints, else anew)."""
    return said_done(cell_dir) and all(os.path.lexists(cell_dir / a / SUMMARY) for a in clips)


def outside(out: Path, names: set[str]) -> list[str]:
    """The cascades under ``out`` (folders holding a ``cascade.json``; nothing is read) whose
    names are not ``names``: cells of a wider grid that this run's ``sweep.csv`` leaves out.
    A merge of a narrower grid dropped them from the table without a word."""
    if not out.is_dir():
        return []
    return sorted({p.parent.name for p in out.glob("*/cascade.json")} - names)
