"""Figures from the probes' columns: per-layer grad norms, Adam state and pollution, lock-in.

Each ``*_figure(arms)`` returns ``(figure, note)`` like the ones in ``figures.py``; the figure is
None (and the note says why) when a run has no such columns, e.g. a run without probes.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from andrea_diag.report.arms import Arm
from andrea_diag.report.style import LAYOUT, Style, _has, _keep, mark_boundaries, thin


def _layer_order(col: str) -> tuple[int, int, str]:
    """embed, then h00..hNN, then final, then head: the order the signal flows."""
    name = col.split("/", 1)[1]
    layer = name.split(".", 1)[0]
    hm = re.fullmatch(r"h(\d+)", layer)
    if layer == "embed":
        return (0, 0, name)
    if hm:
        return (1, int(hm.group(1)), name)
    return ({"final": 2, "head": 3}.get(layer, 4), 0, name)


def _stack(titles: list[str], spacing: float) -> go.Figure:
    """One subplot per title, stacked in one column, sharing the update axis."""
    return make_subplots(
        rows=len(titles), cols=1, shared_xaxes=True, vertical_spacing=spacing, subplot_titles=titles
    )


def _arm_line(fig: go.Figure, style: Style, a: Arm, row: int, x: pd.Series, y: pd.Series,
              **scatter: object) -> None:  # fmt: skip
    """Arm ``a``'s line in subplot ``row``; its legend entry once (from the first row)."""
    trace = go.Scatter(x=x, y=y, name=a.label, legendgroup=a.label, showlegend=row == 1,
                       line=style.line(a, width=1.2), **scatter)  # fmt: skip
    fig.add_trace(trace, row=row, col=1)


def layer_heatmap_figure(arms: list[Arm]) -> tuple[go.Figure | None, str]:
    """Per-layer grad norm (update x layer group), log10 colour, one row per arm, shared scale."""
    with_cols = [a for a in arms if any(c.startswith("layer_gn/") for c in a.metrics.columns)]
    if not with_cols:
        return None, "no per-layer grad norms (layer_gn/* columns) recorded: heatmap omitted."
    fig = _stack([a.label for a in with_cols], 0.06)
    zs = []
    for a in with_cols:
        cols = sorted((c for c in a.metrics.columns if c.startswith("layer_gn/")), key=_layer_order)
        m = thin(a.metrics, _keep(a))
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.log10(m[cols].astype(float).clip(lower=1e-12).to_numpy().T)  # (layers, updates)
        zs.append((a, cols, m["update"], z))
    finite = np.concatenate([z[np.isfinite(z)] for *_, z in zs]) if zs else np.array([0.0])
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    for i, (_, cols, upd, z) in enumerate(zs, start=1):
        fig.add_trace(
            go.Heatmap(
                x=upd,
                y=[c.split("/", 1)[1] for c in cols],
                z=z,
                coloraxis="coloraxis",
                hovertemplate="update %{x}<br>%{y}<br>log10 grad norm %{z:.2f}<extra></extra>",
            ),
            row=i,
            col=1,
        )
    fig.update_layout(
        title="Per-layer gradient norm (log10 colour)",
        coloraxis=dict(colorscale="Viridis", cmin=lo, cmax=hi, colorbar=dict(title="log10")),
        height=200 + 260 * len(zs),
        **{k: v for k, v in LAYOUT.items() if k != "hovermode"},
    )
    fig.update_xaxes(title_text="optimizer update", row=len(zs), col=1)
    return fig, ""


OPT_ROWS = [
    ("m_norm", "‖m‖ (Adam first moment)", True),
    ("v_norm", "‖v‖ (Adam second moment)", True),
    ("m_spike_share", "m pollution share", False),
    ("v_spike_share", "v pollution share", False),
    ("update_rms", "update RMS", True),
    ("cos_update_grad", "cos(update, grad)", False),
]


def optimizer_state_figure(arms: list[Arm]) -> tuple[go.Figure | None, str]:
    """Adam m/v norms, the share of m/v that spikes contributed (pollution), update RMS/cos."""
    rows = [r for r in OPT_ROWS if any(_has(a, r[0]) for a in arms)]
    if not rows:
        return (
            None,
            "no optimizer-state probe columns (m_norm, v_norm, *_spike_share): chart omitted.",
        )
    fig = _stack([r[1] for r in rows], 0.04)
    style = Style(arms)
    for i, (col, _, log) in enumerate(rows, start=1):
        for a in arms:
            if _has(a, col):  # a column on a schedule: its rows only, so the line joins them
                m = thin(a.metrics[a.metrics[col].notna()], _keep(a))
                _arm_line(fig, style, a, i, m["update"], m[col])
        if log:
            fig.update_yaxes(type="log", row=i, col=1)
    mark_boundaries(fig, arms)
    fig.update_layout(title="Optimizer state and pollution", height=180 + 170 * len(rows), **LAYOUT)
    fig.update_xaxes(title_text="optimizer update", row=len(rows), col=1)
    return fig, ""


LOCKIN_ROWS = [
    ("top_token_share", "top-token share"),
    ("distinct_2", "distinct-2 ratio"),
    ("longest_run", "longest repeated run"),
    ("mean_entropy", "mean next-token entropy"),
    ("max_logit", "max logit"),
]


def _lockin_table(arm: Arm) -> pd.DataFrame:
    """samples.jsonl rows, else the lock-in probe's ``lockin/*`` metric columns (greedy
    aggregates written at each sampling update) when the samples file is missing."""
    if not arm.samples.empty and "update" in arm.samples:
        return arm.samples
    cols = [c for c in arm.metrics.columns if c.startswith("lockin/")]
    if not cols or "update" not in arm.metrics:
        return pd.DataFrame()
    t = arm.metrics[["update", *cols]].dropna(subset=cols, how="all")
    return t.rename(columns={c: c.split("/", 1)[1] for c in cols})


def lockin_figure(arms: list[Arm]) -> tuple[go.Figure | None, str]:
    """Lock-in metrics of the greedy samples (mean over sources) against the update sampled at."""
    tables = {a.label: _lockin_table(a) for a in arms}
    have = [a for a in arms if not tables[a.label].empty]
    if not have:
        return None, "no samples recorded: lock-in chart omitted."
    rows = [r for r in LOCKIN_ROWS if any(r[0] in tables[a.label] for a in have)]
    if not rows:
        return None, "samples carry no lock-in metrics: chart omitted."
    fig = _stack([r[1] for r in rows], 0.05)
    style = Style(arms)
    for a in have:
        s = tables[a.label]
        if "mode" in s and (s["mode"] == "greedy").any():
            s = s[s["mode"] == "greedy"]  # greedy text is where repetition lock-in shows first
        for i, (col, _) in enumerate(rows, start=1):
            if col in s:
                g = s.groupby("update")[col].mean().reset_index()
                _arm_line(fig, style, a, i, g["update"], g[col], mode="lines+markers")
    mark_boundaries(fig, arms)
    fig.update_layout(
        title="Repetition lock-in metrics (greedy samples, mean over sources)",
        height=180 + 160 * len(rows),
        **LAYOUT,
    )
    fig.update_xaxes(title_text="optimizer update", row=len(rows), col=1)
    return fig, ""
