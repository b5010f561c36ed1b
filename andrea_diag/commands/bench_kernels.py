"""``andrea-diag bench-kernels``: time the clipper variants and write JSON + a plotly HTML report.

    andrea-diag bench-kernels --out reports/bench-kernels --sizes 12m,120m --dtypes fp32,bf16 --reps 100
    andrea-diag bench-kernels --device cpu --sizes tiny --reps 3     # CPU paths only, no GPU needed

Writes ``<out>/bench-kernels.json`` and ``<out>/bench-kernels.html`` (plotly.js embedded, no
CDN); ``<out>`` defaults to ``runs/bench-kernels-<sizes>-<time>``. The JSON is rewritten after
each (size, dtype) set with ``meta.partial`` true, so a stopped run keeps what it timed; the
page comes once every set is timed. Harness and method:
the andrea_diag.bench package; the page: andrea_diag/report/bench_page.py.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from andrea_diag import bench
from andrea_diag.bench.train_checks import check_out_outside_runs, out_dir_for_work
from andrea_diag.commands.errors import err_console
from andrea_diag.commands.options import check_out_path
from andrea_diag.config import MODEL_PRESETS
from andrea_diag.console_text import make_console
from andrea_diag.device import resolve_device
from andrea_diag.errors import UserError
from andrea_diag.fields import comma_items
from andrea_diag.rundir import atomic_write_text

OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        # parentheses, not [default: ...]: rich would take the brackets for markup and drop them
        help="Folder for bench-kernels.json / .html (default: runs/bench-kernels-<sizes>-<time>)",
    ),
]
GPU_REPS, CPU_REPS, MAX_REPS = 100, 3, 10**6
DEFAULT_DTYPES = "fp32,bf16"
DTYPE_CASES = ("clip", "adaptive")  # the cases timed per dtype; clip+adamw is fp32 alone
SizesOpt = Annotated[
    str,
    typer.Option(
        "--sizes", help=f"Comma list of presets ({', '.join(MODEL_PRESETS)})",
        show_default="12m,120m on CUDA, tiny on CPU",
    ),
]  # fmt: skip
DtypesOpt = Annotated[
    str,
    typer.Option(
        "--dtypes", help="Comma list of fp32, bf16, fp16 (cases clip and adaptive; clip+adamw "
        "is an fp32 step)", show_default=DEFAULT_DTYPES,
    ),
]  # fmt: skip
RepsOpt = Annotated[
    int | None,
    typer.Option(
        "--reps", help="Timed repetitions per variant (median)", min=1, max=MAX_REPS,
        show_default=f"{GPU_REPS} on CUDA, {CPU_REPS} on CPU",
    ),
]  # fmt: skip
DeviceOpt = Annotated[str, typer.Option("--device", help="auto, cuda, cuda:N or cpu")]
CasesOpt = Annotated[
    str,
    typer.Option(
        "--cases",
        help="Comma list of clip (clipper variants vs torch), clip+adamw (fused step) and "
        "adaptive (each --clip mode's cost against global)",
    ),
]


def _split(value: str, allowed: list[str], what: str) -> list[str]:
    """The items of ``--{what}s``, each one of ``allowed`` and given once (a repeated one would
    time the same rows twice, and the page would draw them over each other)."""
    items = comma_items(value, f"--{what}s", UserError)
    bad = [v for v in items if v not in allowed]
    if bad:
        raise UserError(
            f"unknown {what}: {', '.join(bad) or '(none given)'}",
            hint=f"choose from {', '.join(allowed)}",
        )
    twice = next((v for i, v in enumerate(items) if v in items[:i]), None)
    if twice is not None:
        raise UserError(f"--{what}s lists {twice} twice: {value}", hint="give each value once")
    return items


def _dtypes(value: str, cases: list[str]) -> list[str]:
    """The dtypes timed: ``--dtypes`` ("" for the default), or fp32 alone where no case takes a
    dtype. A dtype other than fp32 for clip+adamw alone would be ignored without a word (the
    step is fp32): refused."""
    if any(c in DTYPE_CASES for c in cases):
        return _split(value or DEFAULT_DTYPES, list(bench.DTYPES), "dtype")
    unused = [d for d in _split(value, list(bench.DTYPES), "dtype") if d != "fp32"] if value else []
    if unused:
        raise UserError(
            f"--dtypes {','.join(unused)} would not be timed: --cases {','.join(cases)} times "
            "an fp32 step alone",
            hint="leave --dtypes out, or add the clip or adaptive case to --cases",
        )
    return ["fp32"]


def _check_gpu(on_gpu: bool) -> None:
    """The CUDA clipper builds on this GPU, or one line (before the --out folder is made)."""
    if on_gpu:
        from andrea_diag.clip import cuda

        ok, why = cuda.available()
        if not ok:
            raise UserError(f"CUDA clipper unavailable: {why}", hint="run `andrea-diag doctor`")


def _command(
    out: Path, sizes: list[str], dtypes: list[str], reps: int, device: str, cases: list[str]
) -> str:
    """The command line that repeats this run (every default spelled out; ``--out`` quoted as
    the shell needs it: a folder with a space in its name is one argument)."""
    return (
        f"andrea-diag bench-kernels --out {shlex.quote(str(out))} --sizes {','.join(sizes)} "
        f"--dtypes {','.join(dtypes)} --reps {reps} --device {shlex.quote(device)} "
        f"--cases {','.join(cases)}"
    )


def _save(out: Path, result: bench.BenchResult, command: str, *, partial: bool) -> None:
    """``bench-kernels.json`` as it stands: after each set (``meta.partial`` true, so a run
    stopped or killed part-way keeps the sets it timed and says it is not whole), then whole.
    Atomic: a link planted in the folder is replaced, not written through."""
    doc = result.to_dict()
    doc["meta"] = {**doc["meta"], "command": command, "partial": partial}
    atomic_write_text(out / "bench-kernels.json", json.dumps(doc, indent=2))


def bench_kernels(
    out: OutOpt = None,
    sizes: SizesOpt = "",
    dtypes: DtypesOpt = "",
    reps: RepsOpt = None,
    device: DeviceOpt = "auto",
    cases: CasesOpt = ",".join(bench.CASES),
) -> None:
    """Benchmark torch's clip_grad_norm_, the reference and the fused CUDA clipper."""
    console = make_console()
    check_out_path(out, "--out")  # a control character or a dangling link: before the timing
    dev = resolve_device(device)  # UserError for an unknown name or cuda without a GPU
    on_gpu = dev.type == "cuda"
    size_list = _split(sizes or ("12m,120m" if on_gpu else "tiny"), list(MODEL_PRESETS), "size")
    case_list = _split(cases, list(bench.CASES), "case")
    dtype_list = _dtypes(dtypes, case_list)
    if reps is not None and not 1 <= reps <= MAX_REPS:  # the library call, not only typer, checks
        raise UserError(f"--reps must be between 1 and {MAX_REPS}, got {reps}")
    reps = reps or (GPU_REPS if on_gpu else CPU_REPS)
    _check_gpu(on_gpu)
    check_out_outside_runs(out)
    if out is None:
        # imported here: the cascade module pulls in the trainer, which only this default needs
        from andrea_diag.experiments.cascade import default_out

        out = default_out("bench-kernels", "-".join(size_list))
    # a file in its place is refused before the timing, not after; a run stopped before it
    # wrote leaves no empty folder behind
    command = _command(out, size_list, dtype_list, reps, device, case_list)
    with out_dir_for_work(out):
        if not on_gpu:  # said once every refusal is behind: a refusal is its one error line
            console.print("[yellow]no GPU: benchmarking the CPU paths (reference vs torch) only[/]")
        result = bench.run_bench(
            size_list,
            dtype_list,
            reps,
            str(dev),
            warmup=5 if on_gpu else 1,
            progress=lambda s: console.print(f"[dim]timing {s} ...[/]"),
            cases=tuple(case_list),
            after_set=lambda r: _save(out, r, command, partial=True),
        )
        result.meta["command"] = command  # the page's too
        _save(out, result, command, partial=False)
    # imported here: plotly is only needed for the page (the JSON above is already written)
    from andrea_diag.report.bench_page import render_bench_page

    atomic_write_text(out / "bench-kernels.html", render_bench_page(result))
    console.print(table(result))
    for line in bench.peer_misses(result):  # torch off its float64 check: said, not fatal
        err_console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)
    for line in bench.adaptive_summary(result):
        console.print(line)
    if on_gpu:
        for line in (*bench.three_vs_one(result), *bench.headroom(result)):
            console.print(line)
        for what, got, want, met in bench.targets(result):
            console.print(
                f"target {what}: {bench.fmt(got, '.2f')} (want >= {want}) "
                f"{bench.verdict(got, met).upper()}"
            )
    console.print(f"wrote {out / 'bench-kernels.json'} and {out / 'bench-kernels.html'}")


def table(result: bench.BenchResult) -> Table:
    """The console summary: one line per row of the run."""
    t = Table(
        title=f"bench-kernels on {result.meta.get('gpu') or 'CPU'} (median of {result.meta['reps']})"
    )
    for col in ("size", "dtype", "mode", "variant", "ms", "GB/s", "% copy", "x torch", "err grads"):
        t.add_column(col, justify="right" if col not in ("variant", "mode") else "left")
    for r in result.rows:
        t.add_row(
            r.size,
            r.dtype,
            r.mode,
            r.variant,
            f"{r.ms:.4f}",
            f"{r.gbps:.0f}",
            bench.fmt(r.pct_copy, ".0f"),
            bench.fmt(r.speedup_vs_torch, ".2f"),
            bench.fmt(r.rel_err_grads, ".1e"),
        )
    return t
