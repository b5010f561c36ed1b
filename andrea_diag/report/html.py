"""Assemble one self-contained HTML report from run directories (no network needed to view it).

    from andrea_diag.report import render_report, render_cascade
    render_report([Path("out/none"), Path("out/global")], Path("out/report.html"))
    render_cascade(Path("out"))          # reads out/cascade.json, writes out/report.html

The plotly.js bundle is inlined once in <head> (or, for a page inside a published sweep, linked
from one shared copy: ``plotlyjs.py``); every figure div is written without it, and MathJax is
off, so the page opens from file:// on an offline machine.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from andrea_diag.errors import UserError
from andrea_diag.record import load_run, read_cascade_meta
from andrea_diag.report.arm_comparison import comparison_rows
from andrea_diag.report.arms import Arm, fmt, has_bandit, summary_row
from andrea_diag.report.banner import CSS as BANNER_CSS
from andrea_diag.report.banner import NEVER_STARTED, ArmStatus, arm_status, banner_html
from andrea_diag.report.figures import all_figures
from andrea_diag.report.findings import all_findings
from andrea_diag.report.headline import headline
from andrea_diag.report.images import figure_slug, write_images
from andrea_diag.report.page_file import write_page
from andrea_diag.report.plotlyjs import PLOT_CONFIG, script_tag
from andrea_diag.report.safe import Html, esc, figure_html, script_json
from andrea_diag.report.style import Style
from andrea_diag.rundir import child

MAX_SAMPLE_CHARS = 400  # per cell; long generations make the table unreadable and the file big

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;max-width:1400px;color:#222}
h1{font-size:1.5em} h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;font-size:0.9em} td,th{border:1px solid #ddd;padding:4px 8px;vertical-align:top}
th{background:#f5f5f5;text-align:left} .num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#777;font-style:italic} .gen{color:#b00;font-weight:bold}
.sample{font-family:ui-monospace,monospace;white-space:pre-wrap;max-width:520px;font-size:0.85em}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}
ul.findings li{margin:3px 0}
"""


def _label_arms(runs: list[dict[str, Any]]) -> list[Arm]:
    """Arm labels: the arm name, prefixed by size when sizes are mixed; arms whose labels
    clash (two cascades' ``none``, two monitor runs) are prefixed by their run's folder name
    (``cascade-tiny-a/none``), lengthened by parent folders until every label is unique."""
    arms = [Arm.from_run(r) for r in runs]
    if len({a.size for a in arms}) > 1:
        for a in arms:
            a.label = f"{a.size}/{a.arm}"
    base = [a.label for a in arms]
    clash = {b for b in base if base.count(b) > 1}
    for depth in range(1, 1 + max((len(Path(a.dir).parts) for a in arms), default=0)):
        labels = [
            f"{_run_folder(a, depth)}/{b}" if b in clash else b
            for a, b in zip(arms, base, strict=True)
        ]
        if len(set(labels)) == len(labels):
            break
    else:  # the same directory twice: number them
        labels = [f"{b} #{i + 1}" if b in clash else b for i, b in enumerate(base)]
    for a, label in zip(arms, labels, strict=True):
        a.label = label
    return arms


def _run_folder(arm: Arm, depth: int) -> str:
    """The last ``depth`` folder names of the arm's run: a cascade arm's (``c/none``) is its
    cascade's, a lone run's (a monitor run) its own."""
    parts = Path(arm.dir).parts
    if len(parts) > 1 and parts[-1] == arm.arm:
        parts = parts[:-1]
    return "/".join(parts[-depth:]) or "?"


