"""Plotly figures for the report: every arm on the same axes, one colour per arm name.

Each ``*_figure(arms)`` returns ``(figure, note)``: the figure is None when the data it needs is
absent (e.g. no probe columns), and the note says why, so the page can show it instead.

    from andrea_diag.report.figures import loss_figure
    fig, note = loss_figure(arms)

Boundaries are drawn as one thin vertical shape per boundary named ``phase-boundary`` (the
tests count them); long series are thinned to at most ``MAX_POINTS`` per trace, always keeping
boundary and spike updates so no marked event disappears.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from andrea_diag.config import SOURCE_NAMES
from andrea_diag.report.findings import Arm, boundaries, final_loss, summary_row

MAX_POINTS = 2000
# Colour by arm name, so "none" has the same colour in every report and at every size.
PALETTE = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
PREFERRED = {"none": PALETTE[0], "global": PALETTE[1], "per-tensor": PALETTE[2]}
DASHES = ["solid", "dash", "dot", "dashdot"]  # one per model size, when sizes are mixed
SOURCE_COLORS = {"repo-docs": "#8c564b", "gutenberg": "#2ca02c", "hermes3-general": "#9467bd"}
LAYOUT = dict(template="plotly_white", hovermode="x unified", margin=dict(l=60, r=20, t=50, b=40))
BOUNDARY_SHAPE = "phase-boundary"


class Style:
    """Colour per arm name, dash per size: consistent across every figure of one report."""

    def __init__(self, arms: list[Arm]) -> None:
        names = list(dict.fromkeys(a.arm for a in arms))
        free = [c for c in PALETTE if c not in PREFERRED.values()] + PALETTE
        self.color: dict[str, str] = {}
        for n in names:
            self.color[n] = PREFERRED.get(n) or free.pop(0)
        sizes = list(dict.fromkeys(a.size for a in arms))
        self.dash = {s: DASHES[i % len(DASHES)] for i, s in enumerate(sizes)}

    def line(self, arm: Arm, **kw: object) -> dict:
        return dict(color=self.color[arm.arm], dash=self.dash[arm.size], **kw)


def thin(
    df: pd.DataFrame, keep: set[int] | None = None, max_points: int = MAX_POINTS
) -> pd.DataFrame:
    """Every k-th row plus the rows in ``keep`` (boundary/spike updates), at most ~max_points."""
    if len(df) <= max_points or "update" not in df:
        return df
    stride = math.ceil(len(df) / max_points)
    mask = np.zeros(len(df), dtype=bool)
    mask[::stride] = True
    mask[-1] = True
    if keep:
        mask |= df["update"].isin(keep).to_numpy()
    return df[mask]


def _keep(arm: Arm) -> set[int]:
    ev = set(int(u) for u in arm.events["update"]) if "update" in arm.events else set()
    return ev | set(boundaries(arm.metrics))


def all_boundaries(arms: list[Arm]) -> list[int]:
    """Union over arms (paired arms share one schedule, so this is usually one arm's list)."""
    return sorted(set().union(*(boundaries(a.metrics) for a in arms))) if arms else []


def mark_boundaries(fig: go.Figure, arms: list[Arm]) -> None:
    """One dotted vertical line per phase boundary, spanning every subplot row.

    The shapes are set in one layout update: ``fig.add_shape`` re-validates every existing
    shape on each call, which made a 1,200-update report take tens of seconds."""
    line = dict(color="rgba(120,120,120,0.45)", width=1, dash="dot")
    shapes = [
        dict(
            type="line",
            name=BOUNDARY_SHAPE,
            xref="x",
            yref="paper",
            x0=b - 0.5,  # between the last update of a phase and the first of the next
            x1=b - 0.5,
            y0=0,
            y1=1,
            line=line,
            layer="below",
        )
        for b in all_boundaries(arms)
    ]
    fig.update_layout(shapes=list(fig.layout.shapes) + shapes)


def _has(arm: Arm, col: str) -> bool:
    return col in arm.metrics and arm.metrics[col].notna().any()


def _spike_markers(
    fig: go.Figure, arm: Arm, style: Style, metric: str, row: int | None = None
) -> None:
    ev = arm.events
    if ev.empty or "metric" not in ev:
        return
    sel = ev[ev["metric"] == metric]
    if sel.empty:
        return
    causes = sel["cause"].astype(str) if "cause" in sel else pd.Series("?", index=sel.index)
    trace = go.Scatter(
        x=sel["update"],
        y=sel["value"],
        mode="markers",
        name=f"{arm.label} {metric} spikes",
        marker=dict(symbol="x", size=10, color=style.color[arm.arm], line=dict(width=1)),
        text=[f"update {int(u)}: {c}" for u, c in zip(sel["update"], causes, strict=True)],
        hovertemplate="%{text}<extra></extra>",
    )
    if row is None:
        fig.add_trace(trace)
    else:
        fig.add_trace(trace, row=row, col=1)


def source_names(arms: list[Arm]) -> list[str]:
    """Source names from the w_<source> columns (SOURCE_NAMES when none). Not from loss_*:
    the spike probe also writes ``loss_z``, which is not a source."""
    names = dict.fromkeys(c[2:] for a in arms for c in a.metrics.columns if c.startswith("w_"))
    return list(names) or list(SOURCE_NAMES)


def loss_figure(arms: list[Arm]) -> tuple[go.Figure | None, str]:
    """Total loss (row 1) and per-source loss (one row per source), spikes marked."""
    if not any(_has(a, "loss") for a in arms):
        return None, "no loss column in any run."
    sources = [s for s in source_names(arms) if any(_has(a, f"loss_{s}") for a in arms)]
    rows = 1 + len(sources)
    fig = make_subplots(
        rows=rows,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.04,
        subplot_titles=["loss (all sources)"] + [f"loss on {s}" for s in sources],
    )
    style = Style(arms)
    for a in arms:
        m = thin(a.metrics, _keep(a))
        if "loss" in m:
            fig.add_trace(
                go.Scatter(
                    x=m["update"],
                    y=m["loss"],
                    name=a.label,
                    legendgroup=a.label,
                    line=style.line(a, width=1.5),
                ),
                row=1,
                col=1,
            )
        _spike_markers(fig, a, style, "loss", row=1)
        for i, s in enumerate(sources, start=2):
            col = f"loss_{s}"
            if col in m:
                d = m[["update", col]].dropna()  # absent sources leave NaN: draw only present ones
                fig.add_trace(
                    go.Scatter(
                        x=d["update"],
                        y=d[col],
                        name=f"{a.label} {s}",
                        legendgroup=a.label,
                        showlegend=False,
                        line=style.line(a, width=1),
                    ),
                    row=i,
                    col=1,
                )
    mark_boundaries(fig, arms)
    fig.update_layout(
        title="Loss per optimizer update (dotted lines: phase boundaries; x: spikes)",
        height=260 + 170 * rows,
        **LAYOUT,
    )
    fig.update_xaxes(title_text="optimizer update", row=rows, col=1)
    return fig, ""


def grad_norm_figure(arms: list[Arm]) -> tuple[go.Figure | None, str]:
    """Pre-clip global grad norm on a log axis, with each clipping arm's max_norm line."""
    if not any(_has(a, "grad_norm") for a in arms):
        return None, "no grad_norm column in any run."
    fig = go.Figure()
    style = Style(arms)
    for a in arms:
        m = thin(a.metrics, _keep(a))
        if "grad_norm" in m:
            fig.add_trace(
                go.Scatter(
                    x=m["update"], y=m["grad_norm"], name=a.label, line=style.line(a, width=1.2)
                )
            )
        _spike_markers(fig, a, style, "grad_norm")
    for mn in sorted({float(a.config.get("max_norm", 1.0)) for a in arms if a.clipped}):
        fig.add_hline(
            y=mn,
            line=dict(color="black", width=1.5, dash="dash"),
            annotation_text=f"max_norm {mn:g}",
        )
    mark_boundaries(fig, arms)
    fig.update_yaxes(type="log", title_text="pre-clip grad norm")
    fig.update_xaxes(title_text="optimizer update")
    fig.update_layout(
        title="Global gradient norm before clipping (log scale)", height=420, **LAYOUT
    )
    return fig, ""


def clip_coef_figure(arms: list[Arm]) -> tuple[go.Figure | None, str]:
    if not any(_has(a, "clip_coef") for a in arms):
        return None, "no clip_coef column in any run."
    fig = go.Figure()
    style = Style(arms)
    for a in arms:
        if _has(a, "clip_coef"):
            m = thin(a.metrics, _keep(a))
            fig.add_trace(
                go.Scatter(
                    x=m["update"], y=m["clip_coef"], name=a.label, line=style.line(a, width=1.2)
                )
            )
    mark_boundaries(fig, arms)
    fig.update_yaxes(title_text="clip coefficient (1 = not clipped)")
    fig.update_xaxes(title_text="optimizer update")
    fig.update_layout(title="Clip coefficient min(1, max_norm / norm)", height=320, **LAYOUT)
    return fig, ""


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


def layer_heatmap_figure(arms: list[Arm]) -> tuple[go.Figure | None, str]:
    """Per-layer grad norm (update x layer group), log10 colour, one row per arm, shared scale."""
    with_cols = [a for a in arms if any(c.startswith("layer_gn/") for c in a.metrics.columns)]
    if not with_cols:
        return None, "no per-layer grad norms (layer_gn/* columns) recorded: heatmap omitted."
    fig = make_subplots(
        rows=len(with_cols),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=[a.label for a in with_cols],
    )
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
    fig = make_subplots(
        rows=len(rows),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.04,
        subplot_titles=[r[1] for r in rows],
    )
    style = Style(arms)
    for i, (col, _, log) in enumerate(rows, start=1):
        for a in arms:
            if _has(a, col):
                m = thin(a.metrics, _keep(a))
                fig.add_trace(
                    go.Scatter(
                        x=m["update"],
                        y=m[col],
                        name=a.label,
                        legendgroup=a.label,
                        showlegend=i == 1,
                        line=style.line(a, width=1.2),
                    ),
                    row=i,
                    col=1,
                )
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
    fig = make_subplots(
        rows=len(rows),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.05,
        subplot_titles=[r[1] for r in rows],
    )
    style = Style(arms)
    for a in have:
        s = tables[a.label]
        if "mode" in s and (s["mode"] == "greedy").any():
            s = s[s["mode"] == "greedy"]  # greedy text is where repetition lock-in shows first
        for i, (col, _) in enumerate(rows, start=1):
            if col in s:
                g = s.groupby("update")[col].mean().reset_index()
                fig.add_trace(
                    go.Scatter(
                        x=g["update"],
                        y=g[col],
                        mode="lines+markers",
                        name=a.label,
                        legendgroup=a.label,
                        showlegend=i == 1,
                        line=style.line(a, width=1.2),
                    ),
                    row=i,
                    col=1,
                )
    mark_boundaries(fig, arms)
    fig.update_layout(
        title="Repetition lock-in metrics (greedy samples, mean over sources)",
        height=180 + 160 * len(rows),
        **LAYOUT,
    )
    fig.update_xaxes(title_text="optimizer update", row=len(rows), col=1)
    return fig, ""


def weights_figure(arms: list[Arm]) -> tuple[go.Figure | None, str]:
    """Bandit source weights as stacked areas; one row when every arm shares the schedule."""
    have = [a for a in arms if any(c.startswith("w_") for c in a.metrics.columns)]
    if not have:
        return None, "no source-weight (w_*) columns: chart omitted."
    first = have[0].metrics.filter(like="w_").reset_index(drop=True)
    same = all(a.metrics.filter(like="w_").reset_index(drop=True).equals(first) for a in have)
    shown = have[:1] if same else have
    titles = ["all arms (one shared schedule)"] if same else [a.label for a in shown]
    fig = make_subplots(
        rows=len(shown), cols=1, shared_xaxes=True, vertical_spacing=0.06, subplot_titles=titles
    )
    for i, a in enumerate(shown, start=1):
        m = thin(a.metrics, _keep(a))
        for col in sorted(c for c in m.columns if c.startswith("w_")):
            src = col[2:]
            fig.add_trace(
                go.Scatter(
                    x=m["update"],
                    y=m[col],
                    name=src,
                    legendgroup=src,
                    showlegend=i == 1,
                    stackgroup=f"w{i}",
                    line=dict(width=0.5, color=SOURCE_COLORS.get(src)),
                ),
                row=i,
                col=1,
            )
    mark_boundaries(fig, arms)
    fig.update_layout(
        title="Bandit source weights per update", height=160 + 220 * len(shown), **LAYOUT
    )
    fig.update_xaxes(title_text="optimizer update", row=len(shown), col=1)
    return fig, ""


def capacity_figure(arms: list[Arm]) -> tuple[go.Figure | None, str]:
    """Capacity-fragility view: final loss / spikes / max grad norm per size x arm."""
    sizes = list(dict.fromkeys(a.size for a in arms))
    if len(sizes) < 2:
        return (
            None,
            f"one model size only ({sizes[0] if sizes else '?'}): capacity-fragility view needs two.",
        )
    fig = make_subplots(rows=1, cols=3, subplot_titles=["final loss", "spikes", "max grad norm"])
    style = Style(arms)
    for name in dict.fromkeys(a.arm for a in arms):
        group = [a for a in arms if a.arm == name]
        rows = [summary_row(a) for a in group]
        x = [a.size for a in group]
        for j, vals in enumerate(
            (
                [final_loss(a) for a in group],
                [r["spikes"] for r in rows],
                [r["max grad norm"] for r in rows],
            ),
            start=1,
        ):
            fig.add_trace(
                go.Bar(
                    x=x,
                    y=vals,
                    name=name,
                    legendgroup=name,
                    showlegend=j == 1,
                    marker_color=style.color[name],
                ),
                row=1,
                col=j,
            )
    fig.update_layout(
        title="Capacity-fragility: the same arms at each model size",
        barmode="group",
        height=380,
        **LAYOUT,
    )
    return fig, ""


def all_figures(arms: list[Arm]) -> list[tuple[str, go.Figure | None, str]]:
    """(section title, figure or None, note) in page order."""
    return [
        ("Loss", *loss_figure(arms)),
        ("Gradient norm", *grad_norm_figure(arms)),
        ("Clip coefficient", *clip_coef_figure(arms)),
        ("Per-layer gradient norm", *layer_heatmap_figure(arms)),
        ("Optimizer state and pollution", *optimizer_state_figure(arms)),
        ("Lock-in metrics", *lockin_figure(arms)),
        ("Source weights", *weights_figure(arms)),
        ("Capacity-fragility", *capacity_figure(arms)),
    ]
