"""Metric sinks: where a run's rows go besides its own directory (TensorBoard, W&B, MLflow).

    from andrea_diag.sinks import WandbSink, MLflowSink
    mon = SpikeMonitor(model, opt, "runs/mine", loggers=[WandbSink(project="mine")])

One small protocol, :class:`MetricSink`: ``log(row)`` once per optimizer update (step =
``row["update"]``), ``events(frame)`` and ``summary(dict)`` at the end, ``close()``. Every sink
names its scalars through the same mapping as the TensorBoard export
(:func:`andrea_diag.tensorboard.tensorboard_tag`: ``loss/train``, ``grad_norm/total``,
``clip/coef``, ``optstate/...``), so a W&B or MLflow chart has the TensorBoard tag's name. NaN
and infinite values are sent as they are where the back end takes them (a diverged run's end
stays visible); MLflow refuses NaN, so there it is left out, as TensorBoard's export leaves an
empty cell out. In MLflow a tag that is also the folder of others (``eval/loss`` beside
``eval/loss/<source>``) is named ``<tag>/all``: its file store cannot hold both names.

The back ends are optional extras and imported only when a sink is made: ``pip install
'andrea-diag[wandb]'`` / ``'andrea-diag[mlflow]'``. Both work offline: W&B with ``mode="offline"``
(the default here: nothing leaves the machine until you ``wandb sync``), MLflow with a local
file store (``tracking_uri="file:./mlruns"``, the default here).
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import re
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from andrea_diag.errors import UserError
from andrea_diag.given_checks import check_project, given_path, mlflow_store, writable_folder
from andrea_diag.metrics import folder_tags
from andrea_diag.optional_deps import optional_module
from andrea_diag.surrogates import argv_as_text, text_values
from andrea_diag.tables import csv_text
from andrea_diag.tensorboard import (
    STEP_COLUMN,
    TensorBoardRun,
    nan_measured,
    row_walltime,
    run_summary,
    runs_to_export,
    scalar_tags,
    tensorboard_tag,
    with_row_times,
)


class MetricSink(Protocol):
    """What a run's rows are written to, besides the run directory."""

    def log(self, row: Mapping[str, Any]) -> None: ...

    def events(self, events: pd.DataFrame) -> None: ...

    def summary(self, summary: Mapping[str, Any] | None) -> None: ...

    def close(self) -> None: ...


def _scalars(row: Mapping[str, Any], keep_nonfinite: bool) -> dict[str, float]:
    """Tag -> value of one row's numeric cells; NaN/inf kept where the back end takes them."""
    out = dict(scalar_tags(row))  # drops NaN (not measured) but keeps inf
    if keep_nonfinite:  # a NaN loss or gradient is a measurement here: keep it
        for column, value in row.items():
            if isinstance(value, float) and math.isnan(value) and column != STEP_COLUMN:
                out.setdefault(tensorboard_tag(column), value)
    else:
        out = {k: v for k, v in out.items() if math.isfinite(v)}
    return out


def need(module: str, extra: str) -> Any:
    """The optional back end ``module``, or one line naming the extra that installs it (or
    saying that the installed one fails to import: optional_deps.py)."""
    return optional_module(
        module, missing=f"this sink needs {module}", hint=f"pip install 'andrea-diag[{extra}]'"
    )


MLFLOW_EXAMPLE_API = "e.g. tracking_uri='file:./mlruns' (a folder) or 'http://host:5000'"


def wandb_dir(dir: str | os.PathLike[str] | None) -> str | None:
    """``WandbSink(dir=)`` as wandb.init takes it: None stays W&B's own choice; a path must
    name a folder that is there or can be made (a file there, or above it, made W&B write
    the run to the temp folder instead)."""
    if dir is None:
        return None
    folder = given_path(dir, "WandbSink: dir")
    hint = "W&B writes the run into this folder; give one that is or can be made"
    return str(writable_folder(folder, "WandbSink: dir", str(folder), hint))


