"""The sweep page: where in (size, lr, max_norm) clipping starts to matter, from the data.

Written by ``andrea-diag sweep`` as ``sweep.html`` next to ``sweep.csv``; each cell links to
its own cascade report. Self-contained like every report (plotly.js inlined once), unless the
sweep ran with ``--plotly shared`` (one plotly.min.js for the folder: ``plotlyjs.py``).

A difference between arms is called only from at least ``MIN_PAIRS`` (6) paired seeds, when the
exact sign-flip test of the paired gaps gives p < 0.05 (``stats.py``); below that the page says
"insufficient seeds" and reports the gap without calling it. The "Seeds and intervals" section
gives every cell's rates and gaps with their tests and intervals. Every value is escaped after
formatting.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from andrea_diag.clip.modes import mode_color
from andrea_diag.config import VOCAB_SIZE
from andrea_diag.experiments.aggregate import arm_rates, gap_call, interval_findings, paired_gaps
from andrea_diag.probes.verdict import COLLAPSE_VERDICTS, LOCKED_VERDICTS
from andrea_diag.report.html import CSS, PLOT_CONFIG
from andrea_diag.report.page_file import write_page
from andrea_diag.report.plotlyjs import script_tag
from andrea_diag.report.safe import esc, figure_html, href, join
from andrea_diag.stats import MIN_PAIRS, insufficient, paired_test
from andrea_diag.tables import read_flag

MATTERS = 0.25  # nats: a final-loss gap this large between arms is called a difference
MAX_GPUS = 64  # GPUs named in the throughput line (a damaged sweep.json may list any number)


def compared_column(table: pd.DataFrame) -> pd.Series:
    """Per arm, the loss the sweep compares: held-out (``final_eval_loss``) where the run has
    it, else the final training loss of older runs."""
    if "final_eval_loss" not in table:
        return table["final_loss"]
    return table["final_eval_loss"].where(table["final_eval_loss"].notna(), table["final_loss"])


def compared_name(table: pd.DataFrame) -> str:
    has_eval = "final_eval_loss" in table and table["final_eval_loss"].notna().all()
    return "held-out loss" if has_eval else "final training loss"


def _by_precision(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with ``size`` as "tiny bf16" when the sweep mixed precisions: never pooled.
    Applied once, where a page section starts (twice would label "tiny bf16 bf16", and the
    rows would no longer match their own cell)."""
    if "precision" in table and table["precision"].nunique() > 1:
        return table.assign(size=table["size"] + " " + table["precision"])
    return table


def _agg(table: pd.DataFrame) -> pd.DataFrame:
    """Mean / min / max over seeds for each (size, lr, max_norm, clip) of a table already
    labelled :func:`_by_precision`."""
    keys = ["size", "lr", "max_norm", "clip"]
    table = table.assign(compared=compared_column(table))
    g = table.groupby(keys, sort=True)
    out = g.agg(
        final_loss=("compared", "mean"),
        final_lo=("compared", "min"),
        final_hi=("compared", "max"),
        min_loss=("min_loss", "max"),  # the worst seed's best loss: "never learned" needs all
        n_spikes=("n_spikes", "mean"),
        max_grad_norm=("max_grad_norm", "max"),
        seeds=("seed", "nunique"),
    )
    return out.reset_index()


def regime_figure(table: pd.DataFrame) -> go.Figure:
    """Per size: final loss and spike count against lr, one line per clip arm."""
    table = _by_precision(table)
    agg = _agg(table)
    sizes = list(dict.fromkeys(table["size"]))
    fig = make_subplots(
        rows=2, cols=len(sizes), shared_xaxes=True,
        subplot_titles=[f"{s}: {compared_name(table)}" for s in sizes] + [f"{s}: spikes" for s in sizes],
    )  # fmt: skip
    for j, size in enumerate(sizes, 1):
        for (clip, mn), d in agg[agg["size"] == size].groupby(["clip", "max_norm"]):
            name = clip if clip == "none" else f"{clip} {mn:g}"
            color = mode_color(clip)
            err = dict(type="data", symmetric=False, array=d["final_hi"] - d["final_loss"],
                       arrayminus=d["final_loss"] - d["final_lo"])  # fmt: skip
            fig.add_trace(go.Scatter(x=d["lr"], y=d["final_loss"], error_y=err, name=name,
                                     legendgroup=name, showlegend=j == 1, mode="lines+markers",
                                     line={"color": color}), row=1, col=j)  # fmt: skip
            fig.add_trace(go.Scatter(x=d["lr"], y=d["n_spikes"], name=name, legendgroup=name,
                                     showlegend=False, mode="lines+markers",
                                     line={"color": color, "dash": "dot"}), row=2, col=j)  # fmt: skip
        fig.add_hline(y=math.log(VOCAB_SIZE), line_dash="dash", line_color="#999", row=1, col=j)
    fig.update_xaxes(type="log", title_text="peak lr", row=2)
    fig.update_layout(height=560, margin={"t": 40}, legend_title_text="arm")
    return fig