def _header(arms: list[Arm]) -> str:
    rows = []
    for a in arms:
        c, e = a.config, a.env
        eb = c.get("effective_batch") or {}
        mad = f"{eb.get('m', c.get('micro_batch'))}×{eb.get('A', c.get('accum'))}×{eb.get('D', 1)}"
        n_params = (c.get("model_config") or {}).get("n_params")
        device = e.get("gpu") or f"CPU ({e.get('cpu_threads', '?')} threads)"
        commit = (e.get("git_commit") or "-")[:12]
        clip = c.get("clip", "?")
        rows.append(
            [
                a.label,
                f"{a.size} ({fmt(n_params)} params)" if n_params else a.size,
                c.get("recipe", "-"),
                f"{clip}" + (f" (max_norm {fmt(c.get('max_norm'))})" if clip != "none" else ""),
                fmt(c.get("lr")),
                fmt(c.get("steps")),
                f"{mad} = {fmt(eb.get('examples'))}" if eb else mad,
                fmt(c.get("seq_len")),
                fmt(c.get("seed")),
                device,
                f"torch {e.get('torch', '?')}" + (f", CUDA {e['cuda']}" if e.get("cuda") else ""),
                commit,
            ]
        )
    head = [
        "arm",
        "size",
        "recipe",
        "clip",
        "lr",
        "updates",
        "m×A×D",
        "seq len",
        "seed",
        "device",
        "versions",
        "git commit",
    ]
    return _table(head, rows)


def _data_section(arms: list[Arm]) -> str:
    """Sources per arm with their origin, flagging generated data in red: readers must know."""
    seen: dict[str, dict[str, Any]] = {}
    for a in arms:
        for name, src in (a.data.get("sources", a.data) or {}).items():
            if isinstance(src, dict) and "generated" in src:
                seen.setdefault(name, src)
    if not seen and not any(has_bandit(a) for a in arms):
        return (  # SpikeMonitor / a framework callback: the data is the user's loop's own
            "<p class='note'>a run of your own training loop: its data is not recorded here "
            "(the bandit's sources belong to andrea-diag's own trainer).</p>"
        )
    if not seen:
        return (
            "<p class='note'>no data.json: the sources' origin (generated or real) is unknown.</p>"
        )
    rows = []
    for name, s in seen.items():
        text = "token ids" if s.get("kind") == "token-ids" else "real text"  # data/token_ids.py
        kind = Html("<span class='gen'>GENERATED</span>") if s.get("generated") else text
        sha = s.get("sha256")
        rows.append(
            [name, kind, s.get("origin", "-"), s.get("n_bytes"), s.get("n_tokens"),
             sha[:16] if isinstance(sha, str) else "-"]
        )  # fmt: skip
    return _table(["source", "kind", "origin", "bytes", "tokens", "sha256"], rows)


def _table(head: list[str], rows: list[list[Any]]) -> str:
    """A table; every cell is escaped after formatting (safe.esc) unless it is built markup."""

    def cell(v: Any) -> str:
        cls = " class='num'" if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
        return f"<td{cls}>{esc(v)}</td>"

    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "\n".join("<tr>" + "".join(cell(v) for v in r) + "</tr>" for r in rows)
    return f"<table>\n<tr>{th}</tr>\n{body}\n</table>"


def _summary_table(arms: list[Arm], style: Style) -> str:
    rows = [summary_row(a) for a in arms]
    head = list(rows[0].keys())
    out = []
    for a, r in zip(arms, rows, strict=True):
        # the colour comes from the palette or a clip mode's registration, never the run dir
        sw = Html(f"<span class='swatch' style='background:{esc(style.of(a))}'></span>")
        out.append([Html(sw + esc(a.label)), *[v for k, v in r.items() if k != "arm"]])
    return _table(head, out)


