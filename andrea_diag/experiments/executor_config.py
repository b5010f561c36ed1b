"""How a sweep's cells are run (``ExecutorConfig``), apart from the running itself
(executor.py): the specs' checks (spec_checks.py) read it without importing the executor,
which imports the cascade a cell runs, which imports those checks.

    cfg = ExecutorConfig(jobs=4, mps="auto")
    cfg.check()   # one line for a bad setting, before the sweep's folder exists
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from andrea_diag.errors import UserError
from andrea_diag.experiments.mps import check_mode
from andrea_diag.train.distributed import check_one_process

EXECUTORS = ("local", "slurm", "submitit-local")
MAX_JOBS = 256  # cells in flight: past any GPU's or scheduler's sensible concurrency
# each number's bounds: ExecutorConfig.check, the specs' checks and the options' min/max
EXECUTOR_BOUNDS = {"gpus": (0, 64), "time_min": (1, 60 * 24 * 30), "jobs": (1, MAX_JOBS)}
FLAGS = {"gpus": "--slurm-gpus", "time_min": "--slurm-time", "jobs": "--jobs"}


@dataclass
class ExecutorConfig:
    """How cells are run: ``local`` processes, or submitit (``slurm``, ``submitit-local``)."""

    kind: str = "local"
    jobs: int = 1  # local: cells at once per GPU (or on the CPU); submitit: jobs in flight
    auto_jobs: bool = False  # --jobs auto: ``jobs`` is set from the cells (auto_jobs.py)
    partition: str | None = None  # slurm partition
    gpus: int = 1  # GPUs per Slurm job (one cell)
    time_min: int = 240  # wall-clock limit per cell job, minutes
    mps: str = "auto"  # CUDA MPS for local cells on a GPU: auto, on or off (mps.py)
    # train nothing: tabulate the cells already finished under --out (brought back from other
    # machines, e.g. one device call per rung); every other cell is listed as "not run"
    merge_only: bool = False

    def check(self) -> None:
        if self.kind not in EXECUTORS:
            raise UserError(
                f"unknown --executor {self.kind!r}", hint=f"choose {', '.join(EXECUTORS)}"
            )
        for name, (lo, hi) in EXECUTOR_BOUNDS.items():
            if not lo <= getattr(self, name) <= hi:
                raise UserError(f"{FLAGS[name]} must be from {lo} to {hi}, "
                                f"got {getattr(self, name)}")  # fmt: skip
        check_mode(self.mps)
        check_one_process("a sweep or ladder")
        if self.kind != "local" and not self.merge_only:  # a merge submits nothing
            check_submitit(self.kind)

    @property
    def in_process(self) -> bool:
        """One local cell at a time runs inside the sweep's own process (data prepared once);
        a merge trains nothing, so its kept cells are checked there too, whatever the executor."""
        return self.merge_only or (self.kind == "local" and self.jobs == 1)


def check_submitit(kind: str) -> None:
    """submitit installed and, for Slurm, ``sbatch`` on PATH: checked by
    :meth:`ExecutorConfig.check`, before the sweep's folder or ``sweep.json`` exists."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise UserError(
            f"--executor {kind} needs submitit, which is not installed",
            hint='pip install "andrea-diag[slurm]"',
        ) from None
    if kind == "slurm" and shutil.which("sbatch") is None:
        raise UserError(
            "--executor slurm: no sbatch on PATH", hint="run the sweep on a Slurm login node"
        )


def unused_executor_field(ex: ExecutorConfig) -> tuple[str, str, str] | None:
    """The first setting of ``ex`` other than its default that its kind never reads, as (field,
    flag, the kinds that read it), or None: the partition and GPUs go to Slurm alone, the time
    limit to submitit's jobs, MPS ``on`` to local cells. The command line's rule
    (``commands/executor_options.py``) and a Python caller's: set, it was silently dropped."""
    default = ExecutorConfig()
    unused = [
        (ex.partition is not None and ex.kind != "slurm", "partition", "--slurm-partition",
         "slurm"),
        (ex.gpus != default.gpus and ex.kind != "slurm", "gpus", "--slurm-gpus", "slurm"),
        (ex.time_min != default.time_min and ex.kind == "local", "time_min", "--slurm-time",
         "slurm or submitit-local"),
        (ex.mps == "on" and ex.kind != "local", "mps", "--mps on", "local"),
    ]  # fmt: skip
    return next(((name, flag, needs) for given, name, flag, needs in unused if given), None)
