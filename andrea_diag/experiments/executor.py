"""Running sweep cells side by side: one cell is one process, the run directory its only answer.

    andrea-diag sweep --lr 1e-3,3e-3,1e-2 --jobs 4                     # 4 cells per visible GPU
    andrea-diag sweep ... --executor slurm --slurm-partition gpu --jobs 16   # 16 jobs in flight

``--jobs N`` runs N cells at once on each visible GPU (``CUDA_VISIBLE_DEVICES`` respected; each
cell's process sees only its own GPU), or N at once on the CPU. Each cell is
``python -m andrea_diag.experiments.executor CELL.json``: it runs the cell's cascade into its
directory and exits; the sweep reads the results back from that directory, as it does for a
cell it ran itself, and hands each finished cell to the caller's ``after_cell`` (the command
renders its page there: a cell's process imports no report). A cell whose process fails is
marked crashed (its ``error.json``, written by the child, says why) and the other cells go on.

Past one machine the cells go to Slurm through ``submitit`` (the optional extra ``slurm``): one
cell is one job, N jobs in flight. ``--executor submitit-local`` is submitit's own local
executor: the same code path, runnable on a laptop or in CI without a cluster.

Local cells on CUDA run as clients of one CUDA MPS daemon per invocation (``--mps``,
experiments/mps.py). Each cell's process leads its own process group; when the sweep itself is
stopped (Ctrl-C, SIGTERM, SIGHUP, a crash), it sends SIGTERM to every running cell's group, starts
no new cell and waits for them (each flushes and writes its partial summary) before it exits, so
no cell is left running as an orphan.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from andrea_diag.config import RunConfig
from andrea_diag.console_text import make_console, shown
from andrea_diag.errors import UserError
from andrea_diag.experiments.cell_processes import CellProcesses
from andrea_diag.experiments.executor_config import ExecutorConfig, check_submitit
from andrea_diag.experiments.mps import mps_session
from andrea_diag.out_place import folder_kind, refuse_nested
from andrea_diag.rundir import (
    atomic_write_text,
    child,
    make_fresh_dir,
    make_out_dir,
    open_new_file,
    read_json,
    remove_file,
)

ERROR_FILE = "error.json"  # written by a failing cell's process into its cell directory
# The caller's work on a finished cell, given its directory and the folder of the sweep's one
# plotly.js (None: inline): the commands render its page (experiments import no report). It
# runs in the sweep's process as each cell ends; an error there marks the cell crashed.
AfterCell = Callable[[Path, Path | None], object]


@dataclass
class CellJob:
    name: str
    cell_dir: Path
    config: RunConfig
    clips: list[str]
    resume: bool
    plotly_dir: Path | None = None  # the sweep's one shared plotly.js (--plotly shared)


def device_slots(jobs: int, cuda: bool, visible: str | None, count: int) -> list[str | None]:
    """One entry per cell that may run at once: a GPU id (what the cell's process gets as
    ``CUDA_VISIBLE_DEVICES``) repeated ``jobs`` times per GPU, or ``None`` (CPU) ``jobs`` times.
    ``visible``: the sweep's own ``CUDA_VISIBLE_DEVICES`` (ids or UUIDs), ``count``: GPUs seen."""
    if not cuda:
        return [None] * jobs
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible is not None else []
    if visible is None:
        ids = [str(i) for i in range(count)]
    if not ids:
        return [None] * jobs
    return [gpu for gpu in ids for _ in range(jobs)]


def start_line(cells: int, slots: list[str | None], cfg: ExecutorConfig) -> str:
    """What the invocation is about to run, and where: "4 cells, 4 at once on GPU 0 (--jobs 8
    per GPU)". A sweep of fewer cells than slots runs them all at once, not ``len(slots)``.

    >>> start_line(4, ["0"] * 8, ExecutorConfig(jobs=8))
    '[bold]4 cells[/], 4 at once on GPU 0 (--jobs 8 per GPU)'
    """
    at_once = min(cells, len(slots))
    head = f"[bold]{cells} cell{'s' if cells != 1 else ''}[/], {at_once} at once"
    if cfg.kind != "local":
        return f"{head} ({cfg.kind}; --jobs {cfg.jobs} in flight)"
    # numbered as numbers: GPU 2 before GPU 10
    gpus = sorted({s for s in slots if s is not None}, key=lambda g: (len(g), g))
    if not gpus:
        return f"{head} on the CPU (--jobs {cfg.jobs})"
    where = f"GPU {gpus[0]}" if len(gpus) == 1 else f"GPUs {', '.join(gpus)}"
    return f"{head} on {where} (--jobs {cfg.jobs} per GPU)"


def uses_cuda(device: str) -> bool:
    """Whether cells asking for ``device`` (auto, cpu, cuda) land on a GPU here."""
    import torch

    return device != "cpu" and torch.cuda.is_available()


