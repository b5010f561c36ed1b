"""The ladder page: the two thresholds with their procedure, n, p-value and interval (or
"insufficient seeds", or "none ... with the smallest detectable gap"), how that compares with
the seeds' claim, then gap, collapse rate and pollution-event rate against model size.

Written by ``andrea-diag ladder`` (``commands/ladder.py``) as ``ladder.html`` beside
``ladder.json`` / ``ladder.csv`` and the ladder's ``sweep.html`` (every cell's report is linked
from there), from what ``experiments/ladder.py`` returns. plotly.js is shared with the folder's
other pages when the ladder ran with ``--plotly shared`` (its default). Every value is escaped
after formatting.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from andrea_diag.clip.modes import mode_color
from andrea_diag.report.html import CSS, PLOT_CONFIG
from andrea_diag.report.page_file import write_page
from andrea_diag.report.plotlyjs import script_tag
from andrea_diag.report.safe import esc, figure_html
from andrea_diag.stats import MIN_PAIRS, N_RESAMPLES, TARGET_GAP
from andrea_diag.tables import GROUP, interval_of

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
    value = row.get(f"{name}_rate", row.get(name))
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return interval_of(row, name).text(digits)


def _num(value: Any, spec: str) -> str:
    return "" if value is None or pd.isna(value) else format(value, spec)


HEAD = ["size", "params", "lr", "precision", "arm", "seeds", "collapse", "Fisher p",
        "pollution events", "events Fisher p", "pairs", "gap vs none (BCa)", "t interval", "sd", "sign-flip p",
        "Holm p", "detectable gap", f"seeds for {TARGET_GAP}", "harm per event (events)"]  # fmt: skip


def _cells(r: dict[str, Any]) -> list[str]:
    clipped = r["clip"] != "none"
    n_events = r.get("event_pairs")
    n_events = 0 if n_events is None or pd.isna(n_events) else int(n_events)
    t_iv = interval_of(r, "gap_t") if clipped and "gap_t_lo" in r else None
    pair = [
        _num(r.get("collapse_p"), ".2g"), _fmt(r, "event"), _num(r.get("event_p"), ".2g"),
        _num(r.get("pairs"), ".0f"),
        _fmt(r, "gap", 3),
        "" if t_iv is None or math.isnan(t_iv.lo) else f"[{t_iv.lo:.3f}, {t_iv.hi:.3f}]",
        _num(r.get("sd"), ".3f"), _num(r.get("p_value"), ".2g"), _num(r.get("p_holm"), ".2g"),
        _num(r.get("detectable_gap"), ".3f"), _num(r.get("seeds_for_target"), ".0f"),
        f"{_fmt(r, 'harm_per_event', 3)} ({n_events})",
    ]  # fmt: skip
    if not clipped:  # the pair's numbers sit on the clipped arm's row
        pair = ["", _fmt(r, "event"), *[""] * 10]
    return [r["size"], f"{r['n_params'] / 1e6:.1f}M", f"{r['lr']:g}", r["precision"], r["clip"],
            str(r["seeds"]), _fmt(r, "collapse"), *pair]  # fmt: skip


def _table(rows: pd.DataFrame) -> str:
    body = ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in _cells(r)) + "</tr>"
            for r in rows.to_dict("records")]  # fmt: skip
    return (
        "<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in HEAD) + "</tr>\n"
        + "\n".join(body) + "</table>\n"
    )  # fmt: skip


METHOD = (
    "Harm: per rung, the paired held-out gaps (unclipped minus clipped final loss, one per "
    "seed) get an exact sign-flip permutation test (all 2^n sign patterns up to n = 16, "
    f"{N_RESAMPLES:,} fixed-seed random ones above), a 95% t-interval and a 95% BCa bootstrap "
    "interval. Collapse: per rung, the two arms' collapse counts get Fisher's exact test "
    "(Wilson intervals are shown, their overlap is not the test), and so do the pollution-event "
    "counts (a rung's own test, not a threshold). Several rungs: a "
    "fixed-sequence test from the largest rung down, each rung at two-sided alpha 0.05 and only "
    "while every larger rung was rejected on the claimed side; the threshold is the smallest "
    "rung of that run (family-wise error 0.05). The table's Holm p is Holm's adjustment across "
    "rungs, for reading one rung on its own. No threshold from fewer than "
    f"{MIN_PAIRS} pairs at a rung: the smallest n at which an exact two-sided sign test can "
    "reach p < 0.05 (2/64 = 0.031). Power: the smallest mean gap detected at 80% power, "
    "t-based, (t(0.975, n-1) + t(0.80, n-1)) * sd / sqrt(n) from the observed sd, and the "
    f"seeds a gap of {TARGET_GAP} nats would need."
)


def _statements(result: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(threshold sentences, seeds'-claim sentences) from ``ladder.json``."""
    found = [t[k] for t in result["thresholds"] for k in ("harm_text", "collapse_text")]
    claims = [t["claim_text"] for t in result["thresholds"] if t.get("claim_text")]
    if not found:
        found = ["no finished pair of arms yet: no threshold can be stated"]
    return found, claims


def _items(lines: list[str]) -> str:
    return "<ul class='findings'>\n" + "\n".join(
        f"<li>{esc(s)}</li>" for s in lines
    ) + "\n</ul>\n"  # fmt: skip


def render_ladder(out: Path, rows: pd.DataFrame, result: dict[str, Any]) -> Path:
    """Write ``out/ladder.html`` from ``ladder.csv``'s rows and ``ladder.json``'s content."""
    page = out / "ladder.html"
    shared = out if result.get("plotly") == "shared" else None
    fig_html = "<p class='note'>no finished arm yet</p>"
    if len(rows):
        fig_html = figure_html(ladder_figure(rows), "fig-ladder", PLOT_CONFIG)
    statements, claims = _statements(result)
    title = f"capacity ladder: {', '.join(result['rungs'])}"
    lrs = ", ".join(f"{x:g}" for x in result["lrs"])
    seeds = ", ".join(map(str, result["seeds"]))
    html_text = (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n"
        f"{script_tag(page, shared)}\n</head>\n<body>\n<h1>{esc(title)}</h1>\n"
        f"<p class='note'>command: {esc(result.get('command', ''))}; "
        f"{esc(result.get('steps'))} updates per arm, recipe {esc(result.get('recipe'))}, "
        f"lr {esc(lrs)}, seeds {esc(seeds)}; {esc(result.get('finished_arms'))} of "
        f"{esc(result.get('arms_in_table'))} arms finished. Every cell: "
        "<a href='sweep.html'>sweep.html</a>.</p>\n"
        "<h2>Thresholds</h2>\n" + _items(statements)
        + f"<p class='note'>method: {esc(METHOD)}</p>\n"
        "<h2>What this says about the seeds' claim</h2>\n" + _items(claims)
        + "<h2>Against size</h2>\n" + fig_html
        + "\n<h2>By size and arm</h2>\n" + _table(rows) + "</body>\n</html>\n"
    )  # fmt: skip
    write_page(page, html_text)
    return page
