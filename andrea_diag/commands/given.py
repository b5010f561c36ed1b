"""What ``report`` and ``export`` are given, checked before anything is read or written.

    run_dirs: Annotated[list[Path], typer.Argument(parser=typed_path)]   # "" refused, not "."
    uri = mlflow_uri(store)          # a folder or file: URI that is a file: one line
    check_project(project, wandb)    # a name W&B would refuse after --out was made: one line

The rules themselves are :mod:`andrea_diag.given_checks`', the one owner that the Python API
(``load_run``, ``load_runs``, ``WandbSink``, ``MLflowSink``) applies too; here they are named
by the option (``--project``, ``--mlflow``). Each refusal is one
:class:`~andrea_diag.errors.UserError` (or, for a path typer reads, a ``typer.BadParameter``
that the CLI turns into the same one line), never a tool's traceback.
"""

from __future__ import annotations

from pathlib import Path

import typer

from andrea_diag.errors import UserError, has_control
from andrea_diag.given_checks import (
    WANDB_BAD_CHARS,
    WANDB_MAX_LEN,
    check_project,
    given_path,
    mlflow_uri,
)


def typed_path(value: str) -> Path:
    """A path as typed, for typer's ``parser=``: ``Path("")`` is ``.``, so an empty argument
    (an unset shell variable: ``report "$RUN"``) would silently mean the current folder."""
    try:
        return given_path(value)
    except UserError as e:
        # typer's own error type: click reads a ValueError from a parser as "invalid value"
        # and would drop the reason
        raise typer.BadParameter(e.message) from None


def plain_out(out: Path | None) -> None:
    """``--out`` of ``report`` or ``export`` holding a C0 or C1 control character (a pasted
    newline, an ESC) is refused: the page or folder was written under a name no listing shows
    as typed. Less than a run's ``--out`` refuses (``errors.unsafe``, which also refuses the
    bidi and zero-width characters): here a Unicode separator or format character is shown
    escaped, not refused (tests/test_hostile_s25_export.py pins it)."""
    if out is not None and has_control(str(out)):
        raise UserError(f"--out {str(out)!r} holds control characters", hint="give a plain path")


__all__ = [
    "WANDB_BAD_CHARS", "WANDB_MAX_LEN", "check_project", "mlflow_uri", "plain_out", "typed_path",
]  # fmt: skip
