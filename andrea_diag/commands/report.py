"""``andrea-diag report RUN_DIR...``: re-render the HTML report from run directories."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from andrea_diag.errors import UserError

console = Console(stderr=True)


def report(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            help="Run directories (from train/cascade/monitor), or a cascade directory."
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(help="HTML file to write.", show_default="report.html next to the runs"),
    ] = None,
    title: Annotated[str | None, typer.Option(help="Report title.")] = None,
    png: Annotated[
        bool,
        typer.Option(
            "--png",
            help="Also write each chart as a PNG beside the HTML (needs kaleido and "
            "Chrome/Chromium: the `figures` extra).",
        ),
    ] = False,
    svg: Annotated[
        bool, typer.Option("--svg", help="Also write each chart as an SVG beside the HTML.")
    ] = False,
) -> None:
    """Render one self-contained HTML report (works offline) comparing the given runs.

    Unfinished runs render too, under a box saying where and why each arm stopped."""
    from andrea_diag.report import render_cascade, render_report

    images = [fmt for fmt, on in (("png", png), ("svg", svg)) if on]

    for d in run_dirs:
        if not d.exists():
            raise UserError(f"{d} does not exist")
    if len(run_dirs) == 1 and (run_dirs[0] / "sweep.json").exists():
        from andrea_diag.experiments.sweep import render_sweep_dir

        if images:  # the sweep page's charts are not exported (yet): say so before rendering
            raise UserError(
                "--png/--svg draw the charts of run and cascade reports, not of the sweep page",
                hint=f"pass one cell, e.g. andrea-diag report --png {run_dirs[0]}/<cell>",
            )

        console.print(f"[bold green]sweep:[/] {render_sweep_dir(run_dirs[0])}")
        return
    expanded: list[Path] = []
    for d in run_dirs:
        if (d / "cascade.json").exists():
            if len(run_dirs) == 1 and out is None:
                path = render_cascade(d, images=images)
                _said(path, images)
                return
            expanded += sorted(p.parent for p in d.glob("*/config.json"))
        else:
            expanded.append(d)
    if not expanded:  # cascade dirs none of whose arms started: say so, not IndexError
        raise UserError(
            f"no run directory (with a config.json) in {', '.join(map(str, run_dirs))}",
            hint="no arm of these cascades started; nothing was recorded to report",
        )
    target = out or (expanded[0].parent / "report.html")
    if target.is_dir():
        raise UserError(f"--out {target} is a directory", hint="give a file name, e.g. report.html")
    path = render_report(expanded, target, title=title, images=images)
    _said(path, images)


def _said(path: Path, images: list[str]) -> None:
    """Print the page, and where its images went."""
    console.print(f"[bold green]report:[/] {path}")
    for fmt in images:
        console.print(f"[bold green]{fmt}:[/] {path.with_name(path.stem)}-<chart>.{fmt}")