def _samples_table(arms: list[Arm]) -> str:
    """The last sampled update of each arm, per source and mode, side by side (escaped text)."""
    have = [
        a for a in arms if not a.samples.empty and {"update", "source", "text"} <= set(a.samples)
    ]
    if not have:
        return "<p class='note'>no samples recorded.</p>"
    keys: list[tuple[str, str]] = []
    cells: dict[tuple[str, str, str], str] = {}
    for a in have:
        s = a.samples
        last = s[s["update"] == s["update"].max()]
        for _, r in last.iterrows():
            k = (str(r["source"]), str(r.get("mode", "-")))
            if k not in keys:
                keys.append(k)
            text = str(r["text"])
            if len(text) > MAX_SAMPLE_CHARS:
                text = text[:MAX_SAMPLE_CHARS] + " …"
            stats = ", ".join(
                f"{n} {fmt(r[n])}"
                for n in ("distinct_1", "top_token_share", "longest_run")
                if n in r and r[n] == r[n]
            )
            cells[(a.label, *k)] = (
                f"<div class='sample'>{esc(text)}</div>"
                f"<div class='note'>update {esc(r['update'])}; {esc(stats)}</div>"
            )
    head = (
        "<tr><th>source</th><th>mode</th>"
        + "".join(f"<th>{esc(a.label)}</th>" for a in have)
        + "</tr>"
    )
    body = "\n".join(
        f"<tr><td>{esc(src)}</td><td>{esc(mode)}</td>"
        + "".join(f"<td>{cells.get((a.label, src, mode), '-')}</td>" for a in have)
        + "</tr>"
        for src, mode in keys
    )
    return f"<table>\n{head}\n{body}\n</table>"


def _load_runs(run_dirs: list[Path]) -> tuple[list[dict[str, Any]], list[ArmStatus]]:
    """Load every run directory and say how each ended; runs without a metric row are left
    out of the plots (there is nothing to draw) but keep their line in the banner."""
    runs, statuses = [], []
    for d in map(Path, run_dirs):
        if not d.is_dir():
            raise UserError(
                f"{d} is not a directory",
                hint="pass a run directory written by `train` or `cascade`",
            )
        run = load_run(d)  # raises UserError when config.json is missing
        name = str((run["config"] or {}).get("arm") or d.name)
        run["status"] = arm_status(d, name, run["metrics"])
        statuses.append(run["status"])
        if not run["metrics"].empty:
            runs.append(run)
    return runs, statuses


def _no_rows_error(where: str, statuses: list[ArmStatus]) -> UserError:
    """Nothing to plot: one line, with each arm's state as the hint."""
    return UserError(
        f"no metric rows in {where}: nothing to report",
        hint="; ".join(s.line() for s in statuses)
        + " (a run writes its first row after its first update)",
    )


def render_report(
    run_dirs: list[Path],
    out_html: Path,
    title: str | None = None,
    notes: list[str] | None = None,
    run_status: str | None = None,
    images: list[str] | None = None,
) -> Path:
    """Render one comparison report of the given run directories; returns the written path.

    Unfinished runs render too: every run with at least one metrics row is plotted, and a
    banner at the top says where and why each one stopped. ``run_status``: the cascade's own
    status (cascade.json), shown in the banner when it is not "done".

    ``images``: also write each chart as an image beside the page, per format ("png", "svg";
    :mod:`andrea_diag.report.images`), after the page.

    Raises :class:`UserError` for an empty list, a directory that is not a run directory, or
    runs that recorded no metric row at all.
    """
    if not run_dirs:
        raise UserError(
            "no run directories given",
            hint="pass one or more directories written by `train`/`cascade`",
        )
    runs, statuses = _load_runs(run_dirs)
    if not runs:
        raise _no_rows_error(", ".join(str(d) for d in run_dirs), statuses)
    return _render(runs, statuses, Path(out_html), title, notes, run_status, images=images)