class WandbSink:
    """Weights & Biases: one W&B run per andrea-diag run; offline by default.

    An offline run's files are complete once W&B's service process has written them: at the
    end of the Python process, or after ``wandb.teardown()`` (``finish()`` returns earlier)."""

    def __init__(self, project: str | None = "andrea-diag", *, name: str | None = None,
                 config: Mapping[str, Any] | None = None, mode: str = "offline",
                 dir: str | Path | None = None) -> None:  # fmt: skip
        """``project``: None is W&B's own choice (``$WANDB_PROJECT``, else its default), as in
        ``wandb.init``. ``dir``: the folder W&B writes its ``wandb/`` folder into; None: W&B's
        own choice (``$WANDB_DIR``, else the working folder). A bad ``project`` or ``dir`` is
        refused here, before wandb is imported or anything is made (:func:`wandb_dir`)."""
        # the export's rules (given_checks); W&B itself refuses a name only once the run
        # starts, and a dir it cannot use sends the run to the temp folder without a word
        if project is not None:
            check_project(project, wandb=True, what="WandbSink: project", example="project='mine'")
        root = wandb_dir(dir)
        wandb = need("wandb", "wandb")
        with argv_as_text():
            self._run = wandb.init(project=project, name=name, config=dict(config or {}),
                                   mode=mode, dir=root, reinit="create_new")  # fmt: skip
        self._wandb = wandb

    def log(self, row: Mapping[str, Any]) -> None:
        self._run.log(_scalars(row, keep_nonfinite=True), step=int(row[STEP_COLUMN]))

    def events(self, events: pd.DataFrame) -> None:
        if not events.empty:
            self._run.log({"spikes/events": self._wandb.Table(dataframe=events.astype(str))})

    def summary(self, summary: Mapping[str, Any] | None) -> None:
        if summary:
            self._run.summary["andrea_diag"] = json.loads(json.dumps(summary, default=str))

    def close(self) -> None:
        self._run.finish()


class MLflowSink:
    """MLflow: one MLflow run per andrea-diag run, in a local file store by default."""

    def __init__(self, experiment: str = "andrea-diag", *, name: str | None = None,
                 config: Mapping[str, Any] | None = None,
                 tracking_uri: str | os.PathLike[str] = "file:./mlruns") -> None:  # fmt: skip
        """``tracking_uri``: a folder (a path, or a ``str`` without a scheme, or a ``file:``
        URI: a file store) or another MLflow URI (``http://host:5000``). An empty
        ``experiment`` or a store that is a file is refused here, before MLflow is imported
        or the store is made, as ``export --mlflow`` refuses it (:mod:`given_checks`)."""
        check_project(experiment, wandb=False, what="MLflowSink: experiment",
                      example="experiment='mine'")  # fmt: skip
        tracking_uri = mlflow_store(tracking_uri, "MLflowSink: tracking_uri", MLFLOW_EXAMPLE_API)
        mlflow = need("mlflow", "mlflow")
        if tracking_uri.startswith("file:"):
            # MLflow 3.x keeps its file store in maintenance mode behind this switch; a file
            # store is what works offline with mlflow-skinny alone (no database driver)
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = mlflow.MlflowClient(tracking_uri=tracking_uri)
        exp = self._client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else self._client.create_experiment(experiment)
        self._run_id = self._client.create_run(exp_id, run_name=name).info.run_id
        for key, value in mlflow_params(config or {}).items():
            self._client.log_param(self._run_id, key, value)
        self._mlflow = mlflow
        self._folders = folder_tags()
        self._keys: dict[str, str] = {}  # tag -> its MLflow name, fixed at its first row

    def _key(self, tag: str) -> str:
        """The MLflow name of ``tag`` (:func:`mlflow_metric_key`), the same for every row."""
        if tag not in self._keys:
            # eval/loss beside eval/loss/<source>: a file store keeps each as a file named by
            # its path, and one name cannot be both a file and a folder
            self._keys[tag] = free_key(f"{tag}/all" if tag in self._folders else tag,
                                       set(self._keys.values()))  # fmt: skip
        return self._keys[tag]

    def log(self, row: Mapping[str, Any]) -> None:
        # the row's own time (tensorboard.row_walltime), else now; MLflow wants epoch ms
        step, stamp = int(row[STEP_COLUMN]), int((row_walltime(row) or time.time()) * 1000)
        metrics = [self._mlflow.entities.Metric(key=self._key(k), value=v, timestamp=stamp,
                                                step=step)
                   for k, v in _scalars(row, keep_nonfinite=False).items()]  # fmt: skip
        if metrics:
            self._client.log_batch(self._run_id, metrics=metrics)

    def events(self, events: pd.DataFrame) -> None:
        if not events.empty:
            self._client.log_text(self._run_id, csv_text(events), "spike_events.csv")

    def summary(self, summary: Mapping[str, Any] | None) -> None:
        if summary:
            self._client.log_dict(self._run_id, json.loads(json.dumps(summary, default=str)),
                                  "summary.json")  # fmt: skip

    def close(self) -> None:
        self._client.set_terminated(self._run_id)


