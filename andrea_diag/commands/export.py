"""``andrea-diag export RUN_DIR...``: run directories as TensorBoard, W&B or MLflow runs.

    andrea-diag export --tensorboard runs/cascade-tiny-*/ --out runs/tb
    tensorboard --logdir runs/tb        # one folder per arm, beside your other runs

    andrea-diag export --wandb runs/cascade-tiny-a --out runs/wb       # offline: no network
    wandb sync runs/wb/wandb/offline-run-*                              # when you choose to

    andrea-diag export --mlflow runs/mlruns runs/cascade-tiny-a        # a file store
    mlflow ui --backend-store-uri runs/mlruns

Every arm becomes one run of the tool, with the tags of :mod:`andrea_diag.tensorboard`, written
through the sinks of :mod:`andrea_diag.sinks` (the ones ``SpikeMonitor(loggers=[...])`` uses).
The run directories are untrusted input: a damaged one is one line, and a refused export takes
back the empty folders it made (never a folder the user had, nor one holding a file).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit
from urllib.request import url2pathname

import typer

from andrea_diag.commands.given import check_project, mlflow_uri, plain_out, typed_path
from andrea_diag.commands.report import damaged_run_dir, say
from andrea_diag.console_text import shell_word, shown
from andrea_diag.errors import UserError
from andrea_diag.out_place import refuse_records
from andrea_diag.rundir import OUT_LINK, check_path, child, make_out_dir

Project = Annotated[
    str | None,
    typer.Option(
        # show_default, not "[default: ...]" in the text: rich read that as markup and dropped
        # it, so the help said the runs go "into ."
        help="W&B project / MLflow experiment the runs go into.",
        show_default="andrea-diag",
    ),
]


def export(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            parser=typed_path,
            help="Run directories, cascade directories (every arm) or sweep directories.",
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
    wandb: Annotated[
        bool,
        typer.Option(
            "--wandb",
            help="Write Weights & Biases runs, offline (WANDB_MODE=offline: nothing is sent; "
            "`wandb sync` them later), into --out/wandb. Needs the wandb extra.",
        ),
    ] = False,
    mlflow: Annotated[
        str | None,
        typer.Option(
            "--mlflow",
            metavar="STORE",
            help="Log MLflow runs to this tracking store: a folder (a file store) or a "
            "file:/ URI. Needs the mlflow extra.",
        ),
    ] = None,
    project: Project = None,
    out: Annotated[
        Path | None,
        typer.Option(
            parser=typed_path,
            help="Folder to write TensorBoard and W&B files into, one subfolder per run "
            "(default: <first run's parent>/tensorboard, <first run's parent>/wandb).",
        ),
    ] = None,
) -> None:
    """Export run directories to another tool's format (TensorBoard, W&B offline, MLflow)."""
    if not (tensorboard or wandb or mlflow is not None):
        raise UserError(
            "choose an export format",
            hint="andrea-diag export --tensorboard | --wandb | --mlflow STORE RUN_DIR",
        )
    given, project = project, "andrea-diag" if project is None else project
    for d in [*run_dirs, *([out] if out is not None else [])]:
        check_path(d)
    plain_out(out)  # a control character in a folder name, as a run's --out
    if out is not None and out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file", hint="give a folder")
    # names a tool would refuse only once its run starts, after --out was made: refused first
    check_project(project, wandb)
    uri = mlflow_uri(mlflow) if mlflow is not None else None
    _backends_present(tensorboard, wandb, uri)  # a missing extra: one line, nothing written
    _refuse_unused(given, out, tensorboard, wandb, mlflow is not None)
    # run dirs are untrusted: any surprise is one line
    with damaged_run_dir(run_dirs, doing="export"):
        tb = (out or _default_out(run_dirs[0], "tensorboard")) if tensorboard else None
        wb = (out or _default_out(run_dirs[0], "wandb")) if wandb else None
        _outside_the_runs(run_dirs, tb, wb, uri, default=out is None)
        made = [f for f in (tb, wb and wb / "wandb", wb) if f is not None]
        with _none_left_empty(made):
            if tb is not None:
                _tensorboard(run_dirs, tb)
            if wb is not None:
                _wandb(run_dirs, wb, project)
            if uri is not None:
                _mlflow(run_dirs, uri, project)


EXPORT_HINT = "export outside the runs, e.g. --out runs/tb or --mlflow runs/mlruns"


