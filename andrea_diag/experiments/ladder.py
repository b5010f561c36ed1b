"""The capacity ladder: at which model size does clipping become mandatory, and how surely?

    andrea-diag ladder --seed 0,1,2 --lr 3e-4,1e-2 --out runs/ladder

A ladder is a sweep over sizes (ordered by parameter count) x lrs x precisions x seeds, arms
``none`` and ``global``, followed by two threshold statements per (lr, precision, max_norm):

- *harm*: the smallest size from which the paired held-out gap (unclipped minus clipped) is
  above 0, by a fixed-sequence test from the largest rung (exact sign-flip test per rung);
- *collapse*: the same for the unclipped collapse rate against the clipped one (Fisher's exact
  test per rung);

each a size with its procedure, n, p-value and intervals, or "none in <smallest>–<largest> at
these settings, with the smallest detectable gap X", or "insufficient seeds" below
``MIN_PAIRS`` pairs at a rung (``thresholds.py`` says why this procedure). A third sentence
compares the result with the seeds' claim. Beside them, per size and arm: the pollution-event
rate, and the harm per event (the paired gap over the seeds whose unclipped arm had an event),
each with its interval. Output: the sweep's own files, plus ``ladder.json`` (thresholds) and
``ladder.csv`` (per size and arm); ``commands/ladder.py`` renders the pages from them.

The default ladder is the seeds' recipe (v1, lr 3e-4) on the toolkit's real-text sources,
``LADDER_STEPS`` updates per arm, so the gap has time to settle; a higher lr is the stress axis.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console

from andrea_diag.config import MODEL_PRESETS, RunConfig
from andrea_diag.console_text import as_typed
from andrea_diag.errors import BadArgument, CellsCrashed, UserError
from andrea_diag.experiments.aggregate import arm_rates, finished, paired_gaps
from andrea_diag.experiments.cascade import default_out
from andrea_diag.experiments.executor import AfterCell, ExecutorConfig
from andrea_diag.experiments.spec_checks import checked_spec
from andrea_diag.experiments.sweep import SweepSpec, run_sweep
from andrea_diag.experiments.thresholds import (
    claim_statement,
    collapse_statement,
    harm_statement,
    rung_tests,
)
from andrea_diag.out_place import refuse_unreplaceable
from andrea_diag.record import write_json
from andrea_diag.rundir import (
    atomic_write_text,
    read_json,
)
from andrea_diag.runread import SWEEP, clean
from andrea_diag.stats import holm
from andrea_diag.sweep_table import read_sweep_table
from andrea_diag.tables import GROUP, csv_text

LADDER_SIZES = ["12m", "30m", "60m", "120m"]
LADDER_LRS = [3e-4]  # the seeds' recipe; add a stress lr with --lr
LADDER_STEPS = 1500  # pilot 4: the gap between arms settles only after ~1,000 updates
LADDER_CLIPS = ["none", "global"]


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

    def __post_init__(self) -> None:
        check_ladder_spec(self)


def compares_arms(clips: list[str]) -> bool:
    """Whether ``clips`` gives the ladder something to state: arm none and one more (its
    statements are each clipped arm's gap to none). The CLI's rule and the spec's."""
    return "none" in clips and len(clips) >= 2


def check_ladder_spec(spec: LadderSpec) -> None:
    """Each field of the type it declares (a str for a list or for ``out``, numpy numbers:
    ``spec_checks.py``), and arms to compare: the statements are each clipped arm's gap to
    ``none``, so without ``none`` and one more the ladder trained every cell to state nothing."""
    checked_spec(spec, "LadderSpec")
    rungs(spec.sizes)  # known sizes, two or more: refused when made, not at run_ladder
    if not compares_arms(spec.clips):
        raise BadArgument(f"LadderSpec: clips {spec.clips}: the ladder compares arm none with "
                          "at least one clipped arm", hint="e.g. clips=['none', 'global']")  # fmt: skip


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


def _statements(key: tuple, g: pd.DataFrame, at: pd.DataFrame, order: list[str],
                steps_text: str) -> dict[str, Any]:  # fmt: skip
    """One group's (lr, precision, max_norm, clipped arm) three sentences and numbers."""
    lr, precision, max_norm, clip = key
    rungs = rung_tests(g, at, order, clip)
    where = f"lr {lr:g}{'' if precision == 'fp32' else ' ' + precision}, max_norm {max_norm:g}"
    present = [s for s in order if s in set(g["size"])]
    none = f"none in {_span(present or order)} at {where} and {steps_text} updates"
    harm, harm_text = harm_statement(rungs, order, clip, where, none)
    collapse, collapse_text = collapse_statement(rungs, order, clip, where, none)
    harm_word = harm or ("insufficient seeds" if "insufficient seeds" in harm_text else "none")
    return {"lr": lr, "precision": precision, "max_norm": max_norm, "clip": clip,
            "harm": harm, "collapse": collapse, "harm_text": harm_text,
            "collapse_text": collapse_text,
            "claim_text": claim_statement(rungs, order, clip, collapse, harm_word),
            "insufficient": "insufficient seeds" in harm_text + collapse_text,
            "seeds": int(min(r["pairs"] for r in rungs.values())),
            "rungs": {s: {k: rungs[s].get(k) for k in RUNG_KEYS} for s in order}}  # fmt: skip


# what ladder.json keeps of each rung's test (ladder.csv has every column). ``p_holm_helps`` is
# Holm across rungs of the p on the claimed side (1 where the gap is <= 0), which is what the
# statements use; ladder.csv's ``p_holm`` adjusts the two-sided p, for reading a rung alone.
RUNG_KEYS = ["pairs", "gap", "sd", "p_value", "p_holm_helps", "gap_t_lo", "gap_t_hi", "gap_lo",
             "gap_hi", "detectable_gap", "seeds_for_target", "k_u", "n_u", "k_c", "n_c",
             "collapse_p", "event_p"]  # fmt: skip


def thresholds(
    table: pd.DataFrame, sizes: list[str], steps: int | None = None
) -> list[dict[str, Any]]:
    """Per (lr, precision, max_norm, clipped arm): the harm and collapse thresholds and the
    comparison with the seeds' claim (``thresholds.py``: the procedure and its tests).

    ``table`` holds per-seed arm records (``sweep.csv`` rows); ``sizes`` are the ladder's rungs
    (any order). A threshold is a size, or None when no rung meets the condition."""
    order = rungs(sizes)
    arms, gaps = arm_rates(table), paired_gaps(table)
    if gaps.empty:
        return []
    steps_text = f"{steps:,}" if steps else "these"
    out = []
    for key, g in gaps.groupby([*GROUP, "clip"], sort=True):
        at = arms[(arms[GROUP] == pd.Series(dict(zip(GROUP, key[:3], strict=True)))).all(axis=1)]
        out.append(_statements(key, g, at, order, steps_text))
    return out


def by_size(table: pd.DataFrame, sizes: list[str]) -> pd.DataFrame:
    """Per size, cell and arm: collapse and event rates (Wilson), and against ``none`` (on the
    clipped arm's rows) the paired gap's test, intervals and power, its Holm-adjusted p across
    rungs, the collapse rates' Fisher p, and the harm per event."""
    order = {s: i for i, s in enumerate(rungs(sizes))}
    arms, gaps = arm_rates(table), paired_gaps(table)
    if arms.empty:
        return arms
    keys = ["size", *GROUP, "clip"]
    if len(gaps):
        gaps = gaps.copy()
        gaps["p_holm"] = math.nan
        for _, idx in gaps.groupby([*GROUP, "clip"]).groups.items():
            gaps.loc[idx, "p_holm"] = holm(gaps.loc[idx, "p_value"].tolist())
        merged = arms.merge(gaps.drop(columns=["gaps"]), on=keys, how="left")
    else:
        merged = arms
    merged["n_params"] = merged["size"].map(lambda s: MODEL_PRESETS[s].n_params())
    merged["rung"] = merged["size"].map(order)
    return merged.sort_values([*GROUP, "rung", "clip"]).reset_index(drop=True)


def write_ladder(
    out: Path, table: pd.DataFrame, sizes: list[str], meta: dict[str, Any]
) -> tuple[dict[str, Any], pd.DataFrame]:
    """``ladder.json`` and ``ladder.csv`` from a sweep table; returns their content."""
    result = {**meta, "rungs": rungs(sizes),
              "thresholds": thresholds(table, sizes, meta.get("steps")),
              "finished_arms": len(finished(table)), "arms_in_table": len(table)}  # fmt: skip
    rows = by_size(table, sizes)
    atomic_write_text(out / "ladder.csv", csv_text(rows))  # replaces a planted link
    write_json(out / "ladder.json", result)
    return result, rows


@dataclass
class LadderRun:
    """What a ladder returns for the commands to print and render."""

    out: Path
    result: dict[str, Any]  # ladder.json
    rows: pd.DataFrame  # ladder.csv
    failure: UserError | None = None  # some cells crashed: raise it after rendering


def run_ladder(
    spec: LadderSpec, console: Console | None = None, after_cell: AfterCell | None = None
) -> LadderRun:
    """Run (or resume) the ladder's sweep, then write the threshold statements (no pages;
    ``after_cell`` as in :func:`~andrea_diag.experiments.sweep.run_sweep`)."""
    check_ladder_spec(spec)  # again: a field set after it was made
    console = as_typed(console, stderr=True)  # a caller's own: codes as typed
    sizes = rungs(spec.sizes)
    out = spec.out or default_out("ladder", f"{sizes[0]}-{sizes[-1]}")
    # its own files beside the sweep's (run_sweep checks those): refused before any cell trains
    refuse_unreplaceable(out, ("ladder.json", "ladder.csv", "ladder.html"))
    # largest rung first: a run cut short by a time limit loses the cheap cells, not 120m
    sweep = SweepSpec(base=dataclasses.replace(spec.base, size=sizes[0]), sizes=sizes[::-1],
                      lrs=spec.lrs, max_norms=spec.max_norms, seeds=spec.seeds,
                      clips=spec.clips, out=out, precisions=spec.precisions,
                      plotly=spec.plotly, executor=spec.executor)  # fmt: skip
    failure: UserError | None = None
    try:
        run_sweep(sweep, console, after_cell)
    except CellsCrashed as exc:  # the others finished: the ladder states what they show
        failure = exc
    # any other refusal (a bad option, a re-run that differs, a damaged file) propagates: the
    # ladder's files stay as the last run left them, with no rung that never ran
    meta, table = read_sweep_outputs(out)
    result, rows = write_ladder(out, table, sizes, meta)
    return LadderRun(out, result, rows, failure)


def read_sweep_outputs(out: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """The sweep's ``sweep.json`` and ``sweep.csv`` under ``out``, read as untrusted input: a
    link, FIFO or damaged file is one :class:`UserError` line, never a hang or a traceback; a
    field or cell of the wrong type is dropped with a warning, as the sweep page drops it, so
    the ladder's statements are stated from what is left (``report`` on someone's ladder)."""
    path = out / "sweep.json"
    meta = clean(read_json(path, "the sweep's sweep.json", kind=dict), SWEEP, str(path))
    sizes = meta.get("sizes")
    if not isinstance(sizes, list) or not all(isinstance(x, str) for x in sizes):
        raise UserError(f"{path} has no list of sizes", hint="the file is damaged")
    # the sweep page's reader: a link, FIFO or sparse 40 GB file refused unread, the same types
    table = read_sweep_table(out, also=["status"])
    unknown = [s for s in sizes if s not in MODEL_PRESETS]
    if unknown:
        raise UserError(f"{path} lists size {unknown[0]!r}, which is no model size here",
                        hint=f"the file is damaged; sizes: {', '.join(MODEL_PRESETS)}")  # fmt: skip
    for key in ("lrs", "max_norms", "seeds"):  # the page formats each as a number
        meta[key] = [v for v in meta.get(key) or [] if isinstance(v, (int, float))
                     and not isinstance(v, bool) and math.isfinite(v)]  # fmt: skip
    return meta, _ladder_rows(out / "sweep.csv", table, sizes)


def _ladder_rows(path: Path, table: pd.DataFrame, sizes: list[str]) -> pd.DataFrame:
    """The sweep's table, refused when a row's size is no rung of this ladder: the statements
    would mix cells of another sweep into its rates."""
    other = sorted(set(table["size"]) - set(sizes))
    if other:
        raise UserError(f"sweep.csv {path} holds a row of size {other[0]!r}, not one of the "
                        f"ladder's sizes in sweep.json ({', '.join(sizes)})",
                        hint="the file is damaged, or mixes cells of another sweep")  # fmt: skip
    return table
