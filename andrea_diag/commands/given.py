"""What ``report`` and ``export`` are given, checked before anything is read or written.

    run_dirs: Annotated[list[Path], typer.Argument(parser=typed_path)]   # "" refused, not "."
    uri = mlflow_uri(store)          # a folder or file: URI that is a file: one line
    check_project(project, wandb)    # a name W&B would refuse after --out was made: one line

Each refusal is one :class:`~andrea_diag.errors.UserError` (or, for a path typer reads, a
``typer.BadParameter`` that the CLI turns into the same one line), never a tool's traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

import typer

from andrea_diag.errors import UserError, visible
from andrea_diag.rundir import check_path


def typed_path(value: str) -> Path:
    """A path as typed, for typer's ``parser=``: ``Path("")`` is ``.``, so an empty argument
    (an unset shell variable: ``report "$RUN"``) would silently mean the current folder."""
    if value == "":
        raise typer.BadParameter("an empty path names no file or folder")
    return Path(value)


# W&B's own rule for a project name (wandb/sdk/wandb_settings.py, validate_project): refused
# there only when the run starts, after the output folder was made
WANDB_BAD_CHARS = "/\\#?%:"
WANDB_MAX_LEN = 128


def check_project(project: str, wandb: bool) -> None:
    """``--project``: a W&B project / MLflow experiment name that the tool will take."""
    if not project.strip():
        raise UserError("--project is empty", hint="name the runs' project, e.g. --project mine")
    if visible(project) != project:
        raise UserError(f"--project {project!r} holds control characters")
    if not wandb:
        return  # MLflow takes any other experiment name (its own refusals are one line too)
    bad = "".join(c for c in WANDB_BAD_CHARS if c in project)
    if bad:
        raise UserError(
            f"--project {project!r}: a W&B project name cannot hold {' '.join(bad)}",
            hint=f"W&B refuses any of {' '.join(WANDB_BAD_CHARS)}; e.g. --project my-runs",
        )
    if len(project) > WANDB_MAX_LEN:
        raise UserError(f"--project is {len(project)} characters; W&B takes at most "
                        f"{WANDB_MAX_LEN}")  # fmt: skip
    _wandb_says(project)


def _wandb_says(project: str) -> None:
    """The installed wandb's own check too, where it is there: a rule added after ours."""
    try:
        from wandb.sdk.wandb_settings import Settings
    except ImportError:
        return  # no wandb: the missing extra is said next, in its own line
    try:
        Settings(project=project)
    except Exception as e:  # wandb's UsageError (or pydantic's, if it ever wraps it)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"--project: W&B refuses it: {first[:300]}") from None


def mlflow_uri(store: str) -> str:
    """``--mlflow STORE`` as a tracking URI: a folder (or ``file:`` URI) becomes an absolute
    ``file://`` URI; any other scheme (``http:``, ``sqlite:``...) is MLflow's to judge."""
    example = "e.g. --mlflow runs/mlruns (a folder) or --mlflow http://host:5000"
    if not store.strip():
        raise UserError("--mlflow is empty: it takes the tracking store", hint=example)
    head = store.split("/")[0]
    if ":" not in head:
        return _file_store(store, store, example)
    parts = urlsplit(store)
    if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost"):
        return store
    path = url2pathname(parts.path)
    if not path:
        raise UserError(f"--mlflow {store!r} names no folder", hint=example)
    return _file_store(path, store, example)


def _file_store(path: str, store: str, example: str) -> str:
    """The ``file://`` URI of the folder ``path``; one line where a file (or anything but a
    folder) is there already: MLflow would fail on its ``.trash`` inside it."""
    folder = check_path(Path(path), "--mlflow")
    if os.path.lexists(folder) and not folder.is_dir():
        what = "a file, not a folder" if folder.is_file() else "not a folder"
        said = store if store == path else f"{store}: {folder}"
        raise UserError(
            f"--mlflow {said} is {what}",
            hint=f"MLflow's file store is a folder; {example}",
        )
    return folder.resolve().as_uri()
