"""What a caller gives, checked where it is given: the one owner of each rule that both the
Python API and the command line apply.

    run_dir = given_path(run_dir, "load_run: run_dir")        # "" refused, never read as "."
    check_project(project, wandb=True, what="WandbSink: project", example="project='mine'")
    uri = mlflow_store(tracking_uri, "MLflowSink: tracking_uri", MLFLOW_EXAMPLE_API)
    folder = writable_folder(path, "WandbSink: dir", said=str(path), hint=...)  # not a file
    out = given_folder(out_dir, "SpikeMonitor: out_dir")   # also no ESC, nothing under /proc

``commands/given.py`` calls these with the option's name (``--project``, ``--mlflow``);
``runread.load_run``, ``runs.load_runs`` and the sinks (``WandbSink``, ``MLflowSink``) with the
argument's. Before, the Python side had none of them: an empty path read the working folder,
a file as MLflow's store was ``NotADirectoryError`` 14 frames inside MLflow, and a file as
W&B's ``dir`` sent the run to the temp folder without a word.

A wrong type is a ``TypeError``; a value that cannot be used is a :class:`BadArgument`, both a
:class:`~andrea_diag.errors.UserError` (the CLI's one line) and a ``ValueError`` (what Python
code catches). Nothing here creates a file or a folder: a refused call leaves none behind.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from andrea_diag.errors import BadArgument, BadType, UserError, unsafe, visible
from andrea_diag.rundir import check_path


def kind_of(value: Any) -> str:
    """The type a message names: ``got list``, not the value (which may be huge or hostile)."""
    return type(value).__name__


EMPTY_PATH = "an empty path names no file or folder"


def given_path(value: Any, what: str | None = None) -> Path:
    """``value`` as a path: a ``str`` or ``os.PathLike`` (else ``TypeError``), not empty (``""``
    is ``Path(".")``: an unset variable would silently mean the working folder), without a NUL
    (no system call takes one) and with no component the system refuses to look up
    (:func:`andrea_diag.rundir.check_path`). ``what``: the argument or option, for the line."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):  # bytes too: every reader here joins str paths
        raise BadType(f"{what or 'a path'} must be a str or a path, got {kind_of(value)} {value!r}")
    if value == "":
        raise BadArgument(f"{what}: {EMPTY_PATH}" if what else EMPTY_PATH)
    if "\0" in value:
        raise BadArgument(f"{what or 'a path'} {value!r} holds a NUL character, which no path can")
    try:
        return check_path(Path(value), what)
    except UserError as e:
        raise BadArgument(e.message, e.hint) from None


def given_folder(value: Any, what: str) -> Path:
    """A folder a caller names for output, checked before anything is made there:
    :func:`given_path`'s rules; no control or invisible character (a pasted newline or ESC is a
    folder no listing shows as typed: a run's ``--out`` refuses them too); and the nearest part
    of it that is there can be looked up and is on no filesystem of the kernel's own
    (:data:`KERNEL_FS`). Whether that part is a folder is the caller's own line."""
    path = given_path(value, what)
    if unsafe(str(path)):
        raise BadArgument(f"{what} {str(path)!r} holds a control or invisible character",
                          hint="give a plain path")  # fmt: skip
    place = _nearest(path, what)
    kind = kernel_fs(place)
    if kind is not None:
        raise BadArgument(f"{what} {path} is on the kernel's own {kind} filesystem, where no "
                          "folder can be made", hint="give a folder on a disk")  # fmt: skip
    return path


def _nearest(path: Path, what: str) -> Path:
    """The nearest of ``path`` and its parents that is there (a link too, even a dangling one);
    one line where the system cannot look it up (a path past PATH_MAX in all, a link loop):
    pathlib's ``exists()`` raises there, after which a caller's ``mkdir`` would."""
    for place in (path, *path.parents):
        try:
            os.lstat(place)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as e:
            raise BadArgument(f"cannot look up {what} {path}: {e.strerror or e}") from None
        return place
    return path  # not reached: the last parent ("/" or ".") is there


