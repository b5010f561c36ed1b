"""Where a page gets plotly.js: inlined (self-contained, the default) or one shared copy.

    script_tag(page)                    # <script>…4.9 MB bundle…</script>: opens anywhere
    script_tag(page, shared_dir=root)   # <script src='../plotly.min.js'>, bundle written once

A single report stays self-contained, so it can be mailed or opened from file:// on its own.
A published sweep or ladder has dozens of pages in one folder; inlining the bundle in each would
cost 4.9 MB a page, so there every page points (by a relative path, still offline) at one
``plotly.min.js`` in the folder's root. Moving a page out of its folder then needs the bundle.
"""

from __future__ import annotations

import os
from pathlib import Path

from andrea_diag.report.page_file import replaceable
from andrea_diag.rundir import atomic_write_bytes

BUNDLE = "plotly.min.js"
PLOT_CONFIG = {"displaylogo": False, "responsive": True}  # every figure of every page


def script_tag(page: Path, shared_dir: Path | None = None) -> str:
    """The ``<script>`` element for ``page``: inline, or a relative link to the shared bundle."""
    from plotly.offline import get_plotlyjs  # here: importing this module needs no plotly

    js = get_plotlyjs()
    if shared_dir is None:
        return f"<script type='text/javascript'>{js}</script>"
    bundle = Path(shared_dir) / BUNDLE
    data = js.encode("utf-8")
    # written once per folder; rewritten only if another plotly version left a different one
    # (a link there is replaced, never written through: the folder may be someone else's)
    # (a FIFO or a folder there is one line, never replaced: page_file)
    replaceable(bundle)
    if bundle.is_symlink() or not bundle.is_file() or bundle.stat().st_size != len(data):
        bundle.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(bundle, data)
    rel = Path(os.path.relpath(bundle, Path(page).parent)).as_posix()
    return f"<script type='text/javascript' src='{rel}'></script>"
