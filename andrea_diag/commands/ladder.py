"""``andrea-diag ladder``: sizes x {none, global} x seeds x lrs, and where clipping becomes
mandatory (the harm and collapse thresholds, with 95% intervals).

    andrea-diag ladder --seed 0,1,2 --out runs/ladder                 # 12m, 30m, 60m, 120m
    andrea-diag ladder --size tiny,tiny2 --seed 0,1 --steps 4         # a CPU smoke run
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from andrea_diag.commands.options import RunArgs, run_options
from andrea_diag.commands.publish import PlotlyMode, plotly_mode
from andrea_diag.commands.run import _arms, grid_axes, grid_base
from andrea_diag.errors import UserError
from andrea_diag.experiments.ladder import LADDER_CLIPS, LADDER_LRS, LADDER_SIZES, LADDER_STEPS

console = Console(stderr=True)


@run_options(one_cell=False, defaults={"steps": LADDER_STEPS})
def ladder(
    size: Annotated[
        str, typer.Option(help="Comma list of rungs (ordered by parameter count).")
    ] = ",".join(LADDER_SIZES),
    lr: Annotated[
        str, typer.Option(help="Comma list of peak lrs: the recipe's, then stress lrs.")
    ] = ",".join(f"{x:g}" for x in LADDER_LRS),
    max_norm: Annotated[str, typer.Option(help="Comma list of clip thresholds.")] = "1.0",
    seed: Annotated[str, typer.Option(help="Comma list of seeds (3 or more).")] = "0,1,2",
    clip: Annotated[str, typer.Option(help="Arms: none and the clipped ones.")] = ",".join(
        LADDER_CLIPS
    ),
    plotly: PlotlyMode = "shared",
    *,
    run: RunArgs,
) -> None:
    """The capacity ladder: the smallest size where clipping measurably helps (harm) and where
    unclipped runs collapse more often (collapse), each with its interval, or "none".

    --steps has a longer default here (the gap between arms needs time to settle); --precision
    takes a comma list. Re-running with the same --out resumes: finished cells are kept.
    """
    from andrea_diag.experiments.ladder import LadderSpec, run_ladder

    arms = _arms(clip)
    if "none" not in arms or len(arms) < 2:
        raise UserError("the ladder compares arm none with at least one clipped arm",
                        hint="e.g. --clip none,global")  # fmt: skip
    axes = grid_axes(run, size=size, lr=lr, max_norm=max_norm, seed=seed)
    spec = LadderSpec(
        base=grid_base(run.config, axes), sizes=axes["size"], lrs=axes["lr"],
        seeds=axes["seed"], precisions=axes["precision"], max_norms=axes["max_norm"],
        clips=arms, out=run.out, plotly=plotly_mode(plotly),
    )  # fmt: skip
    out, result = run_ladder(spec, console)
    for t in result["thresholds"]:
        console.print(t["harm_text"], highlight=False)
        console.print(t["collapse_text"], highlight=False)
    page = out / "ladder.html"
    console.print(f"[bold green]ladder:[/] {page if page.exists() else out / 'ladder.json'}")
