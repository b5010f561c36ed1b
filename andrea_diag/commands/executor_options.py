"""The options of commands that run many cells (``sweep``, ``ladder``): how and where cells run.

    andrea-diag sweep --size 12m --seed 0,1,2,3 --jobs 8          # 8 cells per GPU, under MPS
    andrea-diag ladder --seed 0,1,2,3,4,5 --jobs 4 --mps off      # time-sliced instead

Declared once here so that ``sweep`` and ``ladder`` take the same flags with the same defaults
and help (andrea_diag/experiments/executor.py and mps.py say what each does).
"""

from __future__ import annotations

from typing import Annotated

import typer

from andrea_diag.experiments.executor import ExecutorConfig

MAX_JOBS = 256  # cells in flight: past any GPU's or scheduler's sensible concurrency

Jobs = Annotated[
    int,
    typer.Option(
        min=1,
        max=MAX_JOBS,
        help="Cells at once per visible GPU (or on the CPU); slurm: jobs in flight.",
        rich_help_panel="Cells",
    ),
]
Executor = Annotated[
    str,
    typer.Option(
        help="local (processes here), slurm or submitit-local (via submitit).",
        rich_help_panel="Cells",
    ),
]
Mps = Annotated[
    str,
    typer.Option(
        help="CUDA MPS for local cells on a GPU: auto (start a daemon for this run when "
        "--jobs > 1 and none is running; without it if it cannot start), on (fail if it "
        "cannot start) or off.",
        rich_help_panel="Cells",
    ),
]
MergeOnly = Annotated[
    bool,
    typer.Option(
        "--merge-only",
        help="Train nothing: tabulate and render the cells already finished under --out "
        "(copied there from other machines); every other cell is listed as not run.",
        rich_help_panel="Cells",
    ),
]
SlurmPartition = Annotated[
    str | None, typer.Option(help="Slurm partition.", rich_help_panel="Cells")
]
SlurmGpus = Annotated[
    int, typer.Option(min=0, max=64, help="GPUs per Slurm job (one cell).", rich_help_panel="Cells")
]
SlurmTime = Annotated[
    int,
    typer.Option(
        min=1, max=60 * 24 * 30, help="Minutes per cell job (submitit).", rich_help_panel="Cells"
    ),
]


def executor_config(
    jobs: int, executor: str, mps: str, partition: str | None, gpus: int, time_min: int,
    merge_only: bool = False,
) -> ExecutorConfig:  # fmt: skip
    """The checked :class:`ExecutorConfig` of these options (one line for a bad value)."""
    ex = ExecutorConfig(kind=executor, jobs=jobs, partition=partition, gpus=gpus,
                        time_min=time_min, mps=mps, merge_only=merge_only)  # fmt: skip
    ex.check()
    return ex
