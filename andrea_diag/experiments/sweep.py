"""Find the regime: a grid of cascades over size x lr x max_norm x precision x seed, one page.

    andrea-diag sweep --size tiny,12m --lr 3e-4,1e-3,1e-2 --seed 0,1 --precision fp32,bf16
    andrea-diag sweep ... --jobs 4     # 4 cells at once per visible GPU (executor.py)

The seeds' cascade is not automatic (MISSION.md, pilots 1 and 2): it showed up only under lr
stress, on the larger model. A sweep runs one paired cascade per cell (every cell's arms share
seed, data and batches) and tabulates each arm's outcome, so the regime where clipping starts
to matter is read off the data. Cells already finished are kept and skipped on a re-run
(resume after a crash); an unfinished cell continues from its arms' checkpoints.

A cell that crashes does not end the sweep: it is recorded as ``crashed`` in ``sweep.csv`` (with
the error, and whatever its arms wrote), the other cells run, and only at the end does the sweep
fail, with one line naming the crashed cells.

Seeds are pooled per (size, lr, precision, max_norm) by ``aggregate.py``: rates and paired
differences with 95% intervals, written as ``arms.csv`` and ``gaps.csv`` beside ``sweep.csv``.
``sweep.json``'s ``throughput`` gives the invocation's aggregate updates per second and, when
its cells train on this host's GPUs, how busy those were meanwhile (``gpu_busy.py``).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console

from andrea_diag.config import RunConfig
from andrea_diag.console_text import as_typed, shown
from andrea_diag.data import PreparedData
from andrea_diag.device import resolve_device
from andrea_diag.errors import BadArgument, CellsCrashed, UserError
from andrea_diag.experiments.aggregate import write_interval_tables
from andrea_diag.experiments.arm_summary import arm_row, arm_summary
from andrea_diag.experiments.auto_jobs import auto_jobs
from andrea_diag.experiments.cascade import (
    CascadeSpec,
    check_runnable,
    default_out,
    load_data,
    run_cascade,
)
from andrea_diag.experiments.executor import (
    AfterCell,
    CellJob,
    ExecutorConfig,
    cells_at_once,
    check_mps_device,
    run_cells,
    uses_cuda,
)
from andrea_diag.experiments.gpu_busy import busy_line, busy_sampler, gpu_busy
from andrea_diag.experiments.resume import check_same_run, move_aside
from andrea_diag.experiments.spec_checks import checked_spec
from andrea_diag.experiments.status import DONE, Status
from andrea_diag.experiments.sweep_cells import finished, outside, said_done
from andrea_diag.experiments.throughput import (
    earlier_throughputs,
    recorded_updates,
    throughput,
    throughputs,
)
from andrea_diag.fields import shown_number
from andrea_diag.out_place import refuse_nested, refuse_unreplaceable
from andrea_diag.record import write_json
from andrea_diag.rundir import atomic_write_text, child, make_out_dir, read_json
from andrea_diag.tables import csv_text
from andrea_diag.train.graphed import check_graphable

Kept = dict[tuple[str, str], dict[str, Any]]  # (cell, arm) -> a finished cell's arm summary
# the files a sweep writes in its folder (its command renders the page: one rule for all)
SWEEP_FILES = ("sweep.json", "sweep.csv", "arms.csv", "gaps.csv", "sweep.html")


@dataclass
class SweepSpec:
    base: RunConfig = field(default_factory=RunConfig)
    sizes: list[str] = field(default_factory=lambda: ["tiny"])
    lrs: list[float] = field(default_factory=lambda: [3e-4, 1e-3, 1e-2])
    max_norms: list[float] = field(default_factory=lambda: [1.0])
    seeds: list[int] = field(default_factory=lambda: [0])
    clips: list[str] = field(default_factory=lambda: ["none", "global"])
    out: Path | None = None
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)  # --jobs, --executor
    precisions: list[str] = field(default_factory=lambda: ["fp32"])
    # "shared": every page links one plotly.min.js in ``out`` (report/plotlyjs.py)
    plotly: str = "inline"

    def __post_init__(self) -> None:  # a str for a list or out, numpy numbers: spec_checks.py
        checked_spec(self, "SweepSpec")


def cell_name(size: str, lr: float, max_norm: float, seed: int, precision: str = "fp32") -> str:
    # fp32 cells keep the name they had before precision was an axis: old sweeps still resume
    tail = "" if precision == "fp32" else f"-{precision}"
    return f"{size}-lr{lr:g}-mn{max_norm:g}-s{seed}{tail}"


def cells(spec: SweepSpec) -> list[RunConfig]:
    """One base config per cell, each of its arms checked: a bad value fails before work."""
    # again (a field set after it was made): every arm's config, per size (check_arm_configs)
    checked_spec(spec, "SweepSpec")
    if spec.base.cuda_graph:  # before the sweep's folder: a CPU has no graphs to replay
        here = spec.executor.kind == "local" and not spec.executor.merge_only
        # cells trained elsewhere (Slurm) or not at all (--merge-only): not this host's device,
        # unless the device asked for is the CPU wherever it runs
        device = spec.base.device
        known = resolve_device(device) if here or device == "cpu" else None
        check_graphable(known, spec.base.replicas)
    out = []
    for size in spec.sizes:
        for lr in spec.lrs:
            for max_norm in spec.max_norms:
                for precision in spec.precisions:
                    for seed in spec.seeds:
                        cfg = dataclasses.replace(spec.base, size=size, lr=lr, max_norm=max_norm,
                                                  seed=seed, precision=precision)  # fmt: skip
                        out.append(cfg)
    return out


def check_cells_runnable(spec: SweepSpec, configs: list[RunConfig]) -> None:
    """Each cell's own pre-flight (:func:`~andrea_diag.experiments.cascade.check_runnable`:
    the device, ``--clip-impl``, replicas, a ``--model``/``--hf-config`` factory) over the whole
    grid, before the sweep's folder exists: a grid that cannot run here is one line and no
    folder, not every cell crashed in it. Once per (size, precision): nothing else it reads
    differs between cells. A merge trains nothing; Slurm cells train on another host, whose
    device this one cannot judge (unless it is the CPU, which every host has)."""
    if spec.executor.merge_only:
        return
    here = spec.executor.kind != "slurm" or spec.base.device == "cpu"
    for cfg in {(c.size, c.precision): c for c in configs}.values():
        check_runnable(cfg, on_this_host=here)


def name_of(cfg: RunConfig) -> str:
    return cell_name(cfg.size, cfg.lr, cfg.max_norm, cfg.seed, cfg.precision)


def _check_same(
    cell_dir: Path, cfg: RunConfig, clips: list[str], shas: dict[str, str] | None = None
) -> None:
    """A kept cell must be the cell this sweep asks for: same arms, updates and recipe, and
    (``shas``: source -> sha256 of this sweep's text) trained on the same bytes."""
    done = read_json(cell_dir / "cascade.json", f"cell {cell_dir.name}'s cascade.json", kind=dict)
    want = {"arms": clips, "steps": cfg.steps, "recipe": cfg.recipe}
    diff = {k: (done.get(k), v) for k, v in want.items() if done.get(k) != v}
    if diff:
        what = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in diff.items())
        raise UserError(
            f"{cell_dir} was run with other settings ({what})",
            hint="resume with the original options, or give a new --out",
        )
    # every other setting too (lr, inject, batch shape, mixer, sources...): each arm's saved
    # config against the one this sweep would train, as a resume checks it
    check_same_run(
        cell_dir, clips, [dataclasses.replace(cfg, clip=c, arm=c).resolve() for c in clips]
    )
    for arm in clips if shas else ():
        _check_bytes(cell_dir, arm, shas)


