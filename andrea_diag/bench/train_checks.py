"""bench-train's checks before anything is timed: the arguments (one :class:`UserError` line
each), and, under ``--cuda-graph``, that every graph was captured during the warm-up; and the
host's speed, put on record beside the ratios (:func:`host_speed`). Shared by bench-train,
bench-kernels and accum-check: their ``--out`` outside any run (:func:`check_out_outside_runs`)
and made for the work, gone again if the work stopped before writing (:func:`out_dir_for_work`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from andrea_diag.clip.modes import check_clip
from andrea_diag.config import RunConfig
from andrea_diag.errors import UserError
from andrea_diag.out_place import refuse_nested
from andrea_diag.rundir import make_out_dir
from andrea_diag.train.components import check_precision

PLAIN_MODES = ("same", "eager", "all")  # the plain loop beside a --cuda-graph engine


def check_out_outside_runs(out: Path | None, flag: str = "--out") -> None:
    """One :class:`UserError` line when ``out`` is a run, cascade or sweep folder or inside
    one (resolved: a link to a run is the run): a bench's or check's files written there
    would be mixed with the run's records. Before the folder is made. What a run folder is:
    :func:`~andrea_diag.out_place.folder_kind`, its one definition."""
    if out is not None:
        refuse_nested(out, flag)


@contextlib.contextmanager
def out_dir_for_work(out: Path) -> Iterator[Path]:
    """``make_out_dir(out)`` (refused in one line before the work) for the work in the block.
    Where the block fails or is stopped (Ctrl-C, an out-of-memory line) before anything is
    written there, the folders this call made are removed again: a bench or check that
    recorded nothing leaves no empty ``runs/bench-kernels-<time>`` behind. A folder that was
    there before, or that holds anything, stays (rmdir removes only an empty one)."""
    made = [p for p in (out, *out.parents) if not os.path.lexists(p)]  # deepest first
    path = make_out_dir(out)
    try:
        yield path
    except BaseException:
        for folder in made:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def check_args(
    cfg: RunConfig, device: torch.device, updates: int, warmup: int, block: int, plain: str
) -> None:
    """One :class:`UserError` line for a bench that cannot run as asked: every option, so a
    refused bench leaves no ``--out`` folder behind (the precision and clip registries are
    torch's side, which the config cannot see)."""
    check_precision(cfg.precision)
    check_clip(cfg.clip, cfg.clip_impl, device)
    if updates < 1 or warmup < 0 or block < 1:
        raise UserError("--updates and --block must be at least 1, --warmup 0 or more")
    if plain not in PLAIN_MODES or (plain != "same" and not cfg.cuda_graph):
        if plain in PLAIN_MODES:
            raise UserError(f"--plain {plain} needs --cuda-graph", hint="add --cuda-graph")
        raise UserError(f"unknown --plain {plain!r}", hint="choose " + ", ".join(PLAIN_MODES))
    if cfg.cuda_graph:
        from andrea_diag.train.graphed import check_graphable
        from andrea_diag.train.graphed_step import CAPTURED_BY

        check_graphable(device, cfg.replicas)  # before any model is built
        if warmup < CAPTURED_BY:  # the captures are warm-up work, never a timed update
            raise UserError(f"--cuda-graph needs --warmup {CAPTURED_BY} or more, got {warmup}",
                            hint=f"the graphs are captured by update {CAPTURED_BY}")  # fmt: skip
    check_batches_fit(cfg, updates, warmup)


# Host bytes one drawn update's batch holds beyond its int64 tokens: the tensor and the plans'
# records of it (measured on tiny: ~2.4 KB), with room to spare.
BATCH_OVERHEAD = 4096


def check_batches_fit(cfg: RunConfig, updates: int, warmup: int) -> None:
    """One line where the batches the bench draws before timing (every warm-up and timed
    update's, for the plain loops, bench/train.py ``_arms``) would not fit in half the host
    memory free: ``--updates 1000000000``, which the option's bound takes, drew batches until
    the process was killed, minutes in, before any timing. The other half: the models, the
    engine's own records."""
    from andrea_diag.host_memory import available_memory

    free = available_memory()
    per = cfg.micro_batch * cfg.accum * (cfg.seq_len + 1) * 8 + BATCH_OVERHEAD
    need = (updates + warmup) * per
    if free is not None and need > free // 2:
        raise UserError(
            f"--updates {updates} and --warmup {warmup}: their batches are drawn before the "
            f"timing, about {need / 2**30:,.1f} GiB, more than half the {free / 2**30:,.1f} GiB "
            "of memory free here",
            hint=f"lower --updates (at most about {max(free // 2 // per - warmup, 0):,} here)",
        )


def check_captured(engines: list[Any], warmup: int) -> None:
    """A :class:`UserError` where a graphed engine's graph is still to come after the warm-up:
    its capture (and the eager updates before it) would be timed. The lr warm-up of ``v2`` and
    ``--update-stats-every N`` move the step's and the probe's captures later."""
    for e in engines:
        if not e.cfg.cuda_graph:
            continue
        probes = [p for p in e.probes.probes if getattr(p, "graphs", None) is not None]
        scalars = [p.graphs for p in probes if not _graphs_at_spikes(p)]
        missing = [name for name, ready in (
            ("group", e.groups.graph is not None),
            ("optimizer step", e.steps.graph is not None or not e.steps.graphed),
            ("optimizer-state probe", all(g.graph is not None for g in scalars)),
        ) if not ready]  # fmt: skip
        if missing:
            raise UserError(
                f"--cuda-graph: after --warmup {warmup} updates the {', '.join(missing)} "
                "graph is not captured yet, so the timed updates would include its capture",
                hint="pass a longer --warmup (the v2 recipe's lr warm-up and "
                "--update-stats-every N capture later)",
            )


def _graphs_at_spikes(probe: Any) -> bool:
    """Whether the optimizer-state probe's graph comes only with a spike's window of updates:
    its norms on a schedule that the update statistics share, or with those statistics off
    (the scheduled updates then run eagerly, or too far apart to capture in a warm-up,
    optstate.py ``_device_scalars``). It is captured there, in the timed updates as in a run."""
    every = getattr(probe, "moment_norms_every", 1)
    stats = getattr(probe, "update_stats", False)
    return every > 2 and (not stats or getattr(probe, "update_stats_every", 1) == every)


def host_speed() -> dict[str, Any]:
    """The host's speed at a fixed pure-Python loop, and its processor's name: the lent
    machines differ, and an engine update that is host-bound (12m bf16 under --cuda-graph)
    runs as fast as its host. One H200 call's host took 1.5x another's on the same lock-in
    sample (reports/bench-train/h200-2026-12-03/); this puts the host on record beside the
    ratios it moves."""
    import platform
    import time
    from pathlib import Path

    best = float("inf")
    for _ in range(5):  # the best of five: the host's speed, not its noise
        t0 = time.perf_counter()
        acc = 0
        for i in range(200_000):
            acc += i & 7
        best = min(best, time.perf_counter() - t0)
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        lines = [x for x in cpuinfo.read_text(errors="replace").splitlines() if "model name" in x]
        name = lines[0].split(":", 1)[1].strip() if lines else name
    return {"host_python_loop_ms": best * 1e3, "host_cpu": name,
            "host_python_loop": "best of 5: for i in range(200_000): acc += i & 7"}  # fmt: skip
