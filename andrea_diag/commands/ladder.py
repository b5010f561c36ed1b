"""``andrea-diag ladder``: sizes x {none, global} x seeds x lrs, and where clipping becomes
mandatory (the harm and collapse thresholds with their test, n, p-value and 95% intervals, or
"insufficient seeds" below 6 pairs per rung, which is not an error: the exit status stays 0).

    andrea-diag ladder --out runs/ladder                              # 12m..120m, 8 seeds
    andrea-diag ladder --size tiny,tiny2 --seed 0,1 --steps 4         # a CPU smoke run
"""

from __future__ import annotations

from typing import Annotated

import typer

from andrea_diag.commands.executor_options import executor_options
from andrea_diag.commands.options import RunArgs, run_options
from andrea_diag.commands.pages import cell_pages, render_ladder_pages
from andrea_diag.commands.publish import PlotlyMode, plotly_mode
from andrea_diag.commands.run import _arms, grid_axes, grid_base, refuse_unused_max_norm
from andrea_diag.console_text import make_console
from andrea_diag.errors import UserError
from andrea_diag.experiments.executor import ExecutorConfig, check_mps_device
from andrea_diag.experiments.ladder import LADDER_CLIPS, LADDER_LRS, LADDER_SIZES, LADDER_STEPS
from andrea_diag.stats import MIN_PAIRS

console = make_console(stderr=True)


@run_options(one_cell=False, defaults={"steps": LADDER_STEPS})
@executor_options
def ladder(
    size: Annotated[
        str, typer.Option(help="Comma list of rungs (ordered by parameter count).")
    ] = ",".join(LADDER_SIZES),
    lr: Annotated[
        str, typer.Option(help="Comma list of peak lrs: the recipe's, then stress lrs.")
    ] = ",".join(f"{x:g}" for x in LADDER_LRS),
    max_norm: Annotated[str, typer.Option(help="Comma list of clip thresholds.")] = "1.0",
    seed: Annotated[
        str, typer.Option(help=f"Comma list of seeds ({MIN_PAIRS} or more for a threshold).")
    ] = "0,1,2,3,4,5,6,7",  # 8: the published protocol; 6 is the least a threshold needs
    clip: Annotated[str, typer.Option(help="Arms: none and the clipped ones.")] = ",".join(
        LADDER_CLIPS
    ),
    plotly: PlotlyMode = "shared",
    *,
    ex: ExecutorConfig,
    run: RunArgs,
) -> None:
    """The capacity ladder: the smallest size where clipping measurably helps (harm) and where
    unclipped runs collapse more often (collapse), each with its test, n, p-value and interval,
    or "none" with the smallest detectable gap, or "insufficient seeds" below 6 per rung.

    --steps has a longer default here (the gap between arms needs time to settle); --precision
    takes a comma list. Re-running with the same --out resumes: finished cells are kept.
    The largest rung runs first; --jobs N runs N cells at once per GPU (under CUDA MPS by
    default, --mps), as in sweep; the default, auto, sizes it for the largest rung.
    """
    from andrea_diag.experiments.ladder import LadderSpec, compares_arms, run_ladder

    arms = _arms(clip)
    if not compares_arms(arms):
        raise UserError("the ladder compares arm none with at least one clipped arm",
                        hint="e.g. --clip none,global")  # fmt: skip
    refuse_unused_max_norm(arms, run.explicit)
    check_mps_device(ex, run.config.device)
    axes = grid_axes(run, arms, size=size, lr=lr, max_norm=max_norm, seed=seed)
    spec = LadderSpec(
        base=grid_base(run.config, axes), sizes=axes["size"], lrs=axes["lr"],
        seeds=axes["seed"], precisions=axes["precision"], max_norms=axes["max_norm"],
        clips=arms, out=run.out, plotly=plotly_mode(plotly), executor=ex,
    )  # fmt: skip
    done = run_ladder(spec, console, cell_pages())
    page = render_ladder_pages(done, console)
    for t in done.result["thresholds"]:
        for key in ("harm_text", "collapse_text", "claim_text"):
            console.print(t[key], highlight=False, markup=False, soft_wrap=True)  # one line each
    console.print(f"[bold green]ladder:[/] {page or done.out / 'ladder.json'}")
    if done.failure is not None:
        raise done.failure  # crashed cells: after the pages, which show them