def _check_bytes(cell_dir: Path, arm: str, shas: dict[str, str]) -> None:
    """Refuse a finished arm whose data.json names other source bytes than this sweep's."""
    path = cell_dir / arm / "data.json"
    try:  # the run dir's one reader (regular file, JSON of the expected shape)
        sources = read_json(path, "data.json", kind=dict)["sources"]
        theirs = {name: sources[name]["sha256"] for name in shas}
    except (UserError, KeyError, TypeError):
        raise UserError(f"cell {cell_dir.name} arm {arm}: {path} is missing or damaged",
                        hint="move the cell aside and re-run it") from None  # fmt: skip
    for name, sha in shas.items():
        if theirs[name] != sha:
            raise UserError(
                f"cell {cell_dir.name} arm {arm} was trained on other bytes of source {name} "
                f"(sha256 {str(theirs[name])[:12]}, this sweep's {sha[:12]})",
                hint="a sweep merges only cells of the same text: re-run that cell here, or "
                "give the same --source files",
            )


def _prepare_cell(cell_dir: Path, console: Console) -> bool:
    """An unfinished cell continues from its checkpoints (finished arms kept): True. One that
    never wrote its cascade.json is kept aside and started again: False."""
    resume = (cell_dir / "cascade.json").is_file()
    if resume and said_done(cell_dir):  # not _finished: an arm lost its summary.json
        console.print(f"[yellow]cell {cell_dir.name}: done, but an arm has no summary.json; "
                      "continuing that arm[/]", highlight=False, soft_wrap=True)  # fmt: skip
    if cell_dir.exists() and not resume:
        console.print(f"[yellow]cell {cell_dir.name}: unfinished, kept as {move_aside(cell_dir)}")
    return resume


