"""A sweep's throughput: aggregate updates per second over one invocation, read from disk.

    before = recorded_updates(cell_dirs, clips)
    ...                                              # the cells train (executor.py)
    meta["throughput"] = throughput(recorded_updates(cell_dirs, clips) - before, wall, cfg)

Counted from the rows the arms wrote (``metrics.jsonl``), not from the cells' own reports, so a
cell in another process, a resumed cell and a crashed one all count what they recorded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from andrea_diag.errors import UserError
from andrea_diag.experiments.executor import ExecutorConfig
from andrea_diag.rundir import MAX_TABLE_BYTES, check_size, child, open_regular


def recorded_updates(cell_dirs: list[Path], clips: list[str]) -> int:
    """Metric rows on disk over every arm of ``cell_dirs``: the sweep's updates so far.

    Only a regular file inside the run is read (``rundir``): a ``metrics.jsonl`` that is a FIFO,
    a device or a link out of the run, or an arm folder linked out, is skipped, as a missing
    one is; they hold no rows this sweep wrote, and the cell's own reader refuses them. So is
    one past ``MAX_TABLE_BYTES``, unread."""
    total = 0
    for cell_dir in cell_dirs:
        for arm in clips:
            try:
                path = child(cell_dir, arm, "arm") / "metrics.jsonl"
                if not os.path.lexists(path):
                    continue
                with open_regular(path, "the arm's metrics.jsonl") as f:
                    # a planted 40 GB sparse file: skipped unread; in chunks, a row that never
                    # ends is never held whole
                    check_size(path, "the arm's metrics.jsonl", MAX_TABLE_BYTES)
                    total += sum(c.count(b"\n") for c in iter(lambda: f.read(1 << 20), b""))
            except UserError:
                continue
    return total


def throughput(updates: int, wall_s: float, cfg: ExecutorConfig) -> dict[str, Any]:
    """What the sweep's summary reports: aggregate updates per second over this invocation."""
    return {
        "updates": updates,
        "wall_s": round(wall_s, 3),
        "updates_per_s": updates / wall_s if wall_s > 0 else None,
        "executor": cfg.kind,
        "jobs": cfg.jobs,
        "jobs_auto": cfg.auto_jobs,  # chosen by --jobs auto (the default), not given
        "note": "metric rows added by this invocation (every arm of every cell) over its wall "
        "time from the first cell to the last; resumed cells count only their new rows",
    }


def earlier_throughputs(old: dict[str, Any]) -> dict[str, Any]:
    """The earlier invocations' entries of ``sweep.json`` (``old``), to keep: ``throughput`` if
    it is a dict, ``throughput_earlier`` as its dict entries if it is a list. The file is the
    run dir's, so anything may be there: another shape is dropped (as a field of the wrong type
    is, runread.py), never spread into the list."""
    kept: dict[str, Any] = {}
    if isinstance(old.get("throughput"), dict):
        kept["throughput"] = old["throughput"]
    earlier = old.get("throughput_earlier")
    if isinstance(earlier, list) and any(isinstance(t, dict) for t in earlier):
        kept["throughput_earlier"] = [t for t in earlier if isinstance(t, dict)]
    return kept


def throughputs(now: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """``sweep.json``'s throughput entries: this invocation's figure, the earlier ones kept
    (``throughput_earlier``, from :func:`earlier_throughputs`); a re-run that trained nothing
    keeps the measured figure as is. An earlier list without a last figure is kept too."""
    before = earlier.get("throughput_earlier", [])
    if "throughput" not in earlier:
        return {"throughput": now, **({"throughput_earlier": before} if before else {})}
    if now["updates"] == 0:
        return earlier
    return {"throughput": now, "throughput_earlier": [*before, earlier["throughput"]]}
