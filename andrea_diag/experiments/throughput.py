"""A sweep's throughput: aggregate updates per second over one invocation, read from disk.

    before = recorded_updates(cell_dirs, clips)
    ...                                              # the cells train (executor.py)
    meta["throughput"] = throughput(recorded_updates(cell_dirs, clips) - before, wall, cfg)

Counted from the rows the arms wrote (``metrics.jsonl``), not from the cells' own reports, so a
cell in another process, a resumed cell and a crashed one all count what they recorded.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

from andrea_diag.errors import UserError
from andrea_diag.experiments.executor import ExecutorConfig
from andrea_diag.rundir import MAX_TABLE_BYTES, check_size, child, open_regular

log = logging.getLogger("andrea_diag.record")

MAX_EARLIER = 1_000  # one sweep's invocations: a handful; a longer list is not the sweep's
MAX_GPUS = 64  # per-GPU entries of one figure's ``gpu_busy``
MAX_TEXT = 1_000  # characters of a kept text field (the note, the executor's name)
_COUNTS = {"updates_per_s": float, "updates": int, "wall_s": float, "jobs": int}
_BUSY = ("pct_mean", "pct_min", "pct_max", "n_samples")


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


def _measure(v: Any, top: float = math.inf, kind: type = float) -> bool:
    """A count, a time or a percentage as a sweep writes it: a finite number in [0, top]; a
    count (``kind`` int) a whole JSON integer a float holds exactly."""
    ok = isinstance(v, int if kind is int else (int, float)) and not isinstance(v, bool)
    # compared as they are: a JSON integer past the float range overflows math.isfinite
    return ok and 0 <= v <= min(top, 2**53 if kind is int else 1e300)


def _busy(b: Any, depth: int = 0) -> dict[str, Any] | None:
    """A figure's ``gpu_busy`` (gpu_busy.py) with only its own fields, each in range."""
    if not isinstance(b, dict):
        return None
    out = {
        k: b[k]
        for k in _BUSY
        if _measure(b.get(k), *((100.0, float) if k.startswith("pct") else (math.inf, int)))
    }
    if isinstance(b.get("source"), str) and len(b["source"]) <= MAX_TEXT:
        out["source"] = b["source"]
    devices = b.get("devices") if depth == 0 else None
    if isinstance(devices, dict):
        per = {str(i)[:MAX_TEXT]: _busy(d, 1) for i, d in list(devices.items())[:MAX_GPUS]}
        out["devices"] = {i: d for i, d in per.items() if d}
    return out if "pct_mean" in out else None


def _figure(t: Any) -> dict[str, Any] | None:
    """One earlier invocation's figure with only the fields :func:`throughput` writes, each of
    its type and in range; None when it holds no count (then it is not a figure at all)."""
    if not isinstance(t, dict):
        return None
    out: dict[str, Any] = {k: t[k] for k, kind in _COUNTS.items()  # null: not measured
                           if k in t and (t[k] is None or _measure(t[k], kind=kind))}  # fmt: skip
    out.update({k: t[k] for k in ("executor", "note")
                if isinstance(t.get(k), str) and len(t[k]) <= MAX_TEXT})  # fmt: skip
    if isinstance(t.get("jobs_auto"), bool):
        out["jobs_auto"] = t["jobs_auto"]
    if (busy := _busy(t.get("gpu_busy"))) is not None:
        out["gpu_busy"] = busy
    dropped = sorted(str(k)[:40] for k in t if k not in out)[:8]
    if dropped:  # the file is the run dir's: what the sweep did not write is not carried on
        log.warning("sweep.json: an earlier throughput figure's %s not kept (damaged or not "
                    "the sweep's)", ", ".join(dropped))  # fmt: skip
    return out if out.get("updates") is not None or out.get("updates_per_s") is not None else None


def earlier_throughputs(old: dict[str, Any]) -> dict[str, Any]:
    """The earlier invocations' entries of ``sweep.json`` (``old``), to keep: ``throughput`` if
    it is a figure, ``throughput_earlier``'s figures if it is a list (the last
    ``MAX_EARLIER``). The file is the run dir's, so anything may be there: each figure keeps
    only the fields the sweep writes, each of its type and in range; another shape is dropped
    (as a field of the wrong type is, runread.py), never spread into the list.

    >>> earlier_throughputs({"throughput": {"updates": 6, "wall_s": -1.0, "x": "y" * 9}})
    {'throughput': {'updates': 6}}
    """
    kept: dict[str, Any] = {}
    if (last := _figure(old.get("throughput"))) is not None:
        kept["throughput"] = last
    earlier = old.get("throughput_earlier")
    if isinstance(earlier, list):
        figures = [f for f in map(_figure, earlier[-MAX_EARLIER:]) if f is not None]
        if figures:
            kept["throughput_earlier"] = figures
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
