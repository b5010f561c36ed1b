"""How a sweep's cells are run (``ExecutorConfig``), apart from the running itself
(executor.py): the specs' checks (spec_checks.py) read it without importing the executor,
which imports the cascade a cell runs, which imports those checks.

    cfg = ExecutorConfig(jobs=4, mps="auto")   # a bad setting: one line, here
    cfg.check()   # and what needs this host (submitit, a launcher), before the sweep's folder

Every rule on the settings' values has one owner, :func:`check_settings`: an ``ExecutorConfig``
runs it when made (its fields named as Python names them, ``ExecutorConfig: jobs``), ``check``
and the command line (``commands/executor_options.py``) with the flags (``--jobs``), and a
spec (``spec_checks.checked_executor``) again at run time, for a field set after it was made.
Before, ``ExecutorConfig(jobs=0)`` or ``kind="slurmm"`` was taken and refused only by a spec
or by ``check``, at run time.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from andrea_diag.errors import BadArgument, UserError, unsafe
from andrea_diag.experiments.mps import MPS_MODES
from andrea_diag.field_types import plain_fields
from andrea_diag.fields import shown_number
from andrea_diag.optional_deps import optional_module
from andrea_diag.train.distributed import check_one_process

EXECUTORS = ("local", "slurm", "submitit-local")
MAX_JOBS = 256  # cells in flight: past any GPU's or scheduler's sensible concurrency
# each number's bounds: check_settings (the object's, the specs' and the CLI's) and the options'
# min/max
EXECUTOR_BOUNDS = {"gpus": (0, 64), "time_min": (1, 60 * 24 * 30), "jobs": (1, MAX_JOBS)}
# each setting's command-line flag: the name check_settings gives it for the CLI and check()
FLAGS = {"kind": "--executor", "jobs": "--jobs", "gpus": "--slurm-gpus",
         "time_min": "--slurm-time", "mps": "--mps", "partition": "--slurm-partition"}  # fmt: skip


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

    def __post_init__(self) -> None:  # a wrong type or value refused where it is given
        vars(self).update(plain_fields(self, "ExecutorConfig"))  # numpy's jobs as an int
        check_settings(vars(self), owner="ExecutorConfig")

    def check(self) -> None:
        """The settings again, named by their flags (a field may have been set since), then
        what depends on this host: one process (not under a launcher), submitit installed."""
        check_settings(vars(self))
        self.check_host()

    def check_host(self) -> None:
        """What depends on this host alone: one process (not under a launcher), submitit
        installed. The command line calls it on its own: it checked the settings by flag."""
        check_one_process("a sweep or ladder")
        if self.kind != "local" and not self.merge_only:  # a merge submits nothing
            check_submitit(self.kind)

    @property
    def in_process(self) -> bool:
        """One local cell at a time runs inside the sweep's own process (data prepared once);
        a merge trains nothing, so its kept cells are checked there too, whatever the executor."""
        return self.merge_only or (self.kind == "local" and self.jobs == 1)


def check_settings(values: Mapping[str, Any], owner: str | None = None) -> None:
    """Refuse ``values`` (an ``ExecutorConfig``'s fields by name, or the options that make
    one) in one :class:`BadArgument` line: an unknown kind or MPS mode, a number outside
    :data:`EXECUTOR_BOUNDS`, a blank partition, a setting the kind never reads
    (:func:`unused_executor_field`). ``owner`` (``"ExecutorConfig"``, ``"SweepSpec:
    executor"``): a Python caller's, each field named as Python names it; None: the command
    line's, each named by its flag. The one owner of these rules (module docstring)."""
    name = (lambda f: f) if owner else FLAGS.__getitem__
    head = f"{owner}: " if owner else ""
    kind = values["kind"]
    if kind not in EXECUTORS:
        raise BadArgument(f"{head}unknown {name('kind')} {kind!r}"[:300],
                          hint=f"choose from {', '.join(EXECUTORS)}")  # fmt: skip
    if values["mps"] not in MPS_MODES:
        raise BadArgument(f"{head}unknown {name('mps')} {values['mps']!r}"[:300],
                          hint=f"choose from {', '.join(MPS_MODES)}")  # fmt: skip
    for field, (lo, hi) in EXECUTOR_BOUNDS.items():
        if not lo <= (n := values[field]) <= hi:
            auto = " (or auto)" if field == "jobs" and not owner else ""  # the flag's own word
            raise BadArgument(
                f"{head}{name(field)} must be from {lo} to {hi}{auto}, got {shown_number(n)}"
            )
    partition = values["partition"]
    if partition is not None and (not partition.strip() or unsafe(partition)):
        raise BadArgument(f"{head}{name('partition')} {partition!r} is blank or holds a "
                          "control character"[:300],
                          hint="give a Slurm partition's name")  # fmt: skip
    if (unused := unused_executor_field(values)) is not None:
        field, flag, needs = unused
        if owner:
            raise BadArgument(f"{head}{field} has no effect with kind {kind!r}",
                              hint=f"it applies to kind {needs}; leave it unset")  # fmt: skip
        raise BadArgument(f"{flag} has no effect with --executor {kind}",
                          hint=f"it applies to --executor {needs}; drop it")  # fmt: skip


def check_submitit(kind: str) -> None:
    """submitit installed and, for Slurm, ``sbatch`` on PATH: checked by
    :meth:`ExecutorConfig.check`, before the sweep's folder or ``sweep.json`` exists."""
    optional_module("submitit", missing=f"--executor {kind} needs submitit, which is not "
                    "installed", hint='pip install "andrea-diag[slurm]"')  # fmt: skip
    if kind == "slurm" and shutil.which("sbatch") is None:
        raise UserError(
            "--executor slurm: no sbatch on PATH", hint="run the sweep on a Slurm login node"
        )


# the fields' defaults, read from the class (an ExecutorConfig() would check itself: a loop)
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ExecutorConfig)}


def unused_executor_field(ex: ExecutorConfig | Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The first setting of ``ex`` (or of its fields by name) other than its default that its
    kind never reads, as (field, flag, the kinds that read it), or None: the partition and
    GPUs go to Slurm alone, the time limit to submitit's jobs, MPS ``on`` to local cells. Set,
    it was silently dropped."""
    v = vars(ex) if isinstance(ex, ExecutorConfig) else ex
    kind = v["kind"]
    unused = [
        (v["partition"] is not None and kind != "slurm", "partition", "--slurm-partition",
         "slurm"),
        (v["gpus"] != _DEFAULTS["gpus"] and kind != "slurm", "gpus", "--slurm-gpus", "slurm"),
        (v["time_min"] != _DEFAULTS["time_min"] and kind == "local", "time_min", "--slurm-time",
         "slurm or submitit-local"),
        (v["mps"] == "on" and kind != "local", "mps", "--mps on", "local"),
    ]  # fmt: skip
    return next(((name, flag, needs) for given, name, flag, needs in unused if given), None)