def _run_out_of_process(
    spec: SweepSpec,
    dirs: list[Path],
    configs: list[RunConfig],
    out: Path,
    console: Console,
    after_cell: AfterCell | None,
) -> dict[str, str]:
    """Every unfinished cell as its own job (--jobs / --executor); returns the crashed ones."""
    jobs = []
    for cell_dir, cfg in zip(dirs, configs, strict=True):
        if not finished(cell_dir, spec.clips):  # a finished one: checked by _preflight
            resume = _prepare_cell(cell_dir, console)
            jobs.append(CellJob(cell_dir.name, cell_dir, cfg, spec.clips, resume,
                                shared_plotly(spec.plotly, out)))  # fmt: skip
    return run_cells(jobs, spec.executor, out, console, after_cell)


def run_sweep(
    spec: SweepSpec, console: Console | None = None, after_cell: AfterCell | None = None
) -> tuple[Path, pd.DataFrame]:
    """Run (or resume) every cell; write sweep.json and sweep.csv under ``out`` (the command
    renders sweep.html from them: ``commands/pages.py``). ``after_cell``: called on each cell
    this run finishes (the command renders its page), a failure there crashing the cell."""
    console = as_typed(console, stderr=True)  # a caller's own: codes as typed
    configs = cells(spec)
    if not configs:
        raise UserError("the sweep has no cells", hint="give at least one --size/--lr/--seed")
    spec.executor.check()
    check_mps_device(spec.executor, configs[0].device)  # before the folder, as the CLI says it
    out = spec.out or default_out("sweep", "-".join(spec.sizes))
    refuse_nested(out, "--out", resumes="sweep")  # in no run, cascade or other sweep
    refuse_unreplaceable(out, SWEEP_FILES + (("plotly.min.js",) if spec.plotly == "shared" else ()))
    dirs = [child(out, name_of(c), "cell") for c in configs]  # a planted link out is refused
    # before the folder: no cell would crash on them. Finished cells train nothing, so a
    # finished CUDA sweep re-run on a laptop (to redraw its pages) is not refused for the GPU
    todo = [c for c, d in zip(configs, dirs, strict=True) if not finished(d, spec.clips)]
    if os.path.lexists(out) and not out.is_dir():  # a file: said as such, not "no cell"
        raise BadArgument(f"--out {out} is a file, not a directory", hint="give another --out")
    if spec.executor.merge_only and len(todo) == len(configs):  # a page of "not run" only
        raise UserError(f"nothing to merge: {out} has no finished cell of this grid",
                        hint="copy finished cells under --out first, or give the grid they ran")  # fmt: skip
    check_cells_runnable(spec, todo)
    spec = _resolve_jobs(spec, configs, console)
    data = load_data(configs[0], console)  # every cell shares the sources: prepare them once
    shas = {name: src.sha256 for name, src in data.sources.items()}
    # every refusal before the first write: a refused re-run leaves a finished sweep as it was
    earlier, kept = _preflight(out, dirs, configs, spec.clips, shas)
    if others := outside(out, {d.name for d in dirs}):  # kept on disk, not in this table
        console.print(f"[yellow]{len(others)} cell folder(s) under --out are not in this grid "
                      f"and are left out of sweep.csv[/] ({shown(', '.join(others[:3]))}"
                      f"{', ...' if len(others) > 3 else ''})", highlight=False)  # fmt: skip
    make_out_dir(out)
    meta = {
        "sizes": spec.sizes, "lrs": spec.lrs, "max_norms": spec.max_norms, "seeds": spec.seeds,
        "clips": spec.clips, "steps": configs[0].steps, "recipe": configs[0].recipe,
        "precisions": spec.precisions, "plotly": spec.plotly,
        "command": " ".join(shlex.quote(a) for a in ["andrea-diag", *sys.argv[1:]]),
        "cells": [name_of(c) for c in configs],
    }  # fmt: skip
    write_json(out / "sweep.json", {**meta, **earlier, "status": Status.RUNNING})
    crashed: dict[str, str] = {}  # cell -> error
    # how busy the cells' GPUs were, over the span of throughput's wall time (gpu_busy.py)
    with busy_sampler(spec.executor, configs[0].device) as tel:
        t0, before = time.perf_counter(), recorded_updates(dirs, spec.clips)
        if not spec.executor.in_process:  # every unfinished cell in its own process, N at once
            crashed = _run_out_of_process(spec, dirs, configs, out, console, after_cell)
        rows = _each_cell(spec, configs, out, dirs, data, crashed, console, after_cell, kept)
        table = pd.DataFrame(rows)
        write_interval_tables(out, table)
        wall = time.perf_counter() - t0
    status = {"status": Status.CRASHED, "crashed_cells": crashed} if crashed else {"status": DONE}
    not_run = sorted({r["cell"] for r in rows if r["status"] == Status.NOT_RUN})
    if spec.executor.merge_only and not_run and not crashed:  # merged, with cells to come
        status = {"status": Status.PARTIAL, "not_run_cells": not_run}
    now = throughput(recorded_updates(dirs, spec.clips) - before, wall, spec.executor)
    # None: no GPU was read (CPU cells, Slurm, no NVML), or every cell was already done (a
    # re-run that trained nothing says nothing about how busy training keeps the GPU)
    busy = gpu_busy(tel) if now["updates"] > 0 else None
    if busy is not None:
        now["gpu_busy"] = busy
    meta.update(throughputs(now, earlier))
    write_json(out / "sweep.json", {**meta, **status})  # the command renders the page from it
    if busy is not None:  # every cell side by side already: only more cells could fill it
        every = len(todo) <= cells_at_once(spec.executor, configs[0].device)
        console.print(busy_line(busy, all_at_once=every), highlight=False)
    if crashed:
        raise CellsCrashed(
            f"{len(crashed)} of {len(configs)} sweep cells crashed: {', '.join(crashed)} "
            f"({next(iter(crashed.values()))}); every other cell finished",
            hint=f"see {out}/sweep.csv; re-run the same command to retry only the crashed cells",
        )
    return out, table