def _outside_the_runs(
    run_dirs: list[Path], tb: Path | None, wb: Path | None, uri: str | None, default: bool
) -> None:
    """No export writes inside a run it reads: ``--out RUN`` put the event files (and W&B's
    folder) among the run's records, and ``--out CASCADE`` with an arm given put them in the
    arm's own folder (its TensorBoard folder is named after it); ``--mlflow RUN`` made the
    run an MLflow file store (``.trash``, ``0/meta.yaml``, a folder per experiment). Nor
    inside a run it does not read, a sibling arm, or a cascade or sweep folder none of the
    runs is in (:func:`~andrea_diag.out_place.refuse_records`). Checked on resolved paths (a
    link to the run is the run), before any folder is made."""
    from andrea_diag.tensorboard import folder_names

    names = folder_names(run_dirs)
    out = "the default --out" if default else "--out"
    places = [(out, tb, tb / name) for name in names.values()] if tb is not None else []
    places += [(out, wb, wb / "wandb")] if wb is not None else []
    store = _store_path(uri) if uri is not None else None
    places += [("--mlflow", store, store)] if store is not None else []
    runs = [(Path(os.path.realpath(r)), r) for r in names]
    for option, given, place in places:
        real = Path(os.path.realpath(place))
        for resolved_run, run in runs:
            if real == resolved_run or resolved_run in real.parents:
                into = f"into {place}, inside" if place != given else "inside"
                raise UserError(
                    f"{option} {given} would write {'into' if real == resolved_run else into} "
                    f"{run}, a run this export reads: its files would be mixed with its records",
                    hint=EXPORT_HINT,
                )
        # nor in a run it does not read, a sibling arm's folder, or a cascade or sweep none
        # of the runs is in (a sqlite store is a file: its folder is where it lands)
        file = option == "--mlflow" and uri is not None and uri.startswith("sqlite")
        refuse_records(place, option if given == place else f"{option} {given}: its folder",
                       reads=[*run_dirs, *names], file=file, hint=EXPORT_HINT)  # fmt: skip


def _store_path(uri: str) -> Path | None:
    """Where a local MLflow store writes: a file store's folder, or a ``sqlite:`` database
    file (``sqlite:///rel.db``, ``sqlite:////abs.db``); None for a server."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return Path(url2pathname(parts.path))
    if parts.scheme == "sqlite" and parts.path.startswith("/") and len(parts.path) > 1:
        return Path(parts.path[1:])  # the URI's third slash ends its (empty) host
    return None


def _refuse_unused(
    project: str | None, out: Path | None, tensorboard: bool, wandb: bool, mlflow: bool
) -> None:
    """An option no chosen format reads was dropped without a word (exit 0): --project names a
    W&B project or MLflow experiment, and --out holds TensorBoard and W&B files only."""
    if project is not None and not (wandb or mlflow):
        raise UserError("--project is not used by --tensorboard (it names a W&B project or an "
                        "MLflow experiment)", hint="drop --project, or add --wandb or --mlflow")  # fmt: skip
    if out is not None and not (tensorboard or wandb):
        raise UserError("--out is not used by --mlflow, which writes into its STORE",
                        hint="drop --out: the runs go into the --mlflow store")  # fmt: skip


@contextlib.contextmanager
def _none_left_empty(folders: list[Path]) -> Iterator[None]:
    """On a refusal (a damaged run, W&B refusing an update given twice, a full disk), each of
    ``folders`` that this export made is removed again, with the parents it made for it, while
    empty, and so is each empty folder it made inside one the user had (a run's TensorBoard
    folder in an existing --out): a refused export leaves no empty folder behind. A folder the
    user had, or one holding any file, stays as it is: nothing but an empty folder is removed."""
    made = [_absent_chain(f) for f in folders]  # before anything is written
    had = {f: _entries(f) for f, chain in zip(folders, made, strict=True) if not chain}
    try:
        yield
    except BaseException:
        for chain in made:
            _remove_empty(chain)
        for folder, before in had.items():
            for name in sorted(_entries(folder) - before):
                _remove_empty([Path(folder) / name])
        raise


def _entries(folder: Path) -> set[str]:
    """The names in ``folder`` (none where it is no folder, or cannot be listed)."""
    try:
        return set(os.listdir(folder)) if os.path.isdir(folder) else set()
    except OSError:
        return set()


def _absent(path: Path) -> bool:
    """Nothing at ``path``, not even a link (``lstat``)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:  # unreadable: it may be the user's, so it is never ours to remove
        return False
    return False


def _absent_chain(folder: Path) -> list[Path]:
    """``folder`` and its parents that do not exist yet, deepest first (what a
    ``mkdir(parents=True)`` of it would make)."""
    chain, path = [], Path(folder)
    while _absent(path) and path.parent != path:
        chain.append(path)
        path = path.parent
    return chain


def _remove_empty(chain: list[Path]) -> None:
    """The folders of ``chain`` (made by this export), with the empty folders the export
    made inside the first, removed bottom-up; a folder holding a file stops it there."""
    if not chain or not chain[0].is_dir() or chain[0].is_symlink():
        return
    for root, dirs, _files in os.walk(chain[0], topdown=False):  # never follows a link
        for d in dirs:
            with contextlib.suppress(OSError):  # not empty, or a link: not ours to remove
                os.rmdir(os.path.join(root, d))
    for path in chain:
        try:
            os.rmdir(path)
        except OSError:  # holds something: it and its parents stay
            return


