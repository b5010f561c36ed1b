"""Where a page, or the shared plotly.js, is written: a regular file, a link or nothing there is
replaced (a temp file in the same folder and a rename, so a link is never written through and a
full disk leaves no half page); anything else in its place is one line, never replaced.

    write_page(run / "report.html", page)         # a run's, a cascade's, a sweep's, a ladder's
    replaceable(sweep / "plotly.min.js")          # before writing the shared bundle there

A folder someone else made (a sweep, a CI artifact) may hold a FIFO, a socket or a folder where
a page goes: a rename replaced the FIFO or socket without a word (the sweep and ladder pages and
the shared bundle), or failed on a folder with the OS's words.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from andrea_diag.errors import UserError
from andrea_diag.rundir import atomic_write_text

KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
         (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))  # fmt: skip


def replaceable(path: Path) -> None:
    """Nothing, a regular file or a link at ``path`` (``lstat``: a link is replaced by the
    rename, whatever it points at); else one :class:`UserError` naming what is there."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:  # a name too long, a folder above it that is a file
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return
    kind = next((said for test, said in KINDS if test(mode)), "not a file")
    raise UserError(f"{path} is not a regular file ({kind}): refusing to replace it",
                    hint="move it aside, then render the page again")  # fmt: skip


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