def check_mps_device(ex: ExecutorConfig, device: str) -> None:
    """``--mps on`` for local cells that would not be on a GPU (``--device cpu``, or no GPU
    here): refused before the sweep's folder, not after it (or never, one cell at a time). The
    command line's rule and ``run_sweep``'s, for a Python caller: a ``SweepSpec`` of CPU cells
    with ``ExecutorConfig(jobs=2, mps="on")`` made the sweep's folder and ``sweep.json``,
    then failed starting MPS."""
    if ex.mps == "on" and ex.kind == "local" and not ex.merge_only and not uses_cuda(device):
        raise UserError(
            f"--mps on needs cells on a CUDA device; these run on the CPU (--device {device})",
            hint="drop --mps on (MPS shares a GPU between cells)",
        )


def cells_at_once(cfg: ExecutorConfig, device: str) -> int:
    """How many cells run side by side: one inside the sweep's process, else one per slot."""
    return 1 if cfg.in_process else len(_slots(cfg, device))


def _slots(cfg: ExecutorConfig, device: str) -> list[str | None]:
    if cfg.kind != "local":
        return [None] * cfg.jobs  # the scheduler gives each job its own GPUs
    import torch

    cuda = uses_cuda(device)
    count = torch.cuda.device_count() if cuda else 0
    return device_slots(cfg.jobs, cuda, os.environ.get("CUDA_VISIBLE_DEVICES"), count)


def write_job(job: CellJob, folder: Path) -> Path:
    """The cell's instructions, as a file its process reads (``folder/<cell>.json``)."""
    path = folder / f"{job.name}.json"
    spec = {"config": dataclasses.asdict(job.config), "clips": job.clips,
            "out": str(job.cell_dir), "resume": job.resume}  # fmt: skip
    atomic_write_text(path, json.dumps(spec, indent=1))  # replaces a planted link
    return path


def run_cell(job_path: str) -> None:
    """A cell's process: run its cascade into its directory. A failure leaves ``error.json``
    there (the sweep's only way to learn why) and is raised again, so the process fails."""
    from andrea_diag.experiments.cascade import CascadeSpec, run_cascade

    spec = read_json(Path(job_path), "the cell's job file", kind=dict)
    out = Path(spec["out"])
    fresh = _empty_or_absent(out)  # else the cell's only if a cascade's (it refused others)
    try:
        cfg = RunConfig.from_dict(spec["config"])
        cell = CascadeSpec(base=cfg, clips=spec["clips"], out=out, resume=spec["resume"])
        run_cascade(cell, make_console(stderr=True))
    except BaseException as exc:
        # never into a folder the cascade refused (another's records, a link out): the exit
        # code and the cell's log say why then; nor instead of the error if it cannot be written
        if (fresh or folder_kind(out) == "cascade") and not os.path.islink(out):
            with contextlib.suppress(UserError, OSError):
                refuse_nested(out, "the cell's folder", resumes="cascade", cell=True)
                make_out_dir(out, "cell folder")
                atomic_write_text(
                    out / ERROR_FILE, json.dumps({"error": f"{type(exc).__name__}: {exc}"})
                )
        raise


def _empty_or_absent(folder: Path) -> bool:
    """Nothing at ``folder``, or an empty folder (not a link): a cell's place, not yet used."""
    try:
        if not os.path.lexists(folder):
            return True
        if not folder.is_dir() or folder.is_symlink():
            return False
        with os.scandir(folder) as entries:
            return not any(entries)
    except OSError:
        return False


def _error(job: CellJob, fallback: str) -> str:
    path = job.cell_dir / ERROR_FILE
    if path.is_file():
        try:
            return str(read_json(path, "the cell's error.json", kind=dict)["error"])
        except (UserError, KeyError):
            pass
    return fallback


def _local_launcher(
    logs: Path, threads: int, procs: CellProcesses
) -> Callable[[CellJob, Path, str | None], str | None]:
    def launch(job: CellJob, job_path: Path, gpu: str | None) -> str | None:
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu  # the cell sees its GPU as cuda:0
        else:  # N cells on the CPU share its cores instead of each taking all of them
            env.setdefault("OMP_NUM_THREADS", str(threads))
        log = logs / f"{job.name}.log"
        with open_new_file(log, "the cell's log") as f:  # never through a planted link
            cmd = [sys.executable, "-m", "andrea_diag.experiments.executor", str(job_path)]
            rc = procs.run(cmd, env, f)
        if rc is None:
            return "not started: the sweep was stopped"
        if rc != 0 and procs.stopping.is_set():
            return f"stopped with the sweep (exit code {rc}); re-run the sweep to continue it"
        return None if rc == 0 else _error(job, f"exit code {rc}; see {log}")

    return launch