# Filesystems whose entries the kernel makes (processes, devices, cgroups): mkdir there fails
# (FileNotFoundError under /proc, PermissionError under /sys) or makes a kernel object, never
# a folder of files, even for root, whom os.access lets through
KERNEL_FS = frozenset({"proc", "sysfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
                       "securityfs", "pstore", "bpf", "configfs", "efivarfs", "fusectl",
                       "binfmt_misc", "mqueue"})  # fmt: skip
MOUNTS = "/proc/self/mounts"


def kernel_fs(place: Path) -> str | None:
    """The type of the filesystem ``place`` (which is there) is on when it is one of
    :data:`KERNEL_FS`, else None (and where the mount table cannot be read: not Linux)."""
    real = os.path.realpath(place)
    try:
        with open(MOUNTS, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read(1 << 20).splitlines()  # a few KiB; a bound all the same
    except OSError:
        return None
    best, kind = "", None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        # the table writes a blank, a newline or a backslash in a mount point as 3 octal digits
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # the last of equal ones is the one on top
            best, kind = point, fields[2]
    return kind if kind in KERNEL_FS else None


def writable_folder(path: Path, what: str, said: str, hint: str) -> Path:
    """``path``, a folder that is there or can be made by the tool that writes into it: the
    nearest of it and its parents that exists is a folder this user may write in. ``said``:
    ``path`` as the caller gave it, for the line. Nothing is created here."""
    for place in (path, *path.parents):
        if not os.path.lexists(place):
            continue
        if not place.is_dir():
            kind = "a file" if place.is_file() else "not a folder"
            if place == path:
                where = "is a file, not a folder" if place.is_file() else "is not a folder"
            else:
                where = f"is inside {place}, which is {kind}"
            raise BadArgument(f"{what} {said} {where}", hint)
        # W&B and MLflow make the folder there; where they cannot, W&B quietly writes to the
        # temp folder instead and MLflow fails deep inside
        need = os.W_OK | os.X_OK | (os.R_OK if place == path else 0)
        if not os.access(place, need):
            raise BadArgument(f"{what} {said}: {place} is not writable", hint)
        return path
    return path


# W&B's own rule for a project name (wandb/sdk/wandb_settings.py, validate_project): refused
# there only when the run starts, after the output folder was made
WANDB_BAD_CHARS = "/\\#?%:"
WANDB_MAX_LEN = 128


def check_project(
    project: Any, wandb: bool, what: str = "--project", example: str = "--project mine"
) -> None:
    """A W&B project (``wandb``) or MLflow experiment name that the tool will take."""
    if not isinstance(project, str):
        raise BadType(f"{what} must be a str, got {kind_of(project)} {project!r}")
    if not project.strip():
        raise BadArgument(f"{what} is empty", hint=f"name the runs' project, e.g. {example}")
    if not project.isascii():  # a lone surrogate (a non-UTF-8 shell argument) failed in the
        try:  # tool's own files after its store was made, read as a damaged run
            project.encode("utf-8")
        except UnicodeEncodeError:
            raise BadArgument(f"{what} '{visible(project)}' is not UTF-8 text",
                              hint=f"name it in plain text, e.g. {example}") from None  # fmt: skip
    if unsafe(project):
        raise BadArgument(f"{what} {project!r} holds control characters")
    if not wandb:
        return  # MLflow takes any other experiment name (its own refusals are one line too)
    bad = "".join(c for c in WANDB_BAD_CHARS if c in project)
    if bad:
        raise BadArgument(
            f"{what} {project!r}: a W&B project name cannot hold {' '.join(bad)}",
            hint=f"W&B refuses any of {' '.join(WANDB_BAD_CHARS)}; e.g. {example}",
        )
    if len(project) > WANDB_MAX_LEN:
        raise BadArgument(f"{what} is {len(project)} characters; W&B takes at most "
                          f"{WANDB_MAX_LEN}")  # fmt: skip
    _wandb_says(project, what)


def _wandb_says(project: str, what: str) -> None:
    """The installed wandb's own check too, where it is there: a rule added after ours."""
    try:
        from wandb.sdk.wandb_settings import Settings
    except Exception:  # absent, or broken (a protobuf it cannot use): said next, in one line
        return
    try:
        Settings(project=project)
    except Exception as e:  # wandb's UsageError (or pydantic's, if it ever wraps it)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise BadArgument(f"{what}: W&B refuses it: {first[:300]}") from None


MLFLOW_EXAMPLE = "e.g. --mlflow runs/mlruns (a folder) or --mlflow http://host:5000"


def mlflow_uri(store: Any, what: str = "--mlflow", example: str = MLFLOW_EXAMPLE) -> str:
    """A tracking store as a URI: a folder (a ``str`` without a scheme, a path, or a ``file:``
    URI) becomes an absolute ``file://`` URI; any other scheme (``http:``, ``sqlite:``...) is
    MLflow's to judge. ``what``/``example``: the option or argument, for the line."""
    if isinstance(store, os.PathLike):  # a path is a folder, whatever its name looks like
        text = str(given_path(store, what))
        return _file_store(text, text, what, example)
    if not isinstance(store, str):
        raise BadType(f"{what} must be a str (a tracking URI or a folder) or a path, "
                        f"got {kind_of(store)} {store!r}")  # fmt: skip
    if not store.strip():
        raise BadArgument(f"{what} is empty: it takes the tracking store", hint=example)
    if unsafe(store):  # a store no listing shows as typed; urlsplit drops a newline unsaid
        raise BadArgument(f"{what} '{visible(store)}' holds control characters",
                          hint="give a plain path or URI")  # fmt: skip
    if store == "databricks":  # MLflow's name for the Databricks workspace, not a folder
        return store
    if ":" not in store.split("/")[0]:
        return _file_store(store, store, what, example)
    parts = urlsplit(store)
    if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost"):
        return store
    path = url2pathname(parts.path)
    if not path:
        raise BadArgument(f"{what} {store!r} names no folder", hint=example)
    return _file_store(path, store, what, example)


DATABASES = ("sqlite", "postgresql", "mysql", "mssql")  # MLflow's SQLAlchemy stores


def database_driver(store: str, what: str = "--mlflow", example: str = MLFLOW_EXAMPLE) -> None:
    """A database store needs SQLAlchemy, which ``mlflow-skinny`` (the extra) leaves out; MLflow
    would say only "unsupported URI ... for model registry", after a WARNING of its own. Called
    where the store is about to be used (after ``export``'s check that it is outside the runs)."""
    scheme = urlsplit(store).scheme.lower()
    if scheme.split("+")[0] in DATABASES and importlib.util.find_spec("sqlalchemy") is None:
        raise BadArgument(f"{what} {store!r} is a database store, which needs SQLAlchemy (not "
                          "installed: the mlflow extra is mlflow-skinny, without it)",
                          hint=f"pip install sqlalchemy, or give a folder (a file store): "
                          f"{example}")  # fmt: skip


def mlflow_store(store: Any, what: str, example: str) -> str:
    """:func:`mlflow_uri` of a store about to be used, with :func:`database_driver`'s check."""
    uri = mlflow_uri(store, what, example)
    database_driver(uri, what, example)
    return uri


def _file_store(path: str, store: str, what: str, example: str) -> str:
    """The ``file://`` URI of the folder ``path``; one line where a file (or anything but a
    folder) is in its place or above it: MLflow would fail on its ``.trash`` inside it."""
    folder = given_path(path, what)
    said = store if store == path else f"{store}: {folder}"
    writable_folder(folder, what, said, f"MLflow's file store is a folder; {example}")
    return folder.resolve().as_uri()
