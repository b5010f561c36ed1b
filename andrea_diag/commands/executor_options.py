"""The options of commands that run many cells (``sweep``, ``ladder``): how and where cells run.

    andrea-diag sweep --size 12m --seed 0,1,2,3                   # --jobs auto: 8 per GPU, MPS
    andrea-diag ladder --seed 0,1,2,3,4,5 --jobs 4 --mps off      # time-sliced instead

Declared once here so that ``sweep`` and ``ladder`` take the same flags with the same defaults
and help (andrea_diag/experiments/executor.py and mps.py say what each does):
``@executor_options`` appends them to a command, which receives them as ``ex: ExecutorConfig``.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Annotated, Any

import typer

from andrea_diag.errors import UserError
from andrea_diag.experiments.executor import ExecutorConfig
from andrea_diag.experiments.executor_config import EXECUTOR_BOUNDS, check_settings

# ExecutorConfig's defaults: a value other than these was typed
SLURM_GPUS, SLURM_TIME = ExecutorConfig().gpus, ExecutorConfig().time_min

Jobs = Annotated[
    str,
    typer.Option(
        help="Cells at once per visible GPU (or on the CPU), or auto: on a GPU, 8 cells per GPU "
        "for models up to 40M parameters and 4 above (the measured plateaus on an H200), fewer "
        "where GPU memory is short; 1 on the CPU. slurm/submitit: jobs in flight (auto: 1).",
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
    int,
    typer.Option(
        min=EXECUTOR_BOUNDS["gpus"][0],
        max=EXECUTOR_BOUNDS["gpus"][1],
        help="GPUs per Slurm job (one cell).",
        rich_help_panel="Cells",
    ),
]
SlurmTime = Annotated[
    int,
    typer.Option(
        min=EXECUTOR_BOUNDS["time_min"][0],
        max=EXECUTOR_BOUNDS["time_min"][1],
        help="Minutes per cell job (submitit).",
        rich_help_panel="Cells",
    ),
]


def parse_jobs(text: str) -> int | None:
    """``--jobs``: a count in the digits 0-9, or None for ``auto`` (one line else). Its bounds
    (1 to :data:`MAX_JOBS`) are :func:`check_settings`', which :func:`executor_config` runs."""
    if text.strip().lower() == "auto":
        return None
    if not re.fullmatch(r"\s*[0-9]+\s*", text):  # int() also takes "1_0" and "٤"
        raise UserError(f"--jobs takes a number or auto, got {text!r}",
                        hint="a count in the digits 0-9, e.g. --jobs 4")  # fmt: skip
    digits = text.strip().lstrip("0") or "0"
    if len(digits) > 4000:  # int() stops at 4300 digits; past that no count is meant
        raise UserError(f"--jobs takes a number or auto, got {len(digits):,} digits")
    return int(digits)  # its bounds are check_settings' (by flag), with the other settings


def executor_config(
    jobs: str, executor: str, mps: str, partition: str | None, gpus: int, time_min: int,
    merge_only: bool = False,
) -> ExecutorConfig:  # fmt: skip
    """The checked :class:`ExecutorConfig` of these options (one line for a bad value);
    ``--jobs auto`` is resolved when the cells are known (``sweep.run_sweep``)."""
    n = parse_jobs(jobs)
    values = {"kind": executor, "jobs": 1 if n is None else n, "auto_jobs": n is None,
              "partition": partition, "gpus": gpus, "time_min": time_min, "mps": mps,
              "merge_only": merge_only}  # fmt: skip
    # (jobs: --jobs 0 is refused by check_settings, not read as auto's 1)
    # the config's own rules, named by the flags: before it is made, which names its fields
    # (an option given that this executor never reads is one line, not silently dropped)
    check_settings(values)
    ex = ExecutorConfig(**values)
    ex.check_host()  # the settings were checked above, by flag
    return ex


# (parameter, annotation, default) in executor_config's order: the options a command gets
EXECUTOR_OPTIONS: list[tuple[str, Any, Any]] = [
    ("jobs", Jobs, "auto"),
    ("executor", Executor, "local"),
    ("mps", Mps, "auto"),
    ("slurm_partition", SlurmPartition, None),
    ("slurm_gpus", SlurmGpus, SLURM_GPUS),
    ("slurm_time", SlurmTime, SLURM_TIME),
    ("merge_only", MergeOnly, False),
]


def executor_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Append the options above to a command (keyword-only, before its own keyword-only ones);
    it receives them as ``ex``, checked by :func:`executor_config` before its body runs."""
    sig = inspect.signature(fn, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != "ex"]
    at = next((i for i, p in enumerate(own) if p.kind is p.KEYWORD_ONLY), len(own))
    added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a)
             for n, a, d in EXECUTOR_OPTIONS]  # fmt: skip

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        ex = executor_config(*(kwargs.pop(n) for n, _, _ in EXECUTOR_OPTIONS))
        return fn(**kwargs, ex=ex)

    params = [*own[:at], *added, *own[at:]]
    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper
