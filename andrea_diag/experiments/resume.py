"""Continuing a stopped cascade: which arms are done, which continue from a checkpoint, and
whether the command asks for the run that is on disk.

    andrea-diag cascade --resume runs/cascade-tiny-20261129-2200   # the run's own options
    andrea-diag train --resume runs/train-12m-...                  # one arm

Per arm: ``summary.json`` present → done, kept; a checkpoint → continue from the newest (rows
after it are cut, so none is duplicated); rows but no checkpoint (killed before the first one)
→ the partial arm is moved aside, never deleted, and the arm starts again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from andrea_diag.config import RUNTIME_KEYS, RunConfig  # RUNTIME_KEYS: what a resume may change
from andrea_diag.errors import UserError
from andrea_diag.record import read_cascade_meta
from andrea_diag.train.checkpoint import latest_checkpoint


def move_aside(path: Path) -> Path:
    """An unfinished directory is kept (renamed ``<name>.incomplete-<n>``), never deleted."""
    n = 1
    while (aside := path.with_name(f"{path.name}.incomplete-{n}")).exists():
        n += 1
    path.rename(aside)
    return aside


def arm_state(arm_dir: Path) -> tuple[str, Any]:
    """("done", summary) | ("checkpoint", path) | ("restart", None) | ("new", None)."""
    if (arm_dir / "summary.json").exists():
        return "done", json.loads((arm_dir / "summary.json").read_text())
    ckpt = latest_checkpoint(arm_dir)
    if ckpt is not None:
        return "checkpoint", ckpt
    return ("restart", None) if arm_dir.exists() else ("new", None)


def run_configs(out_dir: Path) -> tuple[dict[str, Any], list[RunConfig]]:
    """The cascade's meta and each started arm's saved config (a bad file: one clear line)."""
    meta = read_cascade_meta(out_dir)
    try:
        configs = [
            RunConfig.from_dict(json.loads((out_dir / arm / "config.json").read_text()))
            for arm in meta["arms"]
            if (out_dir / arm / "config.json").is_file()
        ]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise UserError(f"{out_dir}: a run file is corrupt ({type(exc).__name__}: {exc})") from None
    return meta, configs


def check_same_run(out_dir: Path, arms: list[str], configs: list[RunConfig]) -> None:
    """Refuse, in one line, a resume whose options differ from the run's own."""
    meta, saved = run_configs(out_dir)
    if meta.get("arms") != arms:
        raise UserError(
            f"{out_dir} has arms {','.join(meta.get('arms', []))}, the command asks for "
            f"{','.join(arms)}",
            hint="resume with the run's own options (or only --resume DIR)",
        )
    by_arm = {c.arm: c for c in configs}
    for old in saved:
        new = by_arm[old.arm]
        a, b = old.resolve().to_dict(), new.to_dict()
        diff = sorted(
            k for k in a.keys() | b.keys() if k not in RUNTIME_KEYS and a.get(k) != b.get(k)
        )
        if diff:
            what = ", ".join(f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in diff[:3])
            raise UserError(
                f"{out_dir} was run with other options ({what})",
                hint="resume with the run's own options (or only --resume DIR)",
            )
