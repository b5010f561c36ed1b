"""Plotly figures for the report: every arm on the same axes, one colour per arm name.

Training curves live here; the probes' figures are in ``probe_figures.py`` and the shared
styling (colours, boundaries, thinning) in ``style.py``.

Each ``*_figure(arms)`` returns ``(figure, note)``: the figure is None when the data it needs is
absent (e.g. no probe columns), and the note says why, so the page can show it instead.

    from andrea_diag.report.figures import loss_figure
    fig, note = loss_figure(arms)

Boundaries are drawn as one thin vertical shape per boundary named ``phase-boundary`` (the
tests count them); long series are thinned to at most ``MAX_POINTS`` per trace, always keeping
boundary and spike updates so no marked event disappears.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from andrea_diag.report.arms import Arm, final_loss, has_bandit, summary_row
from andrea_diag.report.probe_figures import (
    layer_heatmap_figure,
    lockin_figure,
    optimizer_state_figure,
)
from andrea_diag.report.style import (
    LAYOUT,
    SOURCE_COLORS,
    Style,
    _has,
    _keep,
    _spike_markers,
    mark_boundaries,
    source_names,
    thin,
)


def eval_figure(arms: list[Arm]) -> tuple[go.Figure | None, str]:
    """Held-out eval loss (uniform mixture, thick) and per source (thin), per arm."""
    if not any(_has(a, "eval_loss") for a in arms):
        return None, "no held-out evaluation in these runs (--eval-every 0, or an older run)."
    fig = go.Figure()
    style = Style(arms)
    for a in arms:
        if "eval_loss" not in a.metrics:
            continue
        ev = a.metrics[a.metrics["eval_loss"].notna()]
        fig.add_trace(go.Scatter(x=ev["update"], y=ev["eval_loss"], mode="lines+markers",
                                 name=f"{a.label}: mixture", line=style.line(a, width=2.5)))  # fmt: skip
        for c in [c for c in ev.columns if c.startswith("eval_loss_")]:
            fig.add_trace(go.Scatter(x=ev["update"], y=ev[c], name=f"{a.label}: {c[10:]}",
                                     line=style.line(a, width=0.8), opacity=0.6))  # fmt: skip
    mark_boundaries(fig, arms)
    fig.update_yaxes(title_text="held-out loss (nats/token)")
    fig.update_xaxes(title_text="optimizer update")
    fig.update_layout(title="Held-out evaluation: the same fixed sequences for every arm",
                      height=420, **LAYOUT)  # fmt: skip
    return fig, (
        "The mixture weighs the three sources equally, so it does not move with the bandit; "
        "arms are compared on it, not on the last training batches."
    )


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
        title="Loss per optimizer update ("
        + ("dotted lines: phase boundaries; " if any(has_bandit(a) for a in arms) else "")
        + "x: spikes)",
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


def loss_scale_figure(arms: list[Arm]) -> tuple[go.Figure | None, str]:
    """fp16's loss scale per update (log axis), with the skipped (not applied) updates marked."""
    if not any(_has(a, "loss_scale") for a in arms):
        return None, "no loss scaling (fp32 or bf16): every update's gradients were used as is."
    fig = go.Figure()
    style = Style(arms)
    skipped_total = 0
    for a in arms:
        m = a.metrics
        if "loss_scale" not in m:
            continue
        fig.add_trace(go.Scatter(x=m["update"], y=m["loss_scale"], name=a.label,
                                 line=style.line(a, width=1.5, shape="hv")))  # fmt: skip
        if "applied" in m:
            skipped = m[~m["applied"].fillna(True).astype(bool)]
            skipped_total += len(skipped)
            fig.add_trace(go.Scatter(x=skipped["update"], y=skipped["loss_scale"], mode="markers",
                                     name=f"{a.label}: skipped", marker=dict(symbol="x", size=10,
                                     color=style.of(a))))  # fmt: skip
    mark_boundaries(fig, arms)
    fig.update_yaxes(type="log", title_text="loss scale")
    fig.update_xaxes(title_text="optimizer update")
    fig.update_layout(title="fp16 loss scale (x: skipped updates)", height=360, **LAYOUT)
    return fig, f"{skipped_total} skipped (attempted, not applied) updates across arms."


def all_figures(arms: list[Arm]) -> list[tuple[str, go.Figure | None, str]]:
    """(section title, figure or None, note) in page order."""
    return [
        ("Held-out evaluation", *eval_figure(arms)),
        ("Training loss", *loss_figure(arms)),
        ("Gradient norm", *grad_norm_figure(arms)),
        ("Clip coefficient", *clip_coef_figure(arms)),
        ("Loss scale (fp16)", *loss_scale_figure(arms)),
        ("Per-layer gradient norm", *layer_heatmap_figure(arms)),
        ("Optimizer state and pollution", *optimizer_state_figure(arms)),
        ("Lock-in metrics", *lockin_figure(arms)),
        ("Source weights", *weights_figure(arms)),
        ("Capacity-fragility", *capacity_figure(arms)),
    ]
