"""``andrea-diag export --tensorboard RUN_DIR...``: run directories as TensorBoard event files.

    andrea-diag export --tensorboard runs/cascade-tiny-*/ --out runs/tb
    tensorboard --logdir runs/tb        # one folder per arm, beside your other runs

Tags and the writer are described in :mod:`andrea_diag.tensorboard`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from andrea_diag.commands.report import check_path, damaged_run_dir
from andrea_diag.errors import UserError

console = Console(stderr=True)


def export(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            help="Run directories, cascade directories (every arm) or sweep directories."
        ),
    ],
    tensorboard: Annotated[
        bool,
        typer.Option(
            "--tensorboard",
            help="Write TensorBoard event files (tags loss/, grad_norm/, clip/, optstate/, "
            "spikes/ ...; step = update). Needs tensorboardX or tensorboard.",
        ),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Folder to write into, one subfolder per run (default: "
            "<first run's parent>/tensorboard)."
        ),
    ] = None,
) -> None:
    """Export run directories to another tool's format (TensorBoard event files)."""
    from andrea_diag.tensorboard import export_tensorboard

    if not tensorboard:
        raise UserError("choose an export format", hint="andrea-diag export --tensorboard RUN_DIR")
    for d in [*run_dirs, *([out] if out is not None else [])]:
        check_path(d)
    target = out or (run_dirs[0].parent / "tensorboard")
    if target.exists() and not target.is_dir():
        raise UserError(f"--out {target} is a file", hint="give a folder")
    with damaged_run_dir(run_dirs):  # run dirs are untrusted: any surprise is one line
        written = export_tensorboard(run_dirs, target)
    for run, folder in written:
        console.print(f"[bold green]tensorboard:[/] {run} -> {folder}", highlight=False)
    console.print(f"view: tensorboard --logdir {target}", highlight=False)
