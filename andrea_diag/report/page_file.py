"""Where a page, or the shared plotly.js, is written: a regular file, a link or nothing there is
replaced (a temp file in the same folder and a rename, so a link is never written through and a
full disk leaves no half page); anything else in its place is one line, never replaced.

    write_page(run / "report.html", page)         # a run's, a cascade's, a sweep's, a ladder's
    replaceable(sweep / "plotly.min.js")          # (out_place's) before the shared bundle

A folder someone else made (a sweep, a CI artifact) may hold a FIFO, a socket or a folder where
a page goes: a rename replaced the FIFO or socket without a word (the sweep and ladder pages and
the shared bundle), or failed on a folder with the OS's words.
"""

from __future__ import annotations

from pathlib import Path

from andrea_diag.errors import UserError
from andrea_diag.out_place import replaceable  # the one rule; the sweep's tables use it too
from andrea_diag.rundir import atomic_write_text


def write_page(path: Path, page: str, hint: str | None = None) -> None:
    """Write a page atomically where :func:`replaceable` allows, its folder made if missing.
    ``hint``: what to do when the write itself fails (a read-only folder, a full disk)."""
    path = Path(path)
    replaceable(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create {path.parent}: {e.strerror}") from None
    try:
        atomic_write_text(path, page)
    except UserError as e:
        raise UserError(e.message, hint=e.hint or hint) from None
