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

import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from andrea_diag.errors import UserError
from andrea_diag.given_checks import given_path
from andrea_diag.record import load_run, read_cascade_meta
from andrea_diag.rundir import child, read_json
from andrea_diag.runread import CONFIG, clean


def _arm_dirs(path: Path) -> list[tuple[str, Path]]:
    try:
        is_run, is_cascade = (path / "config.json").is_file(), (path / "cascade.json").is_file()
    except OSError as e:  # a path past PATH_MAX in all: pathlib raises ENAMETOOLONG
        raise UserError(f"cannot look up {path}: {e.strerror or e}") from None
    if is_run:  # the config alone: the whole run is read once, by load_runs
        config = path / "config.json"
        cfg = clean(read_json(config, "config.json", kind=dict), CONFIG, str(config))
        return [(str(cfg.get("arm") or cfg.get("clip") or path.name), path)]
    if is_cascade:
        meta = read_cascade_meta(path)
        return [(str(arm), child(path, str(arm), "arm")) for arm in meta["arms"]]
    raise UserError(f"{path} is not a run or cascade directory (no config.json or cascade.json)")


def _as_paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """One path (a ``str`` or a path) as a list of one: a ``str`` iterated is its characters.
    Each through :func:`given_path`, as the command line's: ``""`` is not the working folder."""
    if isinstance(paths, (str, os.PathLike)):
        return [given_path(paths, "load_runs: paths")]
    if isinstance(paths, bytes) or not isinstance(paths, Iterable):
        raise TypeError(f"load_runs takes a path or a list of paths, not {type(paths).__name__}")
    out = []
    for n, path in enumerate(paths):
        try:
            out.append(given_path(path, f"load_runs: paths[{n}]"))
        except TypeError:  # None too: a search for "the first bad one" must not use None
            raise TypeError(
                f"load_runs takes run directories as str or paths, not {path!r} (paths[{n}])"
            ) from None
    return out


def _check_once(seen: dict[Path, Path], path: Path, what: str) -> None:
    """``path`` not read yet (by its resolved location: ``a``, ``a/``, ``./x/../a``, a link to
    it): read twice, its rows would be counted twice in every aggregate."""
    try:
        where = path.resolve()
    except (OSError, RuntimeError):  # a link loop, a name too long: reading it says so
        where = path.absolute()
    if where in seen:
        raise ValueError(f"load_runs names the same {what} twice: {seen[where]} and {path}")
    seen[where] = path


def load_runs(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> pd.DataFrame:
    """The metrics of every arm of ``paths`` in one frame, with ``run`` and ``arm`` columns.

    ``paths``: run directories, or one of them alone. A directory named twice (also through
    another spelling or a link), or an arm given beside its cascade, is a ``ValueError``."""
    paths = _as_paths(paths)
    if not paths:
        raise UserError("load_runs needs at least one run directory")
    runs: dict[Path, Path] = {}
    for path in paths:
        _check_once(runs, path, "run directory")
    names = [p.name for p in paths]
    arms: dict[Path, Path] = {}
    frames = []
    for path, name in zip(paths, names, strict=True):
        label = str(path) if names.count(name) > 1 else name
        for arm, arm_dir in _arm_dirs(path):
            _check_once(arms, arm_dir, "arm directory")  # a cascade and one of its arms
            metrics = load_run(arm_dir)["metrics"]
            frames.append(metrics.assign(run=label, arm=arm))
    df = pd.concat(frames, ignore_index=True, sort=False)
    front = ["run", "arm"]
    return df[front + [c for c in df.columns if c not in front]]
