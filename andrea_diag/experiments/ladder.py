"""The capacity ladder: at which model size does clipping become mandatory, and how surely?

    andrea-diag ladder --seed 0,1,2 --lr 3e-4,1e-2 --out runs/ladder

A ladder is a sweep over sizes (ordered by parameter count) x lrs x precisions x seeds, arms
``none`` and ``global``, followed by two threshold statements per (lr, precision, max_norm):

- *harm*: the smallest size whose paired held-out gap (unclipped minus clipped) has a 95%
  interval above 0;
- *collapse*: the smallest size whose unclipped collapse rate exceeds the clipped one with
  non-overlapping Wilson intervals;

each a size, or "none in <smallest>–<largest> at these lrs and steps". Beside them, per size
and arm: the pollution-event rate, and the harm per event (the paired gap over the seeds whose
unclipped arm had an event), each with its interval. Output: the sweep's own files and pages,
plus ``ladder.json`` (thresholds), ``ladder.csv`` (per size and arm) and ``ladder.html``.

The default ladder is the seeds' recipe (v1, lr 3e-4) on the toolkit's real-text sources,
``LADDER_STEPS`` updates per arm, so the gap has time to settle; a higher lr is the stress axis.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console

from andrea_diag.config import MODEL_PRESETS, RunConfig
from andrea_diag.errors import UserError
from andrea_diag.experiments.aggregate import (
    UNCLIPPED,
    arm_rates,
    finished,
    interval_of,
    paired_gaps,
)
from andrea_diag.experiments.cascade import default_out, report_renderer_available
from andrea_diag.experiments.executor import ExecutorConfig
from andrea_diag.experiments.sweep import SweepSpec, run_sweep
from andrea_diag.record import write_json

LADDER_SIZES = ["12m", "30m", "60m", "120m"]
LADDER_LRS = [3e-4]  # the seeds' recipe; add a stress lr with --lr
LADDER_STEPS = 1500  # pilot 4: the gap between arms settles only after ~1,000 updates
LADDER_CLIPS = ["none", "global"]
GROUP = ["lr", "precision", "max_norm"]  # one threshold statement per group


@dataclass
class LadderSpec:
    base: RunConfig = field(default_factory=RunConfig)
    sizes: list[str] = field(default_factory=lambda: list(LADDER_SIZES))
    lrs: list[float] = field(default_factory=lambda: list(LADDER_LRS))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    precisions: list[str] = field(default_factory=lambda: ["fp32"])
    max_norms: list[float] = field(default_factory=lambda: [1.0])
    clips: list[str] = field(default_factory=lambda: list(LADDER_CLIPS))
    out: Path | None = None
    plotly: str = "shared"  # a ladder is published as a folder of pages
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)  # --jobs, --mps


def rungs(sizes: list[str]) -> list[str]:
    """The sizes in increasing parameter count: "smallest size" means the first of these."""
    unknown = [s for s in sizes if s not in MODEL_PRESETS]
    if unknown:
        raise UserError(
            f"unknown size {unknown[0]!r}", hint=f"choose from {', '.join(MODEL_PRESETS)}"
        )
    if len(set(sizes)) < 2:
        raise UserError("a ladder needs at least two sizes", hint="e.g. --size 12m,30m,60m,120m")
    return sorted(dict.fromkeys(sizes), key=lambda s: MODEL_PRESETS[s].n_params())


def _span(sizes: list[str]) -> str:
    return f"{sizes[0]}–{sizes[-1]}"


def _gap_above_zero(gaps: pd.DataFrame, size: str) -> bool:
    """The rung's paired gap (unclipped - clipped) has a 95% interval above 0."""
    row = gaps[gaps["size"] == size]
    return bool(len(row)) and interval_of(row.iloc[0], "gap").lo > 0


def _collapse_above(arms: pd.DataFrame, size: str, clip: str) -> bool:
    """The rung's unclipped collapse rate exceeds the clipped one, intervals not overlapping."""
    rate = {}
    for arm in (UNCLIPPED, clip):
        row = arms[(arms["size"] == size) & (arms["clip"] == arm)]
        if not len(row):
            return False
        rate[arm] = interval_of(row.iloc[0], "collapse")
    return rate[UNCLIPPED].above(rate[clip])


