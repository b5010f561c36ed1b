"""Plotly HTML reports: one self-contained page comparing run directories (arms) side by side.

from andrea_diag.report import render_report, render_cascade
render_report([Path("runs/none"), Path("runs/global")], Path("runs/report.html"))
render_cascade(Path("out"))  # after `andrea-diag cascade --out out`
"""

from andrea_diag.report.html import render_cascade, render_report

__all__ = ["render_cascade", "render_report"]