def close_sinks(
    sinks: list[MetricSink], events: Callable[[], pd.DataFrame], summary: Mapping[str, Any]
) -> None:
    """Give each sink the run's ``events()`` and ``summary``, then close every one, even when
    one of them (or reading the events) fails; the first error is raised at the end. A W&B
    or MLflow run left open on one sink's error was never marked finished."""
    first: Exception | None = None
    try:
        table = events()
        for sink in sinks:
            sink.events(table)
            sink.summary(summary)
    except Exception as exc:
        first = exc
    for sink in sinks:
        try:
            sink.close()
        except Exception as exc:
            first = first or exc
    if first is not None:
        raise first


class LiveSinks:
    """The sinks a :class:`~andrea_diag.monitor.SpikeMonitor` feeds row by row, inside the
    user's loop: a sink whose ``log`` raises (a W&B or MLflow service gone, a full disk under
    TensorBoard's files) raised out of ``after_step`` and ended the user's training. It is now
    warned about once and fed no more rows (the run directory holds every row: ``andrea-diag
    export`` sends them later); at :meth:`close` it is only closed, its error warned."""

    def __init__(self, sinks: list[Any]) -> None:
        self.sinks = list(sinks)
        self.failed: list[Any] = []

    def append(self, sink: Any) -> None:
        self.sinks.append(sink)

    def __bool__(self) -> bool:
        return bool(self.sinks or self.failed)

    def log(self, row: Mapping[str, Any]) -> None:
        for sink in list(self.sinks):
            try:
                sink.log(row)
            except Exception as exc:  # any sink's error: training goes on without it
                self.sinks.remove(sink)
                self.failed.append(sink)
                _warn_sink(sink, f"failed at update {row.get(STEP_COLUMN)} ({exc!r})",
                           "it gets no more rows; the run directory keeps them all "
                           "(andrea-diag export sends them later)")  # fmt: skip

    def close(self, events: Callable[[], pd.DataFrame], summary: Mapping[str, Any]) -> None:
        """The healthy sinks through :func:`close_sinks` (an error there is raised, after
        every one is closed); the failed ones only closed, their errors warned."""
        try:
            if self.sinks:
                close_sinks(self.sinks, events, summary)
        finally:
            for sink in self.failed:
                try:
                    sink.close()
                except Exception as exc:
                    _warn_sink(sink, f"failed to close ({exc!r})", "it failed during the run")


def _warn_sink(sink: Any, what: str, then: str) -> None:
    warnings.warn(
        f"andrea-diag: the metric sink {type(sink).__name__} {what}; {then}",
        UserWarning,
        stacklevel=4,  # the monitor's caller (after_step, close)
    )


def mlflow_params(config: Mapping[str, Any]) -> dict[str, str]:
    """A run's config as MLflow params, each key one MLflow takes: a character outside
    letters, digits, ``_-. :`` becomes ``_`` (a slash too, so that no key is a path), so does
    ``..``, and past 250 characters it is cut; a key that meets an earlier one once changed
    gets ``_2``, ``_3``. A key in a user's ``meta`` such as ``"schedule (cosine)"``, or a
    planted ``"../x"``, refused the whole export.

    >>> mlflow_params({"lr": 0.001, "schedule (cosine)": True, "../x": [1], "__x": 2})
    {'lr': '0.001', 'schedule _cosine_': 'true', '__x': '[1]', '__x_2': '2'}
    """
    out: dict[str, str] = {}
    for key, value in config.items():
        name = re.sub(r"\.\.+|[^\w\-. :]", "_", str(key))[:246]
        name = "_" if name in ("", ".") else name
        unique, n = name, 1
        while unique in out:
            n += 1
            unique = f"{name}_{n}"
        out[unique] = json.dumps(value, default=str)[:500]
    return out


MLFLOW_KEY_MAX = 250  # MLflow's MAX_ENTITY_KEY_LENGTH