def _submitit_launcher(
    cfg: ExecutorConfig, folder: Path
) -> Callable[[CellJob, Path, str | None], str | None]:
    check_submitit(cfg.kind)
    import submitit

    ex = submitit.AutoExecutor(folder=folder, cluster="slurm" if cfg.kind == "slurm" else "local")
    params: dict[str, Any] = {"timeout_min": cfg.time_min, "name": "andrea-diag-cell"}
    if cfg.kind == "slurm":
        params.update(gpus_per_node=cfg.gpus, tasks_per_node=1, nodes=1)
        if cfg.partition:
            params["slurm_partition"] = cfg.partition
    ex.update_parameters(**params)

    def launch(job: CellJob, job_path: Path, gpu: str | None) -> str | None:
        del gpu
        sub = ex.submit(run_cell, str(job_path))
        try:
            sub.result()
        except Exception as exc:  # submitit's FailedJobError / UncompletedJobError, ...
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return _error(job, f"{type(exc).__name__}: {first}; see {sub.paths.stderr}")
        return None

    return launch


def run_cells(
    jobs: list[CellJob],
    cfg: ExecutorConfig,
    out: Path,
    console: Console,
    after_cell: AfterCell | None = None,
) -> dict[str, str]:
    """Run ``jobs``, ``len(slots)`` at a time; returns {cell: error} for the cells that failed.
    ``after_cell`` is called on each cell that finished, in this process, once its slot is free.

    Local cells on a GPU run under one MPS daemon (``cfg.mps``); if this call is interrupted
    (KeyboardInterrupt, a signal turned into an exception, any error), every running cell is
    sent SIGTERM and waited for before the exception goes on."""
    if not jobs:
        return {}
    slots = _slots(cfg, jobs[0].config.device)
    folder = make_out_dir(child(out, "cells", "the cells' folder"), "the cells' folder")
    threads = max(1, (os.cpu_count() or 1) // len(slots))
    procs = CellProcesses()
    launch = (
        _local_launcher(folder, threads, procs)
        if cfg.kind == "local"
        # submitit's parent process unpickles the ``*_result.pkl`` it finds in its folder: a
        # fresh folder per invocation (never ``cells/submitit`` reused) holds no pickle this
        # invocation did not ask for, and no link planted there to write its files through
        else _submitit_launcher(cfg, make_fresh_dir(folder, "submitit-", "submitit's folder"))
    )
    console.print(start_line(len(jobs), slots, cfg), highlight=False)
    cuda = cfg.kind == "local" and uses_cuda(jobs[0].config.device)
    with mps_session(cfg.mps, cuda=cuda, jobs=cfg.jobs, console=console):
        results = _run_in_slots(jobs, slots, launch, folder, procs, console, after_cell)
    return {name: error for name, error in results if error is not None}


def _run_in_slots(
    jobs: list[CellJob],
    slots: list[str | None],
    launch: Callable[[CellJob, Path, str | None], str | None],
    folder: Path,
    procs: CellProcesses,
    console: Console,
    after_cell: AfterCell | None,
) -> list[tuple[str, str | None]]:
    free: queue.Queue[str | None] = queue.Queue()
    after_lock = threading.Lock()  # one cell's after_cell at a time: it need not be thread-safe
    for slot in slots:
        free.put(slot)

    def one(job: CellJob) -> tuple[str, str | None]:
        remove_file(job.cell_dir / ERROR_FILE, "the cell's error.json")
        gpu = free.get()
        try:
            if procs.stopping.is_set():
                return job.name, "not started: the sweep was stopped"
            console.print(
                f"cell {shown(job.name)} started" + (f" on GPU {shown(gpu)}" if gpu else "")
            )
            t0 = time.perf_counter()
            error = launch(job, write_job(job, folder), gpu)
        finally:
            free.put(gpu)
        if error is None and after_cell is not None:
            with after_lock:
                error = _after(after_cell, job)
        word = "[green]done[/]" if error is None else f"[red]crashed[/] ({shown(error)})"
        console.print(
            f"cell {shown(job.name)} {word} in {time.perf_counter() - t0:.0f} s", highlight=False
        )
        return job.name, error

    with ThreadPoolExecutor(max_workers=len(slots)) as pool:
        try:
            return list(pool.map(one, jobs))
        except BaseException:
            procs.stop_all()  # before the pool's exit waits on the threads that wait on cells
            raise


def _after(after_cell: AfterCell, job: CellJob) -> str | None:
    """The caller's work on a finished cell; its error, as the cell's own would be."""
    try:
        after_cell(job.cell_dir, job.plotly_dir)
    except Exception as exc:  # one cell's page must not cost the other cells their run
        return f"{type(exc).__name__}: {exc}"
    return None


def main(job_path: str) -> None:
    """A cell's process: SIGTERM/SIGHUP (from the sweep stopping it, or a scheduler) end the
    cell as Ctrl-C does: rows flushed, partial summary written, lock released, exit 143/129."""
    from andrea_diag.signals import Terminated, stop_on_signals

    try:
        with stop_on_signals():
            run_cell(job_path)
    except Terminated as stop:
        sys.exit(stop.exit_code)


if __name__ == "__main__":  # one cell's process (run_cells starts it)
    main(sys.argv[1])