def findings(table: pd.DataFrame) -> list[str]:
    """Sentences from the table: where the arms differ, and in which direction."""
    out = []
    if "status" in table:
        bad = table[table["status"].fillna("done") != "done"]
        for _, r in bad.iterrows():
            out.append(f"{r['cell']} / {r['clip']}: {r['status'].upper()} ({r.get('error')}); "
                       "it is left out of every comparison below.")  # fmt: skip
        table = table[table["status"].fillna("done") == "done"]
    what = compared_name(table)
    table = _by_precision(table)
    agg = _agg(table)
    for (size, lr, mn), d in agg.groupby(["size", "lr", "max_norm"]):
        by = d.set_index("clip")
        if "none" not in by.index:
            continue
        for clip in by.index.drop("none"):
            u, c = by.loc["none"], by.loc[clip]
            seeds = int(min(u["seeds"], c["seeds"]))
            where = f"{size} lr {lr:g} (max_norm {mn:g}, {seeds} seed{'s' * (seeds > 1)})"
            n_u, n_c = _num(u["n_spikes"], ".0f"), _num(c["n_spikes"], ".0f")
            spikes = f"spikes {n_u} unclipped vs {n_c} {clip}"
            cell = table[(table["size"] == size) & (table["lr"] == lr) & (table["max_norm"] == mn)]
            paired = cell.assign(v=compared_column(cell)).pivot_table("v", "seed", "clip")
            both = "none" in paired and clip in paired  # an arm with no finite loss has none
            diffs = (paired["none"] - paired[clip]).dropna().tolist() if both else []
            pair = (u["final_loss"], c["final_loss"], clip, what)
            out.append(f"{where}: {_pair_finding(f'{size} lr {lr:g}', pair, diffs)}; {spikes}.")
    # never learned: even the best loss stayed near uniform (a run that learned and then
    # collapsed back up has a low min_loss, and is not this)
    stalled = agg[agg["min_loss"] > 0.8 * math.log(VOCAB_SIZE)]
    if len(stalled):
        cells = ", ".join(f"{r.size} lr {r.lr:g} {r.clip}" for r in stalled.itertuples())
        out.append(
            f"never got below 0.8 ln {VOCAB_SIZE} = {0.8 * math.log(VOCAB_SIZE):.2f} "
            f"(never learned): {cells}."
        )
    locked = table[table["lockin"].isin(LOCKED_VERDICTS)]
    out.append(
        "locked in: " + ", ".join(f"{r.cell} {r.clip}" for r in locked.itertuples()) + "."
        if len(locked) else "no arm locked into repetition."
    )  # fmt: skip
    out.append(collapse_finding(table))
    return out


