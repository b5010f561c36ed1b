"""``andrea-diag bench-kernels``: time the clipper variants and write JSON + a plotly HTML report.

    andrea-diag bench-kernels --out reports/bench-kernels --sizes 12m,120m --dtypes fp32,bf16 --reps 100
    andrea-diag bench-kernels --device cpu --sizes tiny --reps 3     # CPU paths only, no GPU needed

Writes ``<out>/bench-kernels.json`` and ``<out>/bench-kernels.html`` (plotly.js embedded, no
CDN). Harness and method: andrea_diag/bench.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from andrea_diag import bench
from andrea_diag.config import MODEL_PRESETS
from andrea_diag.errors import UserError

OutOpt = Annotated[Path, typer.Option("--out", help="Folder for bench-kernels.json / .html")]
SizesOpt = Annotated[str, typer.Option("--sizes", help="Comma list of presets (tiny, 12m, 120m)")]
DtypesOpt = Annotated[str, typer.Option("--dtypes", help="Comma list of fp32, bf16, fp16")]
RepsOpt = Annotated[int, typer.Option("--reps", help="Timed repetitions per variant (median)")]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto, cuda, cuda:N or cpu")]


def _split(value: str, allowed: list[str], what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if not items or bad:
        raise UserError(
            f"unknown {what}: {', '.join(bad) or '(none given)'}",
            hint=f"choose from {', '.join(allowed)}",
        )
    return items


def bench_kernels(
    out: OutOpt = Path("bench-kernels"),
    sizes: SizesOpt = "",
    dtypes: DtypesOpt = "fp32,bf16",
    reps: RepsOpt = 0,
    device: DeviceOpt = "auto",
) -> None:
    """Benchmark torch's clip_grad_norm_, the reference and the fused CUDA clipper."""
    import torch

    console = Console()
    dev = bench.resolve_device(device)
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(
            "--device cuda but no CUDA device is visible", hint="use --device cpu or auto"
        )
    if dev != "cpu" and not dev.startswith("cuda"):
        raise UserError(f"unknown device {device!r}", hint="auto, cuda, cuda:N or cpu")
    on_gpu = dev.startswith("cuda")
    size_list = _split(sizes or ("12m,120m" if on_gpu else "tiny"), list(MODEL_PRESETS), "size")
    dtype_list = _split(dtypes, list(bench.DTYPES), "dtype")
    reps = reps or (100 if on_gpu else 3)
    if reps < 1:
        raise UserError("--reps must be at least 1")
    if on_gpu:
        from andrea_diag.clip import cuda

        ok, why = cuda.available()
        if not ok:
            raise UserError(f"CUDA clipper unavailable: {why}", hint="run `andrea-diag doctor`")
    else:
        console.print("[yellow]no GPU: benchmarking the CPU paths (reference vs torch) only[/]")
    result = bench.run_bench(
        size_list,
        dtype_list,
        reps,
        dev,
        warmup=5 if on_gpu else 1,
        progress=lambda s: console.print(f"[dim]timing {s} ...[/]"),
    )
    result.meta["command"] = (
        f"andrea-diag bench-kernels --out {out} --sizes {','.join(size_list)} "
        f"--dtypes {','.join(dtype_list)} --reps {reps} --device {device}"
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-kernels.json").write_text(json.dumps(result.to_dict(), indent=2))
    (out / "bench-kernels.html").write_text(render_html(result))
    console.print(table(result))
    if on_gpu:
        for line in bench.three_vs_one(result):
            console.print(line)
        for what, got, want, met in bench.targets(result):
            console.print(
                f"target {what}: {bench.fmt(got, '.2f')} (want >= {want}) {'MET' if met else 'MISSED'}"
            )
    console.print(f"wrote {out / 'bench-kernels.json'} and {out / 'bench-kernels.html'}")


def table(result: bench.BenchResult) -> Table:
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


def render_html(result: bench.BenchResult) -> str:
    """One self-contained page: speed-up bars, ms bars, the full table, the 3-vs-1 answer."""
    import plotly.graph_objects as go
    import plotly.io as pio

    rows = [r for r in result.rows if r.mode in ("active", "inactive")]
    cases = sorted({(r.size, r.dtype, r.mode) for r in rows}, key=str)
    variants = list(dict.fromkeys(r.variant for r in rows))
    labels = [f"{s} {d} {m}" for s, d, m in cases]
    speed = go.Figure()
    times = go.Figure()
    for v in variants:
        by = {(r.size, r.dtype, r.mode): r for r in rows if r.variant == v}
        speed.add_bar(
            name=v, x=labels, y=[by[c].speedup_vs_torch if c in by else None for c in cases]
        )
        times.add_bar(name=v, x=labels, y=[by[c].ms if c in by else None for c in cases])
    speed.update_layout(
        title="Speed-up over torch clip_grad_norm_(foreach=True), same run",
        barmode="group",
        yaxis_title="x",
    )
    times.update_layout(
        title="Median time per clip step (L2 flushed)",
        barmode="group",
        yaxis_title="ms",
        yaxis_type="log",
    )
    cols = [
        "size",
        "dtype",
        "mode",
        "variant",
        "ms",
        "GB/s",
        "% copy",
        "x torch",
        "rel err norm",
        "rel err grads",
    ]
    cells = [
        [r.size for r in result.rows],
        [r.dtype for r in result.rows],
        [r.mode for r in result.rows],
        [r.variant for r in result.rows],
        [f"{r.ms:.4f}" for r in result.rows],
        [f"{r.gbps:.0f}" for r in result.rows],
        [bench.fmt(r.pct_copy, ".0f") for r in result.rows],
        [bench.fmt(r.speedup_vs_torch, ".2f") for r in result.rows],
        [bench.fmt(r.rel_err_norm, ".1e") for r in result.rows],
        [bench.fmt(r.rel_err_grads, ".1e") for r in result.rows],
    ]
    tab = go.Figure(go.Table(header={"values": cols}, cells={"values": cells}))
    tab.update_layout(height=60 + 22 * len(result.rows))
    parts = [pio.to_html(speed, include_plotlyjs=True, full_html=False)]
    parts += [pio.to_html(f, include_plotlyjs=False, full_html=False) for f in (times, tab)]
    answer = (
        "".join(f"<li>{line}</li>" for line in bench.three_vs_one(result))
        or "<li>(no GPU in this run)</li>"
    )
    tgt = (
        "".join(
            f"<li>{w}: {bench.fmt(g, '.2f')} (want &ge; {want}) {'met' if m else 'missed'}</li>"
            for w, g, want, m in bench.targets(result)
        )
        if result.meta.get("gpu")
        else ""
    )
    meta = json.dumps(result.meta, indent=1, default=str)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>andrea-diag bench-kernels</title></head>"
        "<body style='font-family:sans-serif;max-width:1400px;margin:auto'>"
        f"<h1>bench-kernels: {result.meta.get('gpu') or 'CPU only'}</h1>"
        f"<p>Copy bandwidth measured in this run: {result.meta.get('copy_gbps', 0):.0f} GB/s. Bytes: clip active "
        "= 3 x gradient bytes (read for the norm, read + write to scale); inactive = 1 x.</p>"
        f"<h2>Why three kernels, not one?</h2><ul>{answer}</ul><h2>Targets</h2><ul>{tgt}</ul>"
        + "".join(parts)
        + f"<h2>Run metadata</h2><pre>{meta}</pre></body></html>"
    )
