"""``andrea-diag bench-train``: the engine (every default probe on) against a plain loop.

    andrea-diag bench-train --size tiny --updates 6 --warmup 2 --block 2     # CPU, seconds
    andrea-diag bench-train --size 120m --precision bf16 --out reports/bench-train/120m-bf16

Writes ``<out>/bench-train.json`` and ``<out>/bench-train.html``; ``<out>`` defaults to
``runs/bench-train-<size>-<time>``. Method: andrea_diag/bench/train.py.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from andrea_diag.commands.options import check_out_path
from andrea_diag.config import ProbeConfig, RunConfig
from andrea_diag.console_text import make_console
from andrea_diag.device import resolve_device
from andrea_diag.fields import MAX_UPDATES
from andrea_diag.rundir import atomic_write_text
from andrea_diag.train.distributed import env_world


def _count(help_: str, shown: str, lo: int) -> Any:
    """A count option: its help, its per-device default as shown, its bounds."""
    return typer.Option(help=help_, show_default=shown, min=lo, max=MAX_UPDATES)


OutOpt = Annotated[
    Path | None,
    typer.Option(
        help="Folder for bench-train.json / .html.", show_default="runs/bench-train-<size>-<time>"
    ),
]


def bench_train(
    size: Annotated[
        str | None, typer.Option(help="Preset.", show_default="12m on CUDA, tiny on CPU")
    ] = None,
    precision: Annotated[str, typer.Option(help="fp32, bf16 or fp16.")] = "fp32",
    clip: Annotated[str, typer.Option(help="Clip mode of both loops.")] = "global",
    clip_impl: Annotated[str, typer.Option(help="auto, cuda, reference or torch.")] = "auto",
    updates: Annotated[
        int | None, _count("Timed updates per loop.", "200 on CUDA, 6 on CPU", 1)
    ] = None,
    warmup: Annotated[
        int | None, _count("Untimed updates per loop first.", "20 on CUDA, 2 on CPU", 0)
    ] = None,
    block: Annotated[
        int | None, _count("Updates per timed block; blocks alternate.", "20 on CUDA, 2 on CPU", 1)
    ] = None,
    update_stats_every: Annotated[
        int,
        typer.Option(
            help="The optimizer-state probe's update RMS / cosine (a parameter snapshot) every "
            "N updates and at spikes.",
            min=1,
            max=MAX_UPDATES,
        ),
    ] = ProbeConfig.update_stats_every,
    moment_norms_every: Annotated[
        int,
        typer.Option(
            help="The optimizer-state probe's norms of Adam's m and v every N updates, at spikes "
            "and until a spike's recovery is known.",
            min=1,
            max=MAX_UPDATES,
        ),
    ] = ProbeConfig.moment_norms_every,
    cuda_graph: Annotated[
        bool,
        typer.Option(
            help="The engine's forward and backward as a replayed CUDA graph (its --cuda-graph); "
            "CUDA only. The plain loop beside it: see --plain."
        ),
    ] = False,
    plain: Annotated[
        str,
        typer.Option(
            help="With --cuda-graph: same (the plain loop graphed too), eager (as users write "
            "it) or all (four loops: both graphed and both eager, in one process)."
        ),
    ] = "same",
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    out: OutOpt = None,
) -> None:
    """Time the training engine against a plain loop of the same model: ms/update, tokens/s,
    MFU, their ratio, and each probe's own cost."""  # fmt: skip
    from andrea_diag.bench.train import bench_train as run

    console = make_console(stderr=True)
    check_out_path(out, "--out")  # a control character or a dangling link: before the timing
    on_gpu = resolve_device(device).type == "cuda"  # UserError for cuda without a GPU
    size = size or ("12m" if on_gpu else "tiny")
    probes = ProbeConfig(
        update_stats_every=update_stats_every, moment_norms_every=moment_norms_every
    )
    cfg = RunConfig(size=size, precision=precision, clip=clip, clip_impl=clip_impl,
                    device=device, probes=probes, cuda_graph=cuda_graph).resolve()  # fmt: skip
    defaults = (200, 20, 20) if on_gpu else (6, 2, 2)  # updates, warmup, block
    updates, warmup, block = (d if v is None else v
                              for v, d in zip((updates, warmup, block), defaults, strict=True))  # fmt: skip
    from andrea_diag.bench.train_checks import check_args, check_out_outside_runs, out_dir_for_work

    # every argument first: a refused bench leaves no --out folder behind
    check_args(cfg, resolve_device(device), updates, warmup, block, plain)
    _check_environment()
    check_out_outside_runs(out)
    out = out or _default_out(size)
    # refused before the timing, not after; gone again if the bench stops before it wrote
    with out_dir_for_work(out):
        result = run(cfg, updates, warmup, block, plain=plain,
                     progress=lambda s: console.print(f"[dim]{s}[/]"))  # fmt: skip
        result["meta"]["command"] = _command(cfg, (updates, warmup, block), plain, out)
        _write(console, out, result)


