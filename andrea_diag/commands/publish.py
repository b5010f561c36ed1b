"""The option of commands that write a folder of pages (``sweep``, ``ladder``): ``--plotly``.

``inline`` embeds plotly.js (4.9 MB) in every page; ``shared`` writes one ``plotly.min.js`` in
the output folder and links it from every page (``report/plotlyjs.py``). A single report
(``cascade``, ``report``) always inlines it, so it stays one self-contained file.
"""

from __future__ import annotations

from typing import Annotated

import typer

from andrea_diag.errors import UserError
from andrea_diag.experiments.spec_checks import CHOICES

PLOTLY_MODES = CHOICES["plotly"]  # the specs' own list: --plotly and plotly= take the same

PlotlyMode = Annotated[
    str,
    typer.Option(
        "--plotly",
        help="inline: plotly.js in every page (each opens alone); shared: one plotly.min.js "
        "per output folder, linked by every page (for publishing many pages).",
    ),
]


def plotly_mode(value: str) -> str:
    if value not in PLOTLY_MODES:
        raise UserError(
            f"unknown --plotly {value!r}", hint=f"choose from {', '.join(PLOTLY_MODES)}"
        )
    return value