def _resolve_jobs(spec: SweepSpec, configs: list[RunConfig], console: Console) -> SweepSpec:
    """``--jobs auto`` (the CLI's default) set from the cells and the GPUs (auto_jobs.py);
    one line says what it chose. A merge trains nothing: it keeps its one process."""
    ex = spec.executor
    if not ex.auto_jobs or ex.merge_only:
        return spec
    if ex.jobs != 1:  # a count given beside auto (Python's API) would be replaced unseen
        raise BadArgument(f"SweepSpec: executor: auto_jobs=True sets jobs from the cells; "
                          f"jobs={shown_number(ex.jobs)} would be replaced",
                          hint="give jobs=N with auto_jobs=False, or leave jobs at 1")  # fmt: skip
    jobs, why = auto_jobs(ex.kind, uses_cuda(configs[0].device), configs)
    console.print(f"[dim]--jobs auto: {why}[/]", highlight=False)
    return dataclasses.replace(spec, executor=dataclasses.replace(ex, jobs=jobs))


def _preflight(
    out: Path, dirs: list[Path], configs: list[RunConfig], clips: list[str], shas: dict[str, str]
) -> tuple[dict[str, Any], Kept]:
    """Refuse a re-run that does not match its finished cells, or one whose kept summaries
    cannot be read (one line, nothing written); give the earlier invocations' throughput
    figures from ``sweep.json`` (kept, not lost) and the finished cells' arm summaries."""
    kept: Kept = {}
    for cell_dir, cfg in zip(dirs, configs, strict=True):
        if finished(cell_dir, clips):
            _check_same(cell_dir, cfg, clips, shas)
            for arm in clips:  # checked against its own table (arm_summary.py), once
                kept[cell_dir.name, arm] = arm_summary(cell_dir / arm, cell_dir.name)
    child(out, "cells", "the cells' folder")  # the executor's logs: a link out is refused
    if not os.path.lexists(out / "sweep.json"):
        return {}, kept
    meta = read_json(out / "sweep.json", "the sweep's sweep.json", kind=dict)
    return earlier_throughputs(meta), kept


