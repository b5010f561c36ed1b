"""The ``andrea-diag`` command line: typer wiring only; every command calls library code.

andrea-diag cascade --size tiny            # clipped vs unclipped arms + HTML report
andrea-diag train --size 12m --clip none   # one arm
andrea-diag report runs/cascade-tiny-*/    # re-render a report
andrea-diag bench-kernels                  # clipper benchmarks (GPU, or CPU paths)
andrea-diag bench-train                    # the training engine against a plain loop
andrea-diag accum-check                    # accumulation loop vs full batch, and the mistakes
andrea-diag doctor                         # what this machine can run
andrea-diag ladder --seed 0,1,2            # where clipping becomes mandatory, 12m..120m
"""

from __future__ import annotations

from typing import Annotated

import typer

from andrea_diag import __version__
from andrea_diag.commands.accum_check import accum_check
from andrea_diag.commands.bench_kernels import bench_kernels
from andrea_diag.commands.bench_train import bench_train
from andrea_diag.commands.doctor import doctor
from andrea_diag.commands.errors import friendly_errors
from andrea_diag.commands.export import export
from andrea_diag.commands.ladder import ladder
from andrea_diag.commands.report import report
from andrea_diag.commands.run import cascade, sweep, train

app = typer.Typer(
    name="andrea-diag",
    help="Diagnose and benchmark transformer training stability: clipped vs unclipped arms "
    "under bandit phase switches, spike attribution, Adam-state pollution, lock-in, and a "
    "fused CUDA clipper.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"andrea-diag {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """andrea-diag: does this run need clipping, where do spikes come from, what does it cost."""


app.command("cascade")(friendly_errors(cascade))
app.command("train")(friendly_errors(train))
app.command("sweep")(friendly_errors(sweep))
app.command("report")(friendly_errors(report))

app.command("bench-kernels")(friendly_errors(bench_kernels))
app.command("bench-train")(friendly_errors(bench_train))
app.command("accum-check")(friendly_errors(accum_check))
app.command("doctor")(friendly_errors(doctor))
app.command("ladder")(friendly_errors(ladder))
app.command("export")(friendly_errors(export))

if __name__ == "__main__":
    app()
