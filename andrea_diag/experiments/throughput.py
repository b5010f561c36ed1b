"""A sweep's throughput: aggregate updates per second over one invocation, read from disk.

    before = recorded_updates(cell_dirs, clips)
    ...                                              # the cells train (executor.py)
    meta["throughput"] = throughput(recorded_updates(cell_dirs, clips) - before, wall, cfg)

Counted from the rows the arms wrote (``metrics.jsonl``), not from the cells' own reports, so a
cell in another process, a resumed cell and a crashed one all count what they recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from andrea_diag.experiments.executor import ExecutorConfig


def recorded_updates(cell_dirs: list[Path], clips: list[str]) -> int:
    """Metric rows on disk over every arm of ``cell_dirs``: the sweep's updates so far."""
    total = 0
    for cell_dir in cell_dirs:
        for arm in clips:
            path = cell_dir / arm / "metrics.jsonl"
            if path.is_file():
                with open(path, "rb") as f:
                    total += sum(1 for line in f if line.endswith(b"\n"))
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
