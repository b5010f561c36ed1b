"""An arm's summary as the sweep, the cascade and ``--resume`` take it: cleaned, then checked.

    summary = arm_summary(cell_dir / "none", cell="tiny-lr0.001-mn1-s0")
    row = arm_row(cfg, "none", summary, cell)          # one row of sweep.csv

A kept cell or arm is someone else's run directory: untrusted input. Its ``summary.json`` (or a
crashed arm's ``partial_summary.json``) is read as the report reads it (``runread.load_run``):
a field of the wrong type is dropped (``runread.clean``; a NaN where a count belongs too), and
a summary the trainer wrote is held to the arm's own metrics table and ``config.json``
(``summary_check.py``). Taken as it was, a summary copied from a sibling arm or edited by hand
put that run's losses into ``sweep.csv``, and from there into the rates and paired gaps of
``arms.csv`` and ``gaps.csv``, while the cell's own page showed the table's; now the table's
figures are taken, with one warning line. What cannot be read at all (a summary that is no JSON
object, a damaged metrics table) is one line naming the cell and the arm.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from andrea_diag.config import RunConfig
from andrea_diag.errors import UserError
from andrea_diag.experiments.status import Status
from andrea_diag.probes.verdict import COLLAPSE_VERDICTS
from andrea_diag.rundir import read_json
from andrea_diag.runread import CONFIG, SUMMARY, clean, read_metrics
from andrea_diag.summary_check import checked_summary

SUMMARIES = ("summary.json", "partial_summary.json")  # a finished arm's, a crashed arm's
CELL_HINT = "move the cell aside and re-run it (nothing was written)"


def read_summary(
    arm_dir: Path, name: str = "summary.json", what: str | None = None
) -> dict[str, Any]:
    """``arm_dir/name`` cleaned and, when the trainer wrote it (it names its ``arm``), with the
    figures of the arm's own metrics table where they differ (one warning line says so)."""
    what = what or f"arm {arm_dir.name}'s {name}"
    return _held_to_table(arm_dir, _own(arm_dir / name, what), arm_dir / name)


def _own(path: Path, what: str) -> dict[str, Any]:
    return clean(read_json(path, what, kind=dict), SUMMARY, what)


def _held_to_table(arm_dir: Path, summary: dict[str, Any], path: Path) -> dict[str, Any]:
    if "arm" not in summary:  # not the trainer's: nothing to hold it to (summary_check.py)
        return summary
    config_path = arm_dir / "config.json"
    config = None
    if os.path.lexists(config_path):
        config = clean(read_json(config_path, "config.json", kind=dict), CONFIG, str(config_path))
    metrics = read_metrics(arm_dir)
    counted = summary.get("n_updates")
    if metrics.empty and path.name == SUMMARIES[0] and isinstance(counted, int) and counted > 0:
        # a finished arm with nothing to hold it to, while it counts updates: a lost or
        # unreadable table (or a summary written by hand) would enter the sweep's rows unchecked
        raise UserError(
            f"its metrics table is missing or holds no readable row, while {path.name} counts "
            f"{counted:,} updates",
            hint="the arm's records are damaged: move its folder aside and train it again",
        )
    return checked_summary(summary, config, metrics, path)[0]


def arm_summary(arm_dir: Path, cell: str | None = None) -> dict[str, Any]:
    """A finished arm's summary; a crashed one's partial summary; ``{"status": "not run"}``
    when it never started. Unreadable: one line naming ``cell`` and the arm."""
    where = f"cell {cell} arm {arm_dir.name}" if cell else f"arm {arm_dir.name}"
    for name in SUMMARIES:
        if not os.path.lexists(arm_dir / name):  # a link or FIFO there is read_json's one line
            continue
        try:  # the summary's own fault (its message names it): the cell is redone
            summary = _own(arm_dir / name, f"{where}'s {name}")
        except UserError as e:
            raise UserError(e.message, hint=CELL_HINT if cell else e.hint) from None
        try:  # the arm's config or table (a damaged metrics.parquet): its own way out
            return _held_to_table(arm_dir, summary, arm_dir / name)
        except UserError as e:
            raise UserError(f"{where}: {e.message}", hint=e.hint) from None
    return {"status": Status.NOT_RUN}


def arm_row(cfg: RunConfig, arm: str, summary: dict[str, Any], cell: str) -> dict[str, Any]:
    """One arm's row of ``sweep.csv``: ``lockin`` is the run's verdict, ``collapse`` whether it
    is diverged, locked-in or non-finite (None when the arm has no verdict: it never ran)."""
    spikes = summary.get("spikes") or {}
    poll = summary.get("pollution") or {}
    lock = summary.get("lockin") or {}
    verdict = lock.get("verdict")
    # summaries from before the verdict carried "collapse": the same sets decide it
    collapse = lock.get("collapse", verdict in COLLAPSE_VERDICTS if verdict else None)
    return {
        "cell": cell, "size": cfg.size, "lr": cfg.lr, "max_norm": cfg.max_norm,
        "seed": cfg.seed, "precision": cfg.precision, "clip": arm,
        "final_loss": summary.get("final_loss"), "min_loss": summary.get("min_loss"),
        "final_eval_loss": summary.get("final_eval_loss"),
        "min_eval_loss": summary.get("min_eval_loss"),
        "max_grad_norm": summary.get("max_grad_norm"),
        "pct_clipped": summary.get("pct_clipped"),
        "n_spikes": spikes.get("n_spikes"), "n_grad_spikes": spikes.get("n_grad_spikes"),
        "spike_score_grad": spikes.get("spike_score_grad"),
        "n_cascades": spikes.get("n_cascades"),
        "max_m_share": poll.get("max_m_share"), "recovery_m": poll.get("recovery_m"),
        "max_v_share": poll.get("max_v_share"), "final_v_share": poll.get("final_v_share"),
        "lockin": verdict, "collapse": collapse,
        "nonfinite_updates": summary.get("nonfinite_updates"),
        "status": summary.get("status", Status.DONE), "error": summary.get("error"),
    }  # fmt: skip