def thresholds(
    table: pd.DataFrame, sizes: list[str], steps: int | None = None
) -> list[dict[str, Any]]:
    """Per (lr, precision, max_norm, clipped arm): the harm and collapse thresholds.

    ``table`` holds per-seed arm records (``sweep.csv`` rows); ``sizes`` are the ladder's rungs
    (any order). A threshold is a size, or None when no rung meets the condition."""
    order = rungs(sizes)
    arms, gaps = arm_rates(table), paired_gaps(table)
    if gaps.empty:
        return []
    steps_text = f"{steps:,}" if steps else "these"
    out = []
    for key, g in gaps.groupby([*GROUP, "clip"], sort=True):
        lr, precision, max_norm, clip = key
        at = arms[(arms[GROUP] == pd.Series(dict(zip(GROUP, key[:3], strict=True)))).all(axis=1)]
        harm = next((size for size in order if _gap_above_zero(g, size)), None)
        collapse = next((size for size in order if _collapse_above(at, size, clip)), None)
        present = [s for s in order if s in set(g["size"])]
        where = f"lr {lr:g}{'' if precision == 'fp32' else ' ' + precision}, max_norm {max_norm:g}"
        none = f"none in {_span(present or order)} at {where} and {steps_text} updates"
        out.append(
            {"lr": lr, "precision": precision, "max_norm": max_norm, "clip": clip,
             "harm": harm, "collapse": collapse,
             "harm_text": f"harm threshold ({clip}): {harm} at {where}" if harm else
             f"harm threshold ({clip}): {none}",
             "collapse_text": f"collapse threshold ({clip}): {collapse} at {where}" if collapse
             else f"collapse threshold ({clip}): {none}",
             "seeds": int(g["pairs"].min()) if len(g) else 0}
        )  # fmt: skip
    return out


def by_size(table: pd.DataFrame, sizes: list[str]) -> pd.DataFrame:
    """Per size, cell and arm: collapse and event rates (Wilson), and the paired gap and harm
    per event against ``none`` (bootstrap; on the clipped arm's rows)."""
    order = {s: i for i, s in enumerate(rungs(sizes))}
    arms, gaps = arm_rates(table), paired_gaps(table)
    if arms.empty:
        return arms
    keys = ["size", *GROUP, "clip"]
    cols = ["gap", "gap_lo", "gap_hi", "pairs", "harm_per_event", "harm_per_event_lo",
            "harm_per_event_hi", "event_pairs"]  # fmt: skip
    merged = arms.merge(gaps[[*keys, *cols]], on=keys, how="left") if len(gaps) else arms
    merged["n_params"] = merged["size"].map(lambda s: MODEL_PRESETS[s].n_params())
    merged["rung"] = merged["size"].map(order)
    return merged.sort_values([*GROUP, "rung", "clip"]).reset_index(drop=True)


def write_ladder(out: Path, table: pd.DataFrame, sizes: list[str], meta: dict[str, Any]) -> dict:
    """``ladder.json`` and ``ladder.csv`` from a sweep table (and ``ladder.html`` with plotly)."""
    result = {**meta, "rungs": rungs(sizes),
              "thresholds": thresholds(table, sizes, meta.get("steps")),
              "finished_arms": len(finished(table)), "arms_in_table": len(table)}  # fmt: skip
    rows = by_size(table, sizes)
    rows.to_csv(out / "ladder.csv", index=False)
    write_json(out / "ladder.json", result)
    return result


def run_ladder(spec: LadderSpec, console: Console | None = None) -> tuple[Path, dict[str, Any]]:
    """Run (or resume) the ladder's sweep, then write the threshold statements and the page."""
    console = console or Console(stderr=True)
    sizes = rungs(spec.sizes)
    out = spec.out or default_out("ladder", f"{sizes[0]}-{sizes[-1]}")
    # largest rung first: a run cut short by a time limit loses the cheap cells, not 120m
    sweep = SweepSpec(base=dataclasses.replace(spec.base, size=sizes[0]), sizes=sizes[::-1],
                      lrs=spec.lrs, max_norms=spec.max_norms, seeds=spec.seeds,
                      clips=spec.clips, out=out, precisions=spec.precisions,
                      plotly=spec.plotly, executor=spec.executor)  # fmt: skip
    failure: UserError | None = None
    try:
        run_sweep(sweep, console)
    except UserError as exc:
        if not (out / "sweep.csv").exists():
            raise  # nothing ran (a bad option, no data): nothing to summarise
        failure = exc  # some cells crashed: the ladder still states what the others show
    meta = json.loads((out / "sweep.json").read_text())
    table = pd.read_csv(out / "sweep.csv")
    result = write_ladder(out, table, sizes, meta)
    if report_renderer_available(console, out):
        from andrea_diag.report.ladder_page import render_ladder

        render_ladder(out, table, result)
    if failure is not None:
        raise failure
    return out, result
