"""The Python API refuses what the command line refuses, by the same rules (review of bad input,
round 26): ``andrea_diag.given_checks`` owns each rule, and ``commands/given.py``, ``load_run``,
``load_runs``, ``MLflowSink`` and ``WandbSink`` all call it.

Before, only the CLI checked these values:

- ``MLflowSink(tracking_uri=<a file>)`` was ``NotADirectoryError`` 14 frames inside MLflow;
  ``tracking_uri=None`` an ``AttributeError``; ``tracking_uri=""`` MLflow's registry error for
  a ``sqlite:`` URI nobody gave; ``MLflowSink("")`` refused the name only after the store
  folder had been made; a ``Path`` as the store an ``AttributeError``.
- ``WandbSink(dir=<a file>)`` was taken, and W&B wrote the run to the temp folder instead.
- ``load_run("")`` and ``load_runs("")`` read the working folder; a name past 255 bytes was
  ``OSError`` from pathlib, a NUL ``ValueError: embedded null byte``, and ``load_runs([None])``
  pathlib's ``TypeError`` (``_as_paths`` looked for a bad item with ``next(..., None)``, so a
  ``None`` item read as "no bad item").

Most tests block ``mlflow`` / ``wandb`` (as if not installed): the checks come before either
is imported. The W&B ones run offline with ``WANDB_DIR`` in ``tmp_path``: nothing is sent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import typer

from andrea_diag.errors import UserError
from andrea_diag.record import load_run
from andrea_diag.runs import load_runs
from andrea_diag.sinks import MLflowSink, WandbSink

LONG = "x" * 300  # one component past NAME_MAX
PAST_PATH_MAX = "/tmp/" + "/".join(["y" * 200] * 30)  # each part short, the whole past 4096


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing reaches W&B's servers, and whatever W&B or MLflow writes stays in tmp_path."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-default"))
    monkeypatch.chdir(tmp_path)


def _without(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed


def _run_dir(path: Path) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"arm": "a"}))
    (path / "metrics.jsonl").write_text(json.dumps({"update": 1, "loss": 2.0}) + "\n")
    return path


def _files(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


# --- MLflowSink ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spelling", ["file:{f}", "file://{f}", "{f}", "notes.txt", "file:{f}/store", "path"]
)
def test_an_mlflow_store_that_is_a_file_or_inside_one_is_refused_before_mlflow_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    _without(monkeypatch, "mlflow")
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    before = _files(tmp_path)
    store = notes if spelling == "path" else spelling.format(f=notes)
    with pytest.raises(UserError, match=r"MLflowSink: tracking_uri .*(is a file|which is a file)"):
        MLflowSink(tracking_uri=store)
    assert notes.read_text() == "keep me" and _files(tmp_path) == before


@pytest.mark.parametrize("store", [None, 5, b"mlruns"])
def test_an_mlflow_store_of_the_wrong_type_is_a_type_error_naming_tracking_uri(
    monkeypatch: pytest.MonkeyPatch, store: object
) -> None:
    _without(monkeypatch, "mlflow")
    with pytest.raises(TypeError, match="MLflowSink: tracking_uri must be a str"):
        MLflowSink(tracking_uri=store)  # type: ignore[arg-type]


@pytest.mark.parametrize("store", ["", "   ", "file:"])
def test_an_empty_mlflow_store_is_one_value_error_not_mlflows_sqlite_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    _without(monkeypatch, "mlflow")
    with pytest.raises(ValueError, match=r"MLflowSink: tracking_uri ('file:' names no|is empty)"):
        MLflowSink(tracking_uri=store)
    assert _files(tmp_path) == []


@pytest.mark.parametrize("experiment", ["", "  ", "a\x1bb"])
def test_an_experiment_mlflow_refuses_leaves_no_store_folder_behind(
    tmp_path: Path, experiment: str
) -> None:
    store = tmp_path / "mlr1"
    with pytest.raises(ValueError, match="MLflowSink: experiment"):
        MLflowSink(experiment, tracking_uri=f"file:{store}")
    assert not store.exists()


def test_a_path_as_the_mlflow_store_is_a_file_store_there(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    sink = MLflowSink("mine", tracking_uri=tmp_path / "store")
    sink.log({"update": 1, "loss": 2.0})
    sink.close()
    assert (tmp_path / "store").is_dir()


# --- WandbSink ----------------------------------------------------------------------------


@pytest.mark.parametrize("inside", [False, True], ids=["file", "inside a file"])
def test_a_wandb_dir_that_is_a_file_is_refused_not_swapped_for_the_temp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inside: bool
) -> None:
    _without(monkeypatch, "wandb")
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    before = _files(tmp_path)
    with pytest.raises(ValueError, match=r"WandbSink: dir .*(is a file|which is a file)"):
        WandbSink("ok", dir=notes / "runs" if inside else notes)
    assert notes.read_text() == "keep me" and _files(tmp_path) == before


def test_an_empty_wandb_dir_is_refused_not_read_as_wandbs_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without(monkeypatch, "wandb")
    with pytest.raises(UserError, match="WandbSink: dir: an empty path"):
        WandbSink("ok", dir="")
    assert _files(tmp_path) == []


@pytest.mark.parametrize("project", ["", "a/b", "a#b", "x" * 129])
def test_a_wandb_project_the_export_refuses_is_refused_by_the_sink_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: str
) -> None:
    _without(monkeypatch, "wandb")
    with pytest.raises(ValueError, match="WandbSink: project"):
        WandbSink(project, dir=tmp_path / "w")
    assert _files(tmp_path) == []


def test_a_wandb_project_or_dir_of_the_wrong_type_is_a_type_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without(monkeypatch, "wandb")
    with pytest.raises(TypeError, match="WandbSink: project must be a str"):
        WandbSink(5)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="this sink needs wandb"):  # None: W&B's own choice
        WandbSink(None, dir=str(tmp_path))
    with pytest.raises(TypeError, match="WandbSink: dir must be a str or a path"):
        WandbSink("ok", dir=5)  # type: ignore[arg-type]


def test_wandb_dir_none_stays_wandbs_own_choice_and_a_folder_is_passed_on(tmp_path: Path) -> None:
    from andrea_diag.sinks import wandb_dir

    assert wandb_dir(None) is None  # W&B's default: $WANDB_DIR, else the working folder
    assert wandb_dir(tmp_path / "new" / "deeper") == str(tmp_path / "new" / "deeper")
    assert _files(tmp_path) == []  # checked, not made: W&B makes it


# --- load_run / load_runs -----------------------------------------------------------------


def test_load_run_of_an_empty_path_is_refused_not_read_as_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(_run_dir(tmp_path / "run"))
    assert len(load_run(".")["metrics"]) == 1  # "." is asked for: still read
    with pytest.raises(UserError, match="load_run: run_dir: an empty path names no"):
        load_run("")


@pytest.mark.parametrize("paths", ["", [""], [".", ""]], ids=["alone", "listed", "second"])
def test_load_runs_of_an_empty_path_is_refused_not_read_as_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, paths: object
) -> None:
    monkeypatch.chdir(_run_dir(tmp_path / "run"))
    with pytest.raises(UserError, match=r"load_runs: paths.*: an empty path names no"):
        load_runs(paths)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", [LONG, PAST_PATH_MAX, "/tmp/x\x00"], ids=["255", "4096", "nul"])
def test_a_path_the_system_cannot_look_up_is_one_user_error_from_both_loaders(path: str) -> None:
    for call in (load_run, load_runs, lambda p: load_runs([p])):
        with pytest.raises(UserError) as caught:
            call(path)
        assert (
            "255 bytes" in caught.value.message
            or "NUL" in caught.value.message
            or ("cannot look up" in caught.value.message)
        )


def test_load_runs_with_none_in_the_list_is_a_type_error_naming_the_item(tmp_path: Path) -> None:
    run = _run_dir(tmp_path / "run")
    for paths, n in (([None], 0), ([run, None], 1)):
        with pytest.raises(TypeError, match=rf"load_runs takes run directories .*paths\[{n}\]"):
            load_runs(paths)  # type: ignore[list-item]


@pytest.mark.parametrize("run_dir", [None, 5, b"run"])
def test_load_run_of_a_non_path_is_a_type_error_naming_run_dir(run_dir: object) -> None:
    with pytest.raises(TypeError, match="load_run: run_dir must be a str or a path"):
        load_run(run_dir)  # type: ignore[arg-type]


# --- one owner ----------------------------------------------------------------------------


def test_the_cli_and_the_python_api_take_each_rule_from_given_checks() -> None:
    from andrea_diag import given_checks
    from andrea_diag.commands import given

    assert given.check_project is given_checks.check_project
    assert given.mlflow_uri is given_checks.mlflow_uri
    with pytest.raises(typer.BadParameter, match=given_checks.EMPTY_PATH):
        given.typed_path("")
    with pytest.raises(UserError, match=given_checks.EMPTY_PATH):
        given_checks.given_path("", "load_run: run_dir")


def test_databricks_as_the_mlflow_store_is_mlflows_workspace_not_a_local_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by review: a bare "databricks" has no ':', so it was made a folder ./databricks
    and the runs went there without a word."""
    from andrea_diag.given_checks import mlflow_uri

    monkeypatch.chdir(tmp_path)
    assert mlflow_uri("databricks") == "databricks"
    assert mlflow_uri("databricks://my-profile") == "databricks://my-profile"
    assert mlflow_uri("databricks-local").startswith("file://")  # any other name: a folder
    assert _files(tmp_path) == []
