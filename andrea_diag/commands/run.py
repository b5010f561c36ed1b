"""``andrea-diag cascade`` (paired arms + report), ``train`` (one arm) and ``sweep`` (a grid).

Their shared options are declared once, in ``options.py``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from andrea_diag.clip.modes import clip_modes
from andrea_diag.commands.executor_options import executor_options
from andrea_diag.commands.options import (
    BY_NAME,
    RunArgs,
    checked,
    plain_number,
    resumed,
    run_options,
)
from andrea_diag.commands.pages import cell_pages, render_cascade_page, sweep_page_after
from andrea_diag.commands.publish import PlotlyMode, plotly_mode
from andrea_diag.config import RunConfig
from andrea_diag.console_text import make_console, shown
from andrea_diag.errors import UserError
from andrea_diag.experiments.cascade import CascadeSpec, default_out, run_cascade
from andrea_diag.experiments.config_checks import check_clip_mode
from andrea_diag.experiments.executor import ExecutorConfig, check_mps_device
from andrea_diag.experiments.spec_checks import AXES, check_clip_settings, check_counts
from andrea_diag.fields import comma_items
from andrea_diag.train.distributed import env_rank

console = make_console(stderr=True)


CLIP_MODES = clip_modes()  # the clipper registry (clip/modes.py) is the one list of modes


def _spec(clip: str, run: RunArgs) -> CascadeSpec:
    """What to run: from the options, or with --resume from the run directory itself."""
    console.quiet = env_rank() != 0  # torchrun: one voice, rank 0's
    if run.resume is not None:
        if run.out is not None and run.out != run.resume:
            raise UserError("--out and --resume name different directories", hint="give one")
        base, arms = resumed(run, clip)
        return CascadeSpec(base=base, clips=_arms(arms), out=run.resume, resume=True)
    arms = _arms(clip)
    refuse_unused_max_norm(arms, run.explicit)
    return CascadeSpec(base=checked(run.config), clips=arms, out=run.out)


def _arms(clip: str) -> list[str]:
    arms = comma_items(clip, "--clip", UserError)
    # the API's limit and comparison (spec_checks.check_counts), named by the flag: one line,
    # before each item is looked up
    check_counts({"clips": len(arms)}, clips="--clip", grid="--clip")
    for arm in arms:
        check_clip_mode(arm)  # the registry's rule and line (config_checks), as a spec's
    twice = next((a for i, a in enumerate(arms) if a in arms[:i]), None)
    if twice:  # two arms of one name would share one folder
        raise UserError(f"--clip lists {twice} twice: {clip}", hint="give each arm once")
    return arms


def refuse_unused_max_norm(arms: list[str], typed: frozenset[str]) -> None:
    """``--max-norm`` typed for arms none of which reads it (none and the adaptive modes
    measure with their own rule), or an adaptive mode's parameter (``--zclip-z``) with no arm
    of that mode: one line, not a setting silently ignored (``spec_checks.check_clip_settings``,
    the rule a spec's base is held to, named by the flags typed)."""
    check_clip_settings(arms, set(typed), "", "--clip", lambda name: BY_NAME[name].flag)


@run_options(one_cell=True)
def cascade(
    clip: Annotated[
        str, typer.Option(help=f"Comma-separated arms, from {', '.join(CLIP_MODES)}.")
    ] = "none,global",
    *,
    run: RunArgs,
) -> None:
    """Train clipped and unclipped arms on identical batches and write an HTML report.

    Only the clip mode differs between arms: same seed, same initial weights, same bandit
    schedule and token batches (checked by per-update hashes).
    """
    res = run_cascade(_spec(clip, run), console)
    page = _page(res.out_dir)
    for arm, s in res.summaries.items():
        console.print(
            f"  {arm:<11} final loss {s.get('final_loss') or float('nan'):.3f}  "
            f"max |g| {s.get('max_grad_norm') or float('nan'):.2f}  "
            f"clipped {s.get('pct_clipped') or 0:.0f}% of updates"  # null: not measured
            + (f", skipped {s['pct_skipped']:.1f}%" if s.get("pct_skipped") else "")
        )
    console.print(f"batches identical across arms: {res.hashes_identical}")
    console.print(f"run directory: {shown(str(res.out_dir))}")
    if page:
        console.print(f"[bold green]report:[/] {shown(str(page))}")


def _page(out: Path) -> Path | None:
    """The cascade's report.html; under torchrun rank 0's alone (it alone wrote the run)."""
    return render_cascade_page(out, None, console) if env_rank() == 0 else None


@run_options(one_cell=True)
def train(
    clip: Annotated[str, typer.Option(help=f"Clip mode: {', '.join(CLIP_MODES)}.")] = "global",
    *,
    run: RunArgs,
) -> None:
    """Train one arm and write its run directory and report."""

    spec = _spec(clip, run)
    if len(spec.clips) != 1:
        raise UserError("train runs one arm", hint="use `andrea-diag cascade` for several")
    spec.out = spec.out or default_out("train", spec.base.size)
    res = run_cascade(spec, console)
    page = _page(res.out_dir)
    console.print(f"run directory: {shown(str(res.out_dir / spec.clips[0]))}")
    if page:
        console.print(f"[bold green]report:[/] {shown(str(page))}")


def _csv(value: str, cast: type, option: str) -> list:
    """Parse a comma list for ``option``; a bad or repeated item is one clear error (a repeated
    value would make two cells of one, found only after both had trained)."""
    items = comma_items(value, option, UserError)
    values = [plain_number(v, cast, option) if cast in (int, float) else cast(v) for v in items]
    seen: set = set()
    for item, v in zip(items, values, strict=True):
        if v in seen:
            raise UserError(f"{option} lists {item} twice: {value}", hint="give each value once")
        seen.add(v)
    return values


def grid_base(base: RunConfig, axes: dict[str, list]) -> RunConfig:
    """``base`` at the first size and precision, once every value of every axis (``size``,
    ``seed``, ...) has passed the checks a cell's config gets: a bad value fails before any
    cell trains."""
    first = dataclasses.replace(base, **{name: values[0] for name, values in axes.items()})
    for name, values in axes.items():
        for v in values:
            checked(dataclasses.replace(first, **{name: v}))
    return checked(dataclasses.replace(base, size=axes["size"][0], precision=axes["precision"][0]))


def grid_axes(run: RunArgs, arms: list[str], **lists: str) -> dict[str, list]:
    """The comma lists of a grid command by config field name (``--precision``'s value is one
    more axis), each named in errors by its field's flag; a grid of more ``arms`` in all than
    a sweep runs is one line before any value is checked (each is a config resolved)."""
    casts = {"size": str, "lr": float, "max_norm": float, "seed": int, "precision": str}
    lists = {**lists, "precision": run.config.precision}
    items = {name: comma_items(value, BY_NAME[name].flag, UserError)
             for name, value in lists.items()}  # fmt: skip
    # the API's limit and comparison (spec_checks.check_counts), the axes named by their flags
    flags = ", ".join(BY_NAME[name].flag for name, v in items.items() if len(v) > 1)
    spec_field = {config: spec for spec, config in AXES.items()}  # size -> sizes
    lengths = {spec_field[name]: len(v) for name, v in items.items()}
    check_counts({**lengths, "clips": len(arms)}, clips="--clip",
                 grid=f"the grid ({flags} x --clip)", counted="")  # fmt: skip
    return {name: _csv(value, casts[name], BY_NAME[name].flag) for name, value in lists.items()}


@run_options(one_cell=False)
@executor_options
def sweep(
    size: Annotated[str, typer.Option(help="Comma list of presets, e.g. tiny,12m.")] = "tiny",
    lr: Annotated[str, typer.Option(help="Comma list of peak lrs.")] = "3e-4,1e-3,1e-2",
    max_norm: Annotated[str, typer.Option(help="Comma list of clip thresholds.")] = "1.0",
    seed: Annotated[str, typer.Option(help="Comma list of seeds.")] = "0",
    clip: Annotated[str, typer.Option(help="Comma-separated arms per cell.")] = "none,global",
    plotly: PlotlyMode = "inline",
    *,
    ex: ExecutorConfig,
    run: RunArgs,
) -> None:
    """Find the regime: one cascade per (size, lr, max_norm, precision, seed) cell, one page.

    --precision takes a comma list here (e.g. fp32,bf16,fp16): one more axis of the grid.
    Seeds are pooled per cell into rates and paired gaps with 95% intervals (arms.csv,
    gaps.csv). Re-running with the same --out resumes: finished cells are kept and
    skipped. With --jobs N (or --executor slurm) each cell runs in its own process, on a
    GPU as clients of one CUDA MPS daemon (--mps); sweep.json reports the aggregate
    updates per second. The default, --jobs auto, is 8 or 4 cells per GPU by model size
    (fewer where GPU memory is short) and 1 on the CPU.
    """
    from andrea_diag.experiments.sweep import SweepSpec, run_sweep

    arms = _arms(clip)
    refuse_unused_max_norm(arms, run.explicit)
    check_mps_device(ex, run.config.device)
    axes = grid_axes(run, arms, size=size, lr=lr, max_norm=max_norm, seed=seed)
    spec = SweepSpec(base=grid_base(run.config, axes), sizes=axes["size"], lrs=axes["lr"],
                     max_norms=axes["max_norm"], seeds=axes["seed"], clips=arms, out=run.out,
                     executor=ex, precisions=axes["precision"],
                     plotly=plotly_mode(plotly))  # fmt: skip
    spec.out = spec.out or default_out("sweep", "-".join(axes["size"]))  # the page is rendered here
    with sweep_page_after(spec.out, console):  # also when cells crashed: the page shows them
        path, table = run_sweep(spec, console, cell_pages())
    page = path / "sweep.html"
    console.print(
        f"[bold green]sweep:[/] {shown(str(page if page.exists() else path))} ({len(table)} arms)"
    )
