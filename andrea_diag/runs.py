"""Many run directories into one pandas frame, for your own analysis.

    >>> from andrea_diag.runs import load_runs
    >>> df = load_runs(["runs/cascade-tiny-a", "runs/pl-mine"])   # doctest: +SKIP
    >>> df.groupby(["run", "arm"])["loss"].last()                   # doctest: +SKIP

Each path is one arm's run directory (``config.json`` inside: ``train``, a framework callback or
``SpikeMonitor``) or a cascade directory (``cascade.json`` listing its arms, each read from its
own sub-folder, checked to lie inside it). The frame has one row per optimizer update of every
arm, with two columns added in front: ``run`` (the path's folder name, or the whole path when two
names clash) and ``arm``. Read the update index as ``df["update"]``: ``df.update`` is pandas'
own ``DataFrame.update`` method, not the column.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from andrea_diag.errors import UserError
from andrea_diag.record import load_run, read_cascade_meta
from andrea_diag.rundir import child


def _arm_dirs(path: Path) -> list[tuple[str, Path]]:
    if (path / "config.json").is_file():
        cfg = load_run(path)["config"] or {}
        return [(str(cfg.get("arm") or cfg.get("clip") or path.name), path)]
    if (path / "cascade.json").is_file():
        meta = read_cascade_meta(path)
        return [(str(arm), child(path, str(arm), "arm")) for arm in meta["arms"]]
    raise UserError(f"{path} is not a run or cascade directory (no config.json or cascade.json)")


def load_runs(paths: Iterable[str | Path]) -> pd.DataFrame:
    """The metrics of every arm of ``paths`` in one frame, with ``run`` and ``arm`` columns."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise UserError("load_runs needs at least one run directory")
    names = [p.name for p in paths]
    frames = []
    for path, name in zip(paths, names, strict=True):
        label = str(path) if names.count(name) > 1 else name
        for arm, arm_dir in _arm_dirs(path):
            metrics = load_run(arm_dir)["metrics"]
            frames.append(metrics.assign(run=label, arm=arm))
    df = pd.concat(frames, ignore_index=True, sort=False)
    front = ["run", "arm"]
    return df[front + [c for c in df.columns if c not in front]]
