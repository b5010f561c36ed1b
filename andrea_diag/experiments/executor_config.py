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
        if self.jobs < 1:
            raise UserError(f"--jobs must be at least 1, got {self.jobs}")
        if self.time_min < 1 or self.gpus < 0:
            raise UserError("--slurm-time must be at least 1 minute and --slurm-gpus 0 or more")
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
