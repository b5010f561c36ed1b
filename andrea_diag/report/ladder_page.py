"""The ladder page: the two thresholds, then gap, collapse rate and pollution-event rate
against model size, each with its 95% interval.

Written by ``andrea-diag ladder`` as ``ladder.html`` beside ``ladder.json`` / ``ladder.csv``
and the ladder's ``sweep.html`` (every cell's report is linked from there). plotly.js is shared
with the folder's other pages when the ladder ran with ``--plotly shared`` (its default).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from andrea_diag.clip.modes import mode_color
from andrea_diag.experiments.aggregate import interval_of
from andrea_diag.experiments.ladder import GROUP, by_size
from andrea_diag.report.html import CSS, PLOT_CONFIG
from andrea_diag.report.plotlyjs import script_tag
from andrea_diag.report.safe import esc, figure_html, join
from andrea_diag.rundir import atomic_write_text

PANELS = [
    ("gap", "held-out gap, none minus clipped (nats)"),
    ("collapse", "collapse rate"),
    ("event", "pollution-event rate (spikes hold ≥ half of ‖v‖ at the end)"),
]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash"]


def _label(row: dict[str, Any], clip: str) -> str:
    prec = "" if row["precision"] == "fp32" else f" {row['precision']}"
    return f"{clip} lr {row['lr']:g}{prec}"


def ladder_figure(rows: pd.DataFrame) -> go.Figure:
    """One panel per measure, x = size in increasing parameter count, one line per arm (and
    lr / precision), error bars = the 95% interval."""
    fig = make_subplots(rows=len(PANELS), cols=1, shared_xaxes=True,
                        subplot_titles=[t for _, t in PANELS], vertical_spacing=0.08)  # fmt: skip
    sizes = list(dict.fromkeys(rows.sort_values("rung")["size"]))
    for j, (key, d) in enumerate(rows.groupby(GROUP, sort=True)):
        head = dict(zip(GROUP, key, strict=True))
        dash = DASHES[j % len(DASHES)]
        for clip, a in d.groupby("clip", sort=False):
            a = a.sort_values("rung")
            for i, (name, _) in enumerate(PANELS, 1):
                if name == "gap" and (clip == "none" or "gap" not in a):
                    continue  # the gap is a pair: drawn on the clipped arm's line
                iv = [interval_of(r, name) for r in a.to_dict("records")]
                y = [v.estimate for v in iv]
                err = dict(type="data", symmetric=False,
                           array=[v.hi - v.estimate for v in iv],
                           arrayminus=[v.estimate - v.lo for v in iv])  # fmt: skip
                label = _label(head, clip)
                fig.add_trace(
                    go.Scatter(x=a["size"], y=y, error_y=err, name=label, legendgroup=label,
                               showlegend=i == 2, mode="lines+markers",
                               line={"color": mode_color(clip), "dash": dash}),
                    row=i, col=1,
                )  # fmt: skip
    fig.add_hline(y=0, line_dash="dot", line_color="#999", row=1, col=1)
    fig.update_xaxes(categoryorder="array", categoryarray=sizes)
    fig.update_xaxes(title_text="model size (increasing parameter count)", row=len(PANELS))
    fig.update_yaxes(range=[-0.05, 1.05], row=2)
    fig.update_yaxes(range=[-0.05, 1.05], row=3)
    fig.update_layout(height=900, margin={"t": 40}, legend_title_text="arm")
    return fig


def _fmt(row: dict[str, Any], name: str, digits: int = 2) -> str:
    if name not in row and f"{name}_rate" not in row:
        return ""
    value = row.get(f"{name}_rate", row.get(name))
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return interval_of(row, name).text(digits)


def _table(rows: pd.DataFrame) -> str:
    head = ["size", "params", "lr", "precision", "arm", "seeds", "collapse", "pollution events",
            "gap vs none", "harm per event (events)"]  # fmt: skip
    body = []
    for r in rows.to_dict("records"):
        n_events = r.get("event_pairs")
        n_events = 0 if n_events is None or math.isnan(n_events) else int(n_events)
        events = f"{_fmt(r, 'harm_per_event', 3)} ({n_events})"
        cells = [r["size"], f"{r['n_params'] / 1e6:.1f}M", f"{r['lr']:g}", r["precision"],
                 r["clip"], str(r["seeds"]), _fmt(r, "collapse"), _fmt(r, "event"),
                 _fmt(r, "gap", 3), events if r["clip"] != "none" else ""]  # fmt: skip
        body.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    return (
        "<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>\n"
        + "\n".join(body) + "</table>\n"
    )  # fmt: skip


def render_ladder(out: Path, table: pd.DataFrame, result: dict[str, Any]) -> Path:
    """Write ``out/ladder.html`` from the sweep table and ``ladder.json``'s content."""
    rows = by_size(table, result["rungs"])
    page = out / "ladder.html"
    shared = out if result.get("plotly") == "shared" else None
    fig_html = "<p class='note'>no finished arm yet</p>"
    if len(rows):
        fig_html = figure_html(ladder_figure(rows), "fig-ladder", PLOT_CONFIG)
    statements = [t[k] for t in result["thresholds"] for k in ("harm_text", "collapse_text")]
    if not statements:
        statements = ["no finished pair of arms yet: no threshold can be stated"]
    title = f"capacity ladder: {join(result['rungs'])}"
    lrs = ", ".join(esc(x, "g") for x in result["lrs"])
    seeds = join(result["seeds"])
    html_text = (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        f"<title>{title}</title>\n<style>{CSS}</style>\n"
        f"{script_tag(page, shared)}\n</head>\n<body>\n<h1>{title}</h1>\n"
        f"<p class='note'>command: {esc(result.get('command', ''))}; "
        f"{esc(result.get('steps'))} updates per arm, recipe {esc(result.get('recipe'))}, "
        f"lr {lrs}, seeds {seeds}; {esc(result.get('finished_arms'))} of "
        f"{esc(result.get('arms_in_table'))} arms finished. "
        "Every cell: <a href='sweep.html'>sweep.html</a>.</p>\n"
        "<h2>Thresholds</h2>\n<p class='note'>harm: the smallest size whose paired held-out "
        "gap (unclipped minus clipped) has a 95% bootstrap interval above 0. collapse: the "
        "smallest size whose unclipped collapse rate exceeds the clipped one with "
        "non-overlapping 95% Wilson intervals.</p>\n<ul class='findings'>\n"
        + "\n".join(f"<li>{esc(s)}</li>" for s in statements)
        + "\n</ul>\n<h2>Against size</h2>\n" + fig_html
        + "\n<h2>By size and arm</h2>\n" + _table(rows) + "</body>\n</html>\n"
    )  # fmt: skip
    atomic_write_text(page, html_text)
    return page