def _each_cell(
    spec: SweepSpec,
    configs: list[RunConfig],
    out: Path,
    dirs: list[Path],
    data: PreparedData,
    crashed: dict[str, str],
    console: Console,
    after_cell: AfterCell | None,
    kept: Kept,
) -> list[dict[str, Any]]:
    """Train each unfinished cell here when the sweep runs them in its own process, and give
    every cell's arm rows (``sweep.csv`` written as they grow); ``crashed`` (cell -> error)
    gains the cells that crash here. ``data``: the sources every cell shares; ``dirs``: the
    cells' folders (finished ones were checked against ``configs`` by :func:`_preflight`,
    which read their summaries: ``kept``)."""
    rows: list[dict[str, Any]] = []
    for i, (cfg, cell_dir) in enumerate(zip(configs, dirs, strict=True), 1):
        name = name_of(cfg)
        unmerged = spec.executor.merge_only and not finished(cell_dir, spec.clips)
        if unmerged:  # a cell is the unit: a half-finished one is not half merged
            console.print(f"[yellow]cell {i}/{len(configs)} {name}: not finished, not run[/]")
        elif finished(cell_dir, spec.clips) or name in crashed:
            if spec.executor.in_process:
                console.print(f"[dim]cell {i}/{len(configs)} {name}: already done, kept[/]")
        else:
            resume = _prepare_cell(cell_dir, console)
            word = "continuing" if resume else ""
            console.print(f"[bold]cell {i}/{len(configs)}[/] {name} {word}")
            try:
                cell = CascadeSpec(base=cfg, clips=spec.clips, out=cell_dir, resume=resume)
                run_cascade(cell, console, data=data)
                if after_cell is not None:
                    after_cell(cell_dir, shared_plotly(spec.plotly, out))
            except UserError:
                raise  # the same for every cell: stop now
            except Exception as exc:  # one cell's crash must not cost the others their run
                error = f"{type(exc).__name__}: {exc}"
                crashed[name] = error
                console.print(f"[red]cell {name} crashed[/] ({error}); continuing", highlight=False)
        for arm in spec.clips:
            if unmerged:
                summary: dict[str, Any] = {"status": Status.NOT_RUN}
            elif (name, arm) in kept:
                summary = kept[name, arm]
            else:
                summary = arm_summary(cell_dir / arm, name)
            # an arm that finished before another arm of its cell crashed keeps its summary
            if name in crashed and summary.get("status", Status.DONE) != Status.DONE:
                summary = {**summary, "status": Status.CRASHED, "error": crashed[name]}
            rows.append(arm_row(cfg, arm, summary, name))
        # the table grows cell by cell: a crash keeps every finished cell's rows
        atomic_write_text(out / "sweep.csv", csv_text(pd.DataFrame(rows)))
    return rows


def shared_plotly(mode: str, out: Path) -> Path | None:
    """The folder holding the pages' one plotly.js copy, or None to inline it in each page."""
    return out if mode == "shared" else None