def _check_environment() -> None:
    """The variables the bench reads, before its --out folder: a malformed WORLD_SIZE/RANK or
    a junk ANDREA_DIAG_CACHE (read where the data is prepared, after the folder) is one line,
    no empty folder left."""
    from andrea_diag.data.tokenizer import default_cache_dir

    env_world()
    default_cache_dir()


def _command(cfg: RunConfig, counts: tuple[int, int, int], plain: str, out: Path) -> str:
    """The command line that repeats this bench (every default spelled out), for its record;
    ``counts``: the updates, warm-up and block it ran with."""
    updates, warmup, block = counts
    return (
        f"andrea-diag bench-train --size {cfg.size} --precision {cfg.precision} --clip {cfg.clip} "
        f"--clip-impl {cfg.clip_impl} --updates {updates} --warmup {warmup} --block {block} "
        f"--device {cfg.device} --out {shlex.quote(str(out))}"  # a space in it: one argument
        + f" --update-stats-every {cfg.probes.update_stats_every}"
        + f" --moment-norms-every {cfg.probes.moment_norms_every}"
        + (" --cuda-graph" if cfg.cuda_graph else "")
        + (f" --plain {plain}" if plain != "same" else "")
    )


def _default_out(size: str) -> Path:
    from andrea_diag.experiments.cascade import default_out

    return default_out("bench-train", size)


def _write(console: Console, out: Path, result: dict) -> None:
    """``bench-train.json`` and its page in ``out``, and the console's summary."""
    from andrea_diag.report.bench_train_page import render_bench_train_page

    # a link planted in the folder is replaced, not written through
    atomic_write_text(out / "bench-train.json", json.dumps(result, indent=2))
    atomic_write_text(out / "bench-train.html", render_bench_train_page(result))
    _print_result(console, result)
    console.print(f"wrote {out / 'bench-train.json'} and {out / 'bench-train.html'}")


def _print_result(console: Console, result: dict) -> None:
    """The console's summary: both loops' ms/update, each probe's share, the once-a-run work."""
    e, p = result["engine"], result["plain"]
    console.print(
        f"engine {e['ms_per_update']:.2f} ms/update, plain {p['ms_per_update']:.2f} ms/update: "
        f"engine/plain {result['engine_over_plain']:.3f}x the time"
    )
    if "plain_eager" in result:  # --cuda-graph: both loops graphed above; users' loop here
        console.print(f"eager plain loop {result['plain_eager']['ms_per_update']:.2f} ms/update: "
                      f"graphed engine at {result['speed_vs_plain_eager']:.2f}x its speed, eager "
                      f"engine ({result['engine_eager']['ms_per_update']:.2f} ms/update) at "
                      f"{result['eager_speed_vs_plain_eager']:.2f}x")  # fmt: skip
    pipe = result["meta"].get("engine_pipeline") or {}
    if pipe:  # --cuda-graph: the engine's host part overlapping the next group, or why not
        console.print("engine pipelined: " + ("yes" if pipe["pipelined"] else
                                              f"no ({pipe['pipeline_refused']})"))  # fmt: skip
    for row in result["probes"]:
        console.print(f"  probe {row['probe']:<12} {row['ms_per_update']:.3f} ms/update "
                      f"({100 * row['share_of_engine']:.1f}%)")  # fmt: skip
    for row in result.get("once_per_run", []):
        console.print(f"  once a run: {row['probe']} {row['work']}: {row['ms']:.1f} ms "
                      f"({row['ms_per_update_over_run']:.3f} ms/update over "
                      f"{row['run_updates']} updates)")  # fmt: skip
