"""Plotly HTML reports: one self-contained page comparing run directories (arms) side by side.

from andrea_diag.report import render_report, render_cascade
render_report([Path("runs/none"), Path("runs/global")], Path("runs/report.html"))
render_cascade(Path("out"))  # after `andrea-diag cascade --out out`

The page modules import plotly; this package does not, so plotly-free pages (accum_page,
banner) work on a machine without it (a bare GPU image).
"""

from __future__ import annotations

from typing import Any

__all__ = ["render_cascade", "render_report"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from andrea_diag.report import html

        return getattr(html, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