def _render(
    runs: list[dict[str, Any]],
    statuses: list[ArmStatus],
    out_html: Path,
    title: str | None,
    notes: list[str] | None,
    run_status: str | None,
    plotly_dir: Path | None = None,
    images: list[str] | None = None,
) -> Path:
    """Write the page of ``runs`` (each with metric rows); ``statuses`` covers every arm."""
    arms = _label_arms(runs)
    for r, a in zip(runs, arms, strict=True):  # the banner names arms as the page does
        r["status"].name = a.label
    style = Style(arms)
    title = title or "andrea-diag report: " + ", ".join(a.label for a in arms)

    parts = [f"<h1>{esc(title)}</h1>", banner_html(statuses, run_status), _header(arms)]
    for n in notes or []:
        parts.append(f"<p class='note'>{esc(n)}</p>")
    parts.append("<h2>Data sources</h2>\n" + _data_section(arms))
    parts.append("<h2>Summary</h2>\n" + _summary_table(arms, style))
    parts += [f"<p class='note'>{esc(a.label)}: {esc(a.summary_note)}</p>" for a in arms
              if a.summary_note]  # fmt: skip
    if sum(a.clipped for a in arms) >= 2:  # several clip rules: what each cost and kept out
        parts.append("<h2>Clip arms compared</h2>\n" + _table(*comparison_rows(arms)))
    parts.append(
        "<h2>Findings</h2>\n<ul class='findings'>\n"
        + "\n".join(f"<li>{esc(f)}</li>" for f in [*headline(arms), *all_findings(arms)])
        + "\n</ul>"
    )
    figs: list[tuple[str, Any]] = []
    n_figs = _figures_html(arms, parts, figs)
    parts.append("<h2>Samples (last sampled update)</h2>\n" + _samples_table(arms))
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    parts.append(
        f"<p class='note'>rendered {generated} from: "
        + esc(", ".join(a.dir for a in arms))
        + "</p>"
    )
    meta = script_json(  # an arm name must not end the <script> element
        {
            "figures": n_figs,
            "arms": [a.label for a in arms],
            "status": [{"arm": st.name, "state": st.state} for st in statuses],
        }
    )
    page = (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        f"<title>{esc(title)}</title>\n<style>{CSS}{BANNER_CSS}</style>\n"
        f"<script type='application/json' id='report-meta'>{meta}</script>\n"
        f"{script_tag(out_html, plotly_dir)}\n"
        "</head>\n<body>\n" + "\n".join(p for p in parts if p) + "\n</body>\n</html>\n"
    )
    write_page(out_html, page, hint="use --out to write the page elsewhere")
    if images:  # after the page: a missing exporter still leaves the HTML behind
        write_images(figs, out_html, images)
    return out_html


def _figures_html(arms: list[Arm], parts: list[str], figs: list[tuple[str, Any]]) -> int:
    """Append every figure section to ``parts`` and (section, figure) to ``figs``; returns the
    number of figures drawn."""
    n_figs = 0
    for section, fig, note in all_figures(arms):
        parts.append(f"<h2>{esc(section)}</h2>")
        if fig is None:
            parts.append(f"<p class='note'>{esc(note)}</p>")
            continue
        n_figs += 1
        figs.append((section, fig))
        # without the bundle (inlined once in <head>); named by section, so a section that
        # has no figure moves no other id
        parts.append(figure_html(fig, "fig-" + figure_slug(section), PLOT_CONFIG))
    return n_figs


def render_cascade(
    cascade_dir: Path, plotly_dir: Path | None = None, images: list[str] | None = None
) -> Path:
    """Render ``cascade_dir/report.html`` from ``cascade.json`` and one run directory per arm.

    ``plotly_dir``: link plotly.js from one shared copy there (a sweep's pages) instead of
    inlining it.

    Arms that never started (no directory, no config.json, no metric row) are left out of the
    plots and named in the banner, like arms that were killed, crashed or still run.
    """
    cascade_dir = Path(cascade_dir)
    meta = read_cascade_meta(cascade_dir)
    arms = [str(a) for a in meta["arms"]]
    runs: list[dict[str, Any]] = []
    statuses: list[ArmStatus] = []
    for name in arms:
        d = child(cascade_dir, name, "cascade.json: arm")  # read_cascade_meta checked it too
        if not (d / "config.json").exists():
            why = "no config.json" if d.is_dir() else "no run directory"
            statuses.append(ArmStatus(name, NEVER_STARTED, detail=why))
            continue
        loaded, (st,) = _load_runs([d])
        statuses.append(st)
        runs += loaded
    if not runs:
        raise _no_rows_error(f"any arm of {cascade_dir}", statuses)
    title = f"cascade: size {meta.get('size', '?')}, seed {meta.get('seed', '?')}, arms {', '.join(arms)}"
    notes = [f"command: {meta['command']}"] if meta.get("command") else None
    page = cascade_dir / "report.html"
    return _render(runs, statuses, page, title, notes, meta.get("status"), plotly_dir, images)
