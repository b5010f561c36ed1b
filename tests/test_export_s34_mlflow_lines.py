"""``export --mlflow`` says one thing when the store cannot be used: its own line, not MLflow's
WARNINGs before it (session 33's audit saw Databricks' credential WARNING first), a database
store refused before MLflow is reached when SQLAlchemy is not installed (MLflow said only
"unsupported URI ... for model registry"), and a file store turned off by the user's
``MLFLOW_ALLOW_FILE_STORE=false`` named as the cause.

    pytest tests/test_export_s34_mlflow_lines.py -q
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.errors import BadArgument
from andrea_diag.given_checks import mlflow_store, mlflow_uri


@pytest.fixture
def no_sqlalchemy(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sqlalchemy" else real(name, *a))  # fmt: skip


@pytest.mark.parametrize("store", ["sqlite:///runs.db", "postgresql+psycopg2://u@host/db",
                                   "MYSQL://u@host/db"])  # fmt: skip
def test_a_database_store_without_sqlalchemy_is_refused_naming_it(
    store: str, no_sqlalchemy: None
) -> None:
    with pytest.raises(BadArgument, match="needs SQLAlchemy") as e:
        mlflow_store(store, "MLflowSink: tracking_uri", "e.g. tracking_uri='mlruns'")
    assert "tracking_uri='mlruns'" in (e.value.hint or "")


def test_a_database_store_is_mlflows_to_judge_when_sqlalchemy_is_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert mlflow_store("sqlite:///runs.db", "--mlflow", "") == "sqlite:///runs.db"
    assert (
        mlflow_uri("sqlite:///runs.db") == "sqlite:///runs.db"
    )  # the CLI's first check: no driver


def test_the_cli_refuses_a_database_store_in_one_line_and_makes_nothing(
    tmp_path: Path, make_run, no_sqlalchemy: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    run = make_run(tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["export", str(run), "--mlflow", "sqlite:///runs.db"])
    assert res.exit_code == 2 and "needs SQLAlchemy" in res.output, res.output
    assert not (tmp_path / "runs.db").exists() and not (tmp_path / "mlruns").exists()


def test_a_file_store_turned_off_by_the_users_environment_is_named_as_the_cause(
    tmp_path: Path, make_run, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    run = make_run(tmp_path / "run")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "false")
    res = CliRunner().invoke(app, ["export", str(run), "--mlflow", str(tmp_path / "store")])
    assert res.exit_code == 2, res.output
    assert "MLFLOW_ALLOW_FILE_STORE=false in this shell" in res.output


@pytest.mark.slow  # a fresh interpreter: MLflow's log handler writes to the real stderr
def test_an_unusable_databricks_store_gives_our_line_alone(tmp_path: Path, make_run) -> None:
    pytest.importorskip("mlflow")
    run = make_run(tmp_path / "run")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABRICKS")}
    env.update(HOME=str(tmp_path), COLUMNS="300")  # no ~/.databrickscfg to find
    res = subprocess.run([sys.executable, "-m", "andrea_diag.cli", "export", str(run),
                          "--mlflow", "databricks"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)  # fmt: skip
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert res.returncode == 2, lines
    assert lines[0].startswith("error: MLflow refused the export to databricks"), lines
    assert not any("WARNING" in ln for ln in lines), lines
