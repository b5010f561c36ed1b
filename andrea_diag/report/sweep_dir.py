"""Re-render a sweep directory someone else made: every finished cell's report, then the page.

    from andrea_diag.report.sweep_dir import render_sweep_dir
    render_sweep_dir(Path("runs/sweep-tiny"))      # what `andrea-diag report runs/sweep-tiny` does

The sweep directory is untrusted input (:mod:`andrea_diag.rundir`): ``sweep.json`` must be a JSON
object whose fields have the types the page formats (:data:`andrea_diag.runread.SWEEP`; a wrong
one is dropped and shown as "-"), ``sweep.csv`` is read by :func:`~andrea_diag.sweep_table.read_sweep_table`
(the ladder's reader too), which refuses a cell named ``../victim`` before anything is read or
written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from andrea_diag.errors import UserError
from andrea_diag.record import read_cascade_meta
from andrea_diag.report.html import render_cascade
from andrea_diag.rundir import child, read_json
from andrea_diag.runread import SWEEP, clean
from andrea_diag.sweep_table import read_sweep_table


def read_sweep_meta(out: Path) -> dict[str, Any]:
    """sweep.json as a cleaned dict, its lists holding only values of the listed kind."""
    path = out / "sweep.json"
    meta = clean(read_json(path, "sweep.json", kind=dict), SWEEP, str(path))
    for key, kind in (("sizes", str), ("clips", str), ("precisions", str), ("cells", str)):
        meta[key] = [v for v in meta.get(key) or [] if isinstance(v, kind)]
    for key in ("lrs", "max_norms", "seeds"):
        meta[key] = [v for v in meta.get(key) or []
                     if isinstance(v, (int, float)) and not isinstance(v, bool)]  # fmt: skip
    if not isinstance(meta.get("throughput"), dict):
        meta.pop("throughput", None)
    return meta


def _finished(cell_dir: Path) -> bool:
    if not (cell_dir / "cascade.json").exists():
        return False
    return read_cascade_meta(cell_dir).get("status") == "done"


def render_sweep_dir(out: Path) -> Path:
    """Re-render every finished cell's report and the sweep page (no training)."""
    from andrea_diag.report.sweep_page import render_sweep

    out = Path(out)
    if not (out / "sweep.json").exists() or not (out / "sweep.csv").exists():
        raise UserError(f"{out} is not a finished sweep directory (no sweep.json / sweep.csv)")
    meta = read_sweep_meta(out)
    table = read_sweep_table(out)
    shared = out if meta.get("plotly") == "shared" else None
    for cell in table["cell"].unique():
        cell_dir = child(out, cell, "sweep.csv: cell")
        if _finished(cell_dir):
            render_cascade(cell_dir, shared)
    return render_sweep(out, table, meta)
