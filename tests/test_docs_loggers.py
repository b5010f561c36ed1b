"""docs/integrations.md's Loggers section runs as written: the SpikeMonitor(loggers=[...])
snippet, and its ``andrea-diag export --wandb/--mlflow`` lines on a cascade directory."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app

PAGE = Path(__file__).resolve().parents[1] / "docs" / "integrations.md"


def _section() -> str:
    text = PAGE.read_text()
    return text[text.index("<!-- loggers-snippet -->") : text.index("<!-- /loggers-snippet -->")]


def _block(lang: str) -> str:
    return re.search(rf"```{lang}\n(.*?)```", _section(), re.S).group(1)


@pytest.mark.slow  # wandb starts its service
def test_the_loggers_snippet_fills_both_sinks(monkeypatch, capsys):
    pytest.importorskip("wandb")
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("WANDB_SILENT", "true")
    ns: dict = {}
    exec(compile(_block("python"), "docs/integrations.md:loggers-snippet", "exec"), ns)
    __import__("wandb").teardown()  # the offline files are complete once the service stops
    out = Path(ns["out"])
    assert len(list(out.glob("wandb/offline-run-*/run-*.wandb"))) == 1
    client = mlflow.MlflowClient(tracking_uri=f"file:{out}/mlruns")
    [run] = client.search_runs([client.get_experiment_by_name("mine").experiment_id])
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss/train")] == [
        1, 2, 3, 4, 5
    ]  # fmt: skip


@pytest.mark.slow
def test_the_export_lines_run_on_a_cascade(make_run, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)  # the lines' runs/... paths, relative to here
    for arm in ("none", "global"):
        make_run(Path("runs/cascade-tiny-a") / arm, clip=arm, n_updates=8, spikes=(4,))
    Path("runs/cascade-tiny-a/cascade.json").write_text(json.dumps({"arms": ["none", "global"]}))
    lines = [ln.split("#")[0] for ln in _block("bash").splitlines()]
    exports = [shlex.split(ln)[1:] for ln in lines if ln.startswith("andrea-diag export")]
    assert {a[1] for a in exports} == {"--wandb", "--mlflow"}
    for args in exports:
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
    assert len(list(Path("runs/wb/wandb").glob("offline-run-*/run-*.wandb"))) == 2
    assert Path("runs/mlruns").is_dir()