def _pair_finding(at: str, pair: tuple[float, float, str, str], diffs: list[float]) -> str:
    """What one clipped arm against ``none`` may be called: from ``MIN_PAIRS`` paired seeds
    the sign-flip test decides; below, the gap is reported (when above ``MATTERS``), never
    called."""
    u, c, clip, what = pair
    if not (math.isfinite(u) and math.isfinite(c)):  # a gap, or inf - inf: nothing to call
        pairs = insufficient({at: len(diffs)}, "a call")
        return (f"no finite {what} to compare ({_num(u, '.2f')} unclipped vs "
                f"{_num(c, '.2f')} {clip}); {pairs}")  # fmt: skip
    gap = u - c
    if len(diffs) < MIN_PAIRS:
        short = insufficient({at: len(diffs)}, "a call")
        if abs(gap) <= MATTERS:
            return f"gap {gap:+.2f} nats, within {MATTERS} ({u:.2f} vs {c:.2f}); {short}"
        side = "helped" if gap > 0 else "cost"
        run = "in this one run" if len(diffs) <= 1 else f"on average over {len(diffs)} seeds"
        return (f"{short} ({what} {u:.2f} unclipped vs {c:.2f} {clip}: clipping {side} "
                f"{abs(gap):.2f} nats {run}; a call needs seeds, --seed 0,1,2,3,4,5)")  # fmt: skip
    t = paired_test(diffs)
    row = {"pairs": t.n, "p_value": t.p, "gap": t.mean, "detectable_gap": t.detectable,
           "seeds_for_target": t.seeds_for_target}  # fmt: skip
    return (f"{gap_call(row, at)}: paired {what} gap {t.mean:+.3f} nats, 95% t "
            f"[{t.t.lo:+.3f}, {t.t.hi:+.3f}] (mean {u:.2f} unclipped vs {c:.2f} {clip})")  # fmt: skip


def _num(v: float, fmt: str) -> str:
    """A number of the table as text: a gap (a value sweep.csv lacks or holds as text) as "-",
    as the page shows every missing value, never "nan"."""
    return "-" if math.isnan(v) else format(v, fmt)


def collapsed(table: pd.DataFrame) -> pd.Series:
    """Per row: the arm collapsed (diverged, locked-in or non-finite). ``sweep.csv`` files
    written before the ``collapse`` column get it from the verdict, by the same definition."""
    derived = table.get("lockin", pd.Series(None, index=table.index)).isin(COLLAPSE_VERDICTS)
    if "collapse" not in table:
        return derived
    col = table["collapse"].map(read_flag)  # a gap (None), also a word other than true/false
    return col.where(col.notna(), derived).astype(bool)


def collapse_finding(table: pd.DataFrame) -> str:
    """'collapse: 12m lr 0.01 none (diverged), ...': each (size, lr, max_norm, clip) arm with a
    collapsed seed, its verdicts, and how many of its seeds collapsed when there are several."""
    hit = collapsed(table)
    several_mn = table["max_norm"].nunique() > 1 if "max_norm" in table else False
    parts = []
    keys = ["size", "lr", "max_norm", "clip"]
    for (size, lr, mn, clip), d in table.groupby(keys, sort=False):
        down = d[hit.loc[d.index]]
        if down.empty:
            continue
        name = f"{size} lr {lr:g} {clip}" + (f" max_norm {mn:g}" if several_mn else "")
        verdicts = ", ".join(dict.fromkeys(str(v) for v in down.get("lockin", [])))
        seeds = f"; {len(down)} of {len(d)} seeds" if len(d) > 1 else ""
        parts.append(f"{name} ({verdicts}{seeds})")
    if not parts:
        return "no arm collapsed (none diverged, locked in or went non-finite)."
    return "collapse: " + ", ".join(parts) + "."


def _throughput_note(tp: dict[str, Any] | None) -> str:
    """The sweep's aggregate speed (sweep.json's ``throughput``), one line, with how busy its
    GPUs were (``gpu_busy``) when the sweep read them."""
    if not isinstance(tp, dict) or not tp.get("updates_per_s"):
        return ""
    return (
        f"<p class='note'>throughput: {esc(tp['updates_per_s'], '.3g')} updates/s aggregate "
        f"({esc(tp.get('updates'))} updates in {esc(tp.get('wall_s'), '.1f')} s; executor "
        f"{esc(tp.get('executor'))}, --jobs {esc(tp.get('jobs'))}){_busy_note(tp)}</p>\n"
    )


