"""The bench-train page: engine vs plain loop, and where the engine's time goes.

    from andrea_diag.report.bench_train_page import render_bench_train_page
    Path("bench-train.html").write_text(render_bench_train_page(bench_train(cfg, 6, 2, 2)))

Written by ``andrea-diag bench-train`` next to its JSON; one self-contained page (plotly.js
embedded, no CDN), in the style of the bench-kernels page. The page is also rendered from a
``bench-train.json`` read back (a published result): its values go through ``report/safe.py``
like a run report's (``esc``; the figures, probe names included, through ``figure_html``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from andrea_diag.report.plotlyjs import PLOT_CONFIG, script_tag
from andrea_diag.report.safe import esc, figure_html


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


ARM_LABELS = {"engine": "engine", "plain": "plain", "engine_eager": "engine (eager)",
              "plain_eager": "plain (eager)"}  # fmt: skip


def _arms(result: dict[str, Any]) -> dict[str, str]:
    """The timed loops present, by key, with their labels (--cuda-graph: four, two graphed)."""
    meta = result["meta"]
    graphed = {"engine": meta.get("cuda_graph", False),
               "plain": meta.get("plain_graphed", meta.get("cuda_graph", False))}  # fmt: skip
    return {a: label + (" (graphed)" if graphed.get(a) else "")
            for a, label in ARM_LABELS.items() if a in result}  # fmt: skip


def _figures(result: dict[str, Any]) -> tuple[go.Figure, go.Figure]:
    arms = _arms(result)
    ms = go.Figure(go.Bar(x=list(arms.values()), y=[result[a]["ms_per_update"] for a in arms],
                          text=[f"{result[a]['ms_per_update']:.2f} ms" for a in arms]))  # fmt: skip
    ms.update_layout(
        title="ms per optimizer update (lower is faster)", yaxis_title="ms", height=380
    )
    probes = result["probes"]
    cost = go.Figure(go.Bar(y=[p["probe"] for p in probes], x=[p["ms_per_update"] for p in probes],
                            orientation="h",
                            text=[f"{100 * p['share_of_engine']:.1f}%" for p in probes]))  # fmt: skip
    cost.update_layout(title="each probe's hooks, ms per update (share of the engine's time)",
                       xaxis_title="ms", height=120 + 40 * max(1, len(probes)))  # fmt: skip
    return ms, cost


def render_bench_train_page(result: dict[str, Any]) -> str:
    """One self-contained page: the headline numbers, two bar charts, the run metadata."""
    meta = result["meta"]
    ms, cost = _figures(result)
    parts = [script_tag(Path("bench-train.html")),  # inline: the page stays self-contained
             figure_html(ms, "fig-ms", PLOT_CONFIG), figure_html(cost, "fig-cost", PLOT_CONFIG)]  # fmt: skip
    rows = "".join(
        f"<tr><td>{esc(label)}</td><td>{result[arm]['ms_per_update']:.3f}</td>"
        f"<td>{result[arm]['tokens_per_s']:.0f}</td>"
        f"<td>{_fmt(result[arm]['mfu'] and 100 * result[arm]['mfu'], '.1f')}</td></tr>"
        for arm, label in _arms(result).items()
    )
    graph_note = (
        f"<p>--cuda-graph: both loops' forward and backward replayed as a CUDA graph above. "
        f"The graphed engine runs at <b>{result['speed_vs_plain_eager']:.3f}x</b> the eager "
        f"plain loop's speed, the eager engine at {result['eager_speed_vs_plain_eager']:.3f}x "
        "(four loops in one process: the eager ones run slower than alone)."
        "</p>"
        if "eager_speed_vs_plain_eager" in result
        else ""
    )
    where = meta.get("gpu") or "CPU"
    mfu_note = (
        f"MFU: {esc(meta['mfu_formula'])}; peak {esc(meta['peak_tflops'])} TFLOPs "
        f"({esc(meta['peak_source'])})."
        if meta.get("peak_tflops")
        else "MFU n/a: no peak FLOPs for this device (CPU, or a GPU not in the table)."
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>andrea-diag bench-train</title>"
        "</head><body style='font-family:sans-serif;max-width:1200px;margin:auto'>"
        f"<h1>bench-train: {esc(where)}, {esc(meta['size'])} {esc(meta['precision'])}</h1>"
        f"<p>engine / plain: <b>{result['engine_over_plain']:.3f}x</b> the time per update "
        f"(speed {result['speed_vs_plain']:.3f}x the plain loop's). Plain loop: "
        f"{esc(meta['plain_loop'])}. {mfu_note}</p>{graph_note}"
        "<table border='1' cellpadding='4'><tr><th>loop</th><th>ms/update</th><th>tokens/s</th>"
        f"<th>MFU %</th></tr>{rows}</table>"
        + "".join(parts)
        + f"<h2>Run metadata</h2><pre>{esc(json.dumps(meta, indent=1))}</pre>"
        "</body></html>"
    )