def _default_out(first_run: Path, name: str) -> Path:
    """``<first run's parent>/<name>``: that parent may be a sweep someone else made, so a
    ``tensorboard`` or ``wandb`` link planted there is refused, never written through."""
    return child(first_run.parent, name, "the default --out", "give --out explicitly")


def _backends_present(tensorboard: bool, wandb: bool, mlflow: str | None) -> None:
    from andrea_diag.sinks import need
    from andrea_diag.tensorboard import writer_backend

    if tensorboard:
        writer_backend()
    if wandb:
        need("wandb", "wandb")
    if mlflow:
        need("mlflow", "mlflow")


def _tensorboard(run_dirs: list[Path], target: Path) -> None:
    from andrea_diag.tensorboard import export_tensorboard

    for run, folder in export_tensorboard(run_dirs, target):
        say(f"[bold green]tensorboard:[/] {shown(run)} -> {shown(folder)}")
    say(f"view: tensorboard --logdir {shell_word(target)}")


def _wandb(run_dirs: list[Path], target: Path, project: str) -> None:
    from andrea_diag.sinks import WandbSink, export_to_sinks

    make_out_dir(target)
    # W&B writes under target/wandb: a link planted there would take the runs out of --out
    child(target, "wandb", "--out: W&B's folder", OUT_LINK)
    # offline whatever the user's settings say: an export never reaches the network. W&B's
    # service logs (core-debug, symon-debug) and its artifact staging go under target/wandb,
    # not ~/.cache/wandb and ~/.local/share/wandb: an export writes inside --out alone (the
    # user's own WANDB_CACHE_DIR / WANDB_DATA_DIR win)
    places = {k: os.environ.get(k, str(v)) for k, v in
              (("WANDB_CACHE_DIR", target), ("WANDB_DATA_DIR", target / "wandb"))}  # fmt: skip
    with _environ(WANDB_MODE="offline", WANDB_SILENT=os.environ.get("WANDB_SILENT", "true"),
                  **places):  # fmt: skip
        try:
            done = export_to_sinks(
                run_dirs,
                lambda name, config: WandbSink(
                    project, name=name, config=config, mode="offline", dir=target
                ),
                one_row_per_step=True,  # W&B drops a second row at a step: refused up front
            )
        finally:
            # finish() returns before W&B's service has written the run files; stopping the
            # service waits for them, so they are complete when the command says so
            __import__("wandb").teardown()
    for run, name in done:
        say(f"[bold green]wandb:[/] {shown(run)} -> {shown(name)} (offline)")
    say(f"upload when you choose: wandb sync {shell_word(target / 'wandb')}/offline-run-*")


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """Environment variables set for the block only (the CLI runs in the caller's process)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """``name``'s log records below ERROR held back for the block: MLflow logs WARNINGs of its
    own (Databricks credentials, a store's notices) before the one line an export says."""
    logger = logging.getLogger(name)
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


MLFLOW_PATIENCE = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
                   "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}  # fmt: skip


def _mlflow(run_dirs: list[Path], uri: str, experiment: str) -> None:
    from mlflow.exceptions import MlflowException

    from andrea_diag.given_checks import database_driver
    from andrea_diag.sinks import MLflowSink, export_to_sinks

    database_driver(uri)  # before MLflow is reached: no store made, no WARNING of its own

    # MLflow's own defaults retry an unreachable server for minutes (7 retries, 120 s each,
    # backoff): an export says so in seconds instead; the user's own settings win
    patience = {k: os.environ.get(k, v) for k, v in MLFLOW_PATIENCE.items()}
    try:
        with _environ(**patience), _quiet("mlflow"):
            done = export_to_sinks(
                run_dirs,
                lambda name, config: MLflowSink(experiment, name=name, config=config,
                                                tracking_uri=uri),
            )  # fmt: skip
    except MlflowException as e:  # a store it cannot use, or a name it refuses: one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        said = os.environ.get("MLFLOW_ALLOW_FILE_STORE", "")
        off = uri.startswith("file:") and said.strip().lower() in ("false", "0", "no")
        raise UserError(f"MLflow refused the export to {uri}: {first[:300]}",
                        hint=f"MLFLOW_ALLOW_FILE_STORE={said} in this shell turns MLflow's file "
                        "store off: unset it for a folder store" if off else "") from None  # fmt: skip
    for run, name in done:
        say(f"[bold green]mlflow:[/] {shown(run)} -> {shown(name)}")
    say(f"view: mlflow ui --backend-store-uri {shell_word(uri)}")