def _pct(v: Any) -> bool:
    """A percentage: a number in [0, 100] (comparisons, not math.isfinite: a huge JSON integer
    overflows a float conversion; NaN compares false)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 100


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**53


def _busy_note(tp: dict[str, Any]) -> str:
    """'; a kernel ran on the GPU 96% of the time (NVML)', per GPU when there were several;
    '' when the sweep read none. sweep.json may be someone else's: a value that is not a
    percentage is left out, as a field of the wrong type is (runread.py)."""
    busy = tp.get("gpu_busy")
    if not isinstance(busy, dict) or not _pct(busy.get("pct_mean")):
        return ""
    devices = busy.get("devices") if isinstance(busy.get("devices"), dict) else {}
    per = [(i, d["pct_mean"]) for i, d in devices.items()
           if isinstance(d, dict) and _pct(d.get("pct_mean"))][:MAX_GPUS]  # fmt: skip
    by = "; by GPU (NVML index): " + ", ".join(f"{esc(i)} {esc(m, '.0f')}%" for i, m in per)
    n = busy.get("n_samples")
    samples = f", {esc(n)} samples" if _count(n) else ""
    return (f"; a kernel ran on the GPU {esc(busy['pct_mean'], '.0f')}% of the time (NVML"
            f"{samples}{by if per else ''})")  # fmt: skip


def intervals_section(table: pd.DataFrame) -> str:
    """Every cell's collapse and pollution-event rates and paired held-out gap, with intervals."""
    # an arm's loss may be inf (sweep.csv: "inf"): inf - inf is a NaN gap, which paired_gaps
    # leaves out by design, so numpy's warning about it would be noise on the console
    with np.errstate(invalid="ignore"):
        arms, gaps = arm_rates(table), paired_gaps(table)
    if gaps.empty:
        return ""
    lines = interval_findings(arms, gaps)
    return (
        "<h2>Seeds and intervals (95%)</h2>\n<p class='note'>gap: final held-out loss, "
        "unclipped minus clipped, paired by seed: exact sign-flip test (Monte Carlo above 16 "
        "pairs), BCa bootstrap and t intervals of the mean, called only from "
        f"{MIN_PAIRS} pairs; collapse rates: Fisher's exact test, Wilson intervals for display; "
        "detectable gap: 80% power, t-based; a pollution event: the spikes still held at least "
        "half of ‖v‖ at the end of the run.</p>\n<ul class='findings'>\n"
        + "\n".join(f"<li>{esc(x)}</li>" for x in lines) + "\n</ul>\n"
    )  # fmt: skip


def render_sweep(out: Path, table: pd.DataFrame, meta: dict[str, Any]) -> Path:
    """Write ``out/sweep.html``: findings, the regime chart, the table with report links."""
    fig = regime_figure(table)
    fig_html = figure_html(fig, "fig-regime", PLOT_CONFIG)
    cols = ["cell", "clip", "final_eval_loss", "final_loss", "min_loss", "max_grad_norm",
            "pct_clipped", "n_spikes", "spike_score_grad", "max_m_share", "recovery_m",
            "final_v_share", "lockin", "collapse", "status"]  # fmt: skip
    cols = [c for c in cols if c in table or c in ("cell", "clip")]  # older tables lack some
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = []
    for r in table.to_dict("records"):
        cells = []
        for c in cols:
            v = r.get(c)
            if c == "cell":
                cells.append(f"<td><a href='{href(v, 'report.html')}'>{esc(v)}</a></td>")
            elif isinstance(v, float):
                cells.append(f"<td class='num'>{'' if math.isnan(v) else esc(v, '.4g')}</td>")
            else:
                cells.append(f"<td>{esc('' if v is None else str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    title = (
        f"sweep: sizes {join(meta.get('sizes') or [])}; lr "
        f"{', '.join(esc(x, 'g') for x in meta.get('lrs') or [])}"
    )
    page = (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        f"<title>{title}</title>\n<style>{CSS}</style>\n"
        f"{script_tag(out / 'sweep.html', out if meta.get('plotly') == 'shared' else None)}\n"
        "</head>\n<body>\n"
        f"<h1>{title}</h1>\n"
        f"<p class='note'>command: {esc(meta.get('command', ''))}; "
        f"{esc(meta.get('steps'))} updates per arm, recipe {esc(meta.get('recipe'))}, "
        f"seeds {join(meta.get('seeds') or [])}</p>\n"
        + _throughput_note(meta.get("throughput")) +
        "<h2>Findings</h2>\n<ul class='findings'>\n"
        + "\n".join(f"<li>{esc(f)}</li>" for f in findings(table))
        + "\n</ul>\n" + intervals_section(table) + "<h2>Regime</h2>\n" + fig_html
        + "\n<h2>Every arm</h2>\n<table><tr>" + head + "</tr>\n" + "\n".join(body)
        + "</table>\n</body>\n</html>\n"
    )  # fmt: skip
    path = out / "sweep.html"
    write_page(path, page)
    return path
