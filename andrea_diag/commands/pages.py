"""After an experiment, its pages: experiments return results, the commands render them.

    res = run_cascade(spec, console)
    render_cascade_page(res.out_dir, None, console)   # report.html of a cascade (or train)
    with sweep_page_after(out, console):  # sweep.html, also when some cells crashed
        run_sweep(spec, console, cell_pages())        # each cell's report.html as it ends
    render_ladder_pages(run, console)     # sweep.html and ladder.html of a LadderRun
    rejudge_ladder(out, console)          # `report` on a ladder: thresholds by today's code

Without plotly (a bare GPU image) nothing is rendered and one line says how to render later.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from andrea_diag.console_text import shown
from andrea_diag.errors import CellsCrashed, UserError
from andrea_diag.experiments.executor import AfterCell
from andrea_diag.experiments.ladder import LadderRun, read_sweep_outputs, write_ladder
from andrea_diag.rundir import read_json

# sweep.json's status once every cell has run (or crashed), or a --merge-only merge with cells
# still to come ("partial"); "running": stopped by an error before or between cells (a changed
# setting, a bad option), so there is no new table to show
FINISHED = ("done", "crashed", "partial")


def report_renderer_available(console: Console, out_dir: Path) -> bool:
    """plotly present? Without it (a bare GPU image) the run is complete, only unrendered."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        console.print(
            f"[yellow]report not rendered: plotly is not installed here. The run is complete; "
            f"render it elsewhere with `andrea-diag report {shown(out_dir)}`.[/]"
        )
        return False
    return True


def render_cascade_page(out: Path, plotly_dir: Path | None, console: Console) -> Path | None:
    """``out/report.html`` of a finished cascade (``plotly_dir``: where the one shared
    plotly.js is, None to inline it), or None (and one line) without plotly."""
    if not report_renderer_available(console, out):
        return None
    # the page imports plotly: only once it is there
    from andrea_diag.report import render_cascade

    return render_cascade(out, plotly_dir)


def cell_pages() -> AfterCell | None:
    """What renders a sweep cell's report.html as the cell ends (the experiments call it);
    None without plotly, where the sweep page's own line says how to render them all later."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        return None
    from andrea_diag.report import render_cascade

    return render_cascade


def render_sweep_page(out: Path, console: Console) -> Path | None:
    """``out/sweep.html`` from ``sweep.json`` and ``sweep.csv``, if the sweep got to its end.

    Both are read as untrusted files (``rundir``): a damaged ``sweep.json``, a FIFO or a link
    out of the sweep in either place is one :class:`UserError` line, never followed or hung on.
    """
    meta_path, table_path = out / "sweep.json", out / "sweep.csv"
    if not (os.path.lexists(meta_path) and os.path.lexists(table_path)):
        return None
    meta = read_json(meta_path, "the sweep's sweep.json", kind=dict)
    if meta.get("status") not in FINISHED or not report_renderer_available(console, out):
        return None
    # the page imports plotly: only once it is there; the readers `report` uses on a sweep
    from andrea_diag.report.sweep_dir import read_sweep_meta, read_sweep_table
    from andrea_diag.report.sweep_page import render_sweep

    return render_sweep(out, read_sweep_table(out), read_sweep_meta(out))


@contextmanager
def sweep_page_after(out: Path, console: Console) -> Iterator[None]:
    """Render the sweep page after the block, also when it raised for crashed cells.

    Any other error (a refusal before the first cell: a damaged ``sweep.json``, a bad option)
    renders nothing: the folder holds no new table, and the refusal's own line must reach the
    user, not a page's error raised on the way out. A page that cannot be rendered after
    crashed cells is said in one line and the crash is raised as it was."""
    try:
        yield
    except CellsCrashed:
        try:
            render_sweep_page(out, console)
        except UserError as e:
            console.print(f"[yellow]sweep page not rendered:[/] {escape(e.message)}",
                          highlight=False, soft_wrap=True)  # fmt: skip
        raise
    render_sweep_page(out, console)


def render_ladder_pages(run: LadderRun, console: Console) -> Path | None:
    """The ladder's ``sweep.html`` and ``ladder.html``; the latter's path, or None."""
    if not report_renderer_available(console, run.out):
        return None
    # the page imports plotly: only once it is there
    from andrea_diag.report.ladder_page import render_ladder

    render_sweep_page(run.out, console)
    return render_ladder(run.out, run.rows, run.result)


def rejudge_ladder(out: Path, console: Console) -> Path | None:
    """A ladder directory's thresholds stated again by the current statistics (``ladder.json``
    and ``ladder.csv`` rewritten from ``sweep.csv``, nothing trained), then ``ladder.html``.
    None when ``out`` holds no ladder."""
    if not os.path.lexists(out / "ladder.json") or not os.path.lexists(out / "sweep.csv"):
        return None
    meta, table = read_sweep_outputs(out)
    result, rows = write_ladder(out, table, meta["sizes"], meta)
    if not report_renderer_available(console, out):
        return None
    # the page imports plotly: only once it is there
    from andrea_diag.report.ladder_page import render_ladder

    return render_ladder(out, rows, result)
