"""The bench-kernels page: speed-up bars, time bars, the full table and the 3-vs-1 answer.

    from andrea_diag.report.bench_page import render_bench_page
    Path("bench-kernels.html").write_text(render_bench_page(run_bench(["tiny"], ["fp32"], 3)))

Written by ``andrea-diag bench-kernels`` as ``bench-kernels.html`` next to the JSON; one
self-contained page (plotly.js embedded, no CDN), readable offline. Its numbers are measured
here, but a ``BenchResult`` may be rebuilt from a JSON someone else wrote: every value goes
through ``report/safe.py`` like a run report's (``esc``; the figures through ``figure_html``).
"""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go

from andrea_diag.bench import (
    BenchResult,
    adaptive_summary,
    fmt,
    peer_misses,
    targets,
    three_vs_one,
    verdict,
)
from andrea_diag.report.plotlyjs import PLOT_CONFIG, script_tag
from andrea_diag.report.safe import esc, figure_html

TABLE_COLUMNS = [
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
    "rel err params",
    "float64 check",
]
# a row's within_tol as the table says it: a peer (torch) past its tolerance is timed, not hidden
CHECK_WORDS = {True: "passed", False: "MISSED (torch's rounding)", None: "-"}


def _bar_figures(result: BenchResult) -> tuple[go.Figure, go.Figure]:
    """Speed-up over torch and median ms, grouped by variant, for the clip rows."""
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
    return speed, times


def _table_figure(result: BenchResult) -> go.Figure:
    """Every row of the run (copy, clip, stage and clip+adamw) as a plotly table."""
    cells = [
        [r.size for r in result.rows],
        [r.dtype for r in result.rows],
        [r.mode for r in result.rows],
        [r.variant for r in result.rows],
        [f"{r.ms:.4f}" for r in result.rows],
        [f"{r.gbps:.0f}" for r in result.rows],
        [fmt(r.pct_copy, ".0f") for r in result.rows],
        [fmt(r.speedup_vs_torch, ".2f") for r in result.rows],
        [fmt(r.rel_err_norm, ".1e") for r in result.rows],
        [fmt(r.rel_err_grads, ".1e") for r in result.rows],
        [fmt(r.rel_err_params, ".1e") for r in result.rows],
        [CHECK_WORDS[r.within_tol] for r in result.rows],
    ]
    tab = go.Figure(go.Table(header={"values": TABLE_COLUMNS}, cells={"values": cells}))
    tab.update_layout(height=60 + 22 * len(result.rows))
    return tab


def render_bench_page(result: BenchResult) -> str:
    """One self-contained page: speed-up bars, ms bars, the full table, the 3-vs-1 answer."""
    speed, times = _bar_figures(result)
    tab = _table_figure(result)
    figures = {"fig-speed": speed, "fig-times": times, "fig-table": tab}
    parts = [script_tag(Path("bench-kernels.html"))]  # inline: the page stays self-contained
    parts += [figure_html(f, div_id, PLOT_CONFIG) for div_id, f in figures.items()]
    answer = (
        "".join(f"<li>{esc(line)}</li>" for line in three_vs_one(result))
        or f"<li>({'the clip case was not run' if result.meta.get('gpu') else 'no GPU in this run'})</li>"
    )
    tgt = (
        "".join(
            f"<li>{esc(w)}: {esc(fmt(g, '.2f'))} (want &ge; {esc(want)}) {verdict(g, m)}</li>"
            for w, g, want, m in targets(result)
        )
        if result.meta.get("gpu")
        else ""
    )
    adaptive = "".join(f"<li>{esc(line)}</li>" for line in adaptive_summary(result))
    adaptive_html = (
        f"<h2>Adaptive clip modes: cost per update against global</h2><ul>{adaptive}</ul>"
        if adaptive
        else ""
    )
    misses = "".join(f"<li>{esc(line)}</li>" for line in peer_misses(result))
    misses_html = f"<h2>Peers outside their float64 check</h2><ul>{misses}</ul>" if misses else ""
    meta = json.dumps(result.meta, indent=1, default=str)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>andrea-diag bench-kernels</title></head>"
        "<body style='font-family:sans-serif;max-width:1400px;margin:auto'>"
        f"<h1>bench-kernels: {esc(result.meta.get('gpu') or 'CPU only')}</h1>"
        f"<p>Copy bandwidth measured in this run: {esc(result.meta.get('copy_gbps', 0), '.0f')} GB/s. Bytes: clip active "
        "= 3 x gradient bytes (read for the norm, read + write to scale); inactive = 1 x.</p>"
        f"<h2>Why three kernels, not one?</h2><ul>{answer}</ul><h2>Targets</h2><ul>{tgt}</ul>"
        + adaptive_html
        + misses_html
        + "".join(parts)
        + f"<h2>Run metadata</h2><pre>{esc(meta)}</pre></body></html>"
    )