def mlflow_metric_key(tag: str) -> str:
    """``tag`` as a metric name MLflow takes, as :func:`mlflow_params` does for a param: a
    character outside letters, digits, ``_-. :/`` becomes ``_``, so does a path part that is
    empty or dots only (``a//b``, ``a/``, ``../x``), and a leading ``..`` (``..x``); past 250
    characters it is cut, and a cut that ends in ``/`` or dots loses the name's slashes.
    A metrics column named so, in a damaged table, refused the whole export in the middle.

    >>> [mlflow_metric_key(t) for t in ["loss/train", "../../x", "a//b/", "misc/a?b"]]
    ['loss/train', '_/_/x', 'a/_/b/_', 'misc/a_b']
    """
    parts = [re.sub(r"[^\w\-. :]", "_", p) for p in str(tag).split("/")]
    key = "/".join("_" if set(p) <= {"."} else p for p in parts)[:MLFLOW_KEY_MAX]
    if posixpath.normpath(key) != key:  # the cut left a trailing "/" or a part of dots
        key = key.replace("/", "_")
    return "_" + key[1:] if key.startswith("..") else key


def free_key(tag: str, used: set[str]) -> str:
    """:func:`mlflow_metric_key` of ``tag``, made unlike every name in ``used`` (``_2``, ``_3``)
    and neither the folder of one of them nor inside one as a folder: two columns that meet
    once cleaned, or ``x`` beside ``x/y``, would have one name or be a file and a folder."""

    def clash(k: str) -> bool:
        return k in used or any(u.startswith(k + "/") or k.startswith(u + "/") for u in used)

    key, n = mlflow_metric_key(tag), 1
    flat = key.replace("/", "_")[: MLFLOW_KEY_MAX - 12]
    while clash(key):
        n += 1
        key = f"{flat}_{n}"
    return key


SinkFactory = Callable[[str, Mapping[str, Any]], MetricSink]  # (run's name, its config) -> sink


def _recorded(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row as a live one: empty cells left out, a non-finite update's NaN kept."""
    keep = set(nan_measured(row)) if row.get("nonfinite") == 1 else set()
    return {k: v for k, v in row.items() if k in keep or not (v is None or v != v)}


def _in_update_order(run: Path, metrics: pd.DataFrame, one_row_per_step: bool) -> pd.DataFrame:
    """The rows, by update as :func:`~andrea_diag.runread.load_run` reads them (a table out of
    order kept every row in TensorBoard and MLflow but only those past the last step so far in
    W&B, which dropped the rest without a word: the reader's sort is the one rule). With
    ``one_row_per_step`` (W&B): an update given twice, or one below 0, is refused, as W&B would
    keep one row of the two, or none."""
    rows = metrics
    steps = rows[STEP_COLUMN]
    bad = steps[steps.duplicated() | (steps < 0)] if one_row_per_step else steps[:0]
    if len(bad):
        u = int(bad.iloc[0])
        said = f"update {u} twice" if u >= 0 else f"update {u}, below 0"
        raise UserError(
            f"cannot export {run} to W&B: its metrics table holds {said}, and W&B keeps one "
            "row per step from 0",
            hint="the run dir is damaged; --tensorboard and --mlflow keep every row",
        )
    return rows


def export_to_sinks(
    paths: list[Path], make_sink: SinkFactory, one_row_per_step: bool = False
) -> list[tuple[Path, str]]:
    """Every run under ``paths`` (a run, a cascade's arms, a sweep's cells) through its own
    sink, ``make_sink(name, config)``: each row at its update, then events, summary, close.
    ``name`` is the TensorBoard export's folder name (``cascade-x/none``). Returns (run
    directory, name) pairs; runs without a metric row are left out with a warning
    (``tensorboard.runs_to_export``).
    ``one_row_per_step``: the back end keeps one row per step (W&B): a table with an update
    twice is refused before any sink is made."""
    names, todo = runs_to_export(paths)
    # every run checked before the first sink: no half an export of a refused one
    rows = {run: _in_update_order(run, r["metrics"], one_row_per_step) for run, r in todo.items()}
    done = []
    for run, r in todo.items():
        name = text_values(names[run])
        sink = make_sink(name, r["config"] or {})
        try:
            for row in with_row_times(rows[run], r["env"]).to_dict("records"):
                sink.log(_recorded(row))
            sink.events(r["events"])  # a run's JSON: mended as read (surrogates.py)
            sink.summary(text_values(run_summary(run, r)))
        finally:
            sink.close()
        done.append((run, name))
    return done


__all__ = [
    "LiveSinks",
    "MLflowSink",
    "MetricSink",
    "TensorBoardRun",
    "WandbSink",
    "close_sinks",
    "export_to_sinks",
    "mlflow_params",
]
