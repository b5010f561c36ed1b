"""``export`` refuses, in one line and before any folder is made, a ``--project`` W&B would
refuse (only once its run starts, as a traceback), an empty ``--project``, ``--mlflow``,
``--out`` or run dir, and an MLflow file store that is a file. None of these needs wandb or
mlflow installed: the checks come before the extras are looked up."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile_dirs import cascade_fixture, one_line_error  # noqa: F401 (fixture: cascade)

from andrea_diag.commands.given import WANDB_BAD_CHARS, WANDB_MAX_LEN

BAD_PROJECTS = [*(f"a{c}b" for c in WANDB_BAD_CHARS), "x" * (WANDB_MAX_LEN + 1)]


@pytest.mark.parametrize("project", BAD_PROJECTS, ids=lambda p: p[:4])
def test_a_project_name_wandb_refuses_is_one_line_and_nothing_is_made(
    tmp_path: Path, cascade: Path, project: str
) -> None:
    out = tmp_path / "x"
    said = one_line_error(
        "export", "--wandb", "--project", project, str(cascade), "--out", str(out)
    )
    assert "--project" in said and "W&B" in said
    assert not out.exists()


@pytest.mark.parametrize("project", BAD_PROJECTS, ids=lambda p: p[:4])
def test_the_project_rules_are_the_installed_wandbs(project: str) -> None:
    pytest.importorskip("wandb")
    from wandb.sdk.wandb_settings import Settings

    with pytest.raises(Exception, match=r"(?i)project"):
        Settings(project=project)
    Settings(project="andrea-diag")  # the default passes both


@pytest.mark.parametrize("flag", ["--wandb", "--mlflow"])
def test_an_empty_project_is_one_line(tmp_path: Path, cascade: Path, flag: str) -> None:
    store = tmp_path / "mlruns"
    fmt = [flag, str(store)] if flag == "--mlflow" else [flag]
    said = one_line_error(
        "export", *fmt, "--project", "", str(cascade), "--out", str(tmp_path / "o")
    )
    assert "--project is empty" in said
    assert not store.exists() and not (tmp_path / "o").exists()


def test_an_empty_mlflow_store_says_so_not_choose_a_format(cascade: Path) -> None:
    said = one_line_error("export", "--mlflow", "", str(cascade))
    assert "--mlflow is empty" in said and "choose an export format" not in said


@pytest.mark.parametrize("args", [["--out", ""], [""]], ids=["out", "run dir"])
def test_an_empty_path_is_one_line_and_nothing_is_written_into_the_runs(
    cascade: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.chdir(cascade.parent)  # "" read as "." would be the folder of the runs
    before = sorted(cascade.parent.rglob("*"))
    run_dirs = [str(cascade)] if args[0] == "--out" else []
    said = one_line_error("export", "--tensorboard", *run_dirs, *args)
    assert "an empty path" in said
    assert sorted(cascade.parent.rglob("*")) == before


@pytest.mark.parametrize("spelling", ["{rel}", "file:{rel}", "file://{abs}", "file:{abs}"])
def test_an_mlflow_store_that_is_a_file_is_one_line(
    tmp_path: Path, cascade: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("keep me")
    store = spelling.format(rel="notes.txt", abs=tmp_path / "notes.txt")
    said = one_line_error("export", "--mlflow", store, str(cascade))
    assert "is a file, not a folder" in said and "MLflow's file store is a folder" in said
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_an_mlflow_file_uri_naming_no_folder_is_one_line(cascade: Path) -> None:
    said = one_line_error("export", "--mlflow", "file:", str(cascade))
    assert "names no folder" in said
