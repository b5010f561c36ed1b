"""``export --wandb`` / ``export --mlflow``: a finished cascade's every arm becomes one W&B
offline run / one MLflow run in a file store, read back with each tool's own reader (no
network); a missing extra is one line naming it."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner
from wandb_records import wandb_history, wandb_records

from andrea_diag.cli import app
from andrea_diag.record import load_run

runner = CliRunner()
ARMS = ("none", "global")


@pytest.fixture
def cascade(make_run, tmp_path) -> Path:
    """A two-arm cascade; the unclipped arm diverges at update 11 (NaN loss, inf norm)."""
    casc = tmp_path / "runs" / "cascade-tiny-a"
    for arm in ARMS:
        run = make_run(casc / arm, clip=arm, n_updates=12, spikes=(5,))
        if arm == "none":
            m = load_run(run)["metrics"]
            end = m["update"] >= 11
            m.loc[end, "loss"], m.loc[end, "grad_norm"] = math.nan, math.inf
            m.loc[end, "nonfinite"] = True
            m.to_parquet(run / "metrics.parquet", index=False)
    (casc / "cascade.json").write_text(json.dumps({"arms": list(ARMS)}))
    return casc


def _cli(*args: str):
    res = runner.invoke(app, ["export", *args])
    assert "Traceback" not in res.output
    return res


@pytest.mark.slow  # wandb starts its core process once per run
def test_export_wandb_writes_one_offline_run_per_arm(cascade, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "online")  # the export is offline whatever this says
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)  # would be used, were anything sent
    out = tmp_path / "wb"
    res = _cli("--wandb", str(cascade), "--out", str(out))
    assert res.exit_code == 0, res.output
    files = sorted(out.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 2
    by_name = {}
    for f in files:
        runs = [r.run for r in wandb_records(f)
                if r.WhichOneof("record_type") == "run"]  # fmt: skip
        by_name[runs[0].display_name] = wandb_history(f)
    assert set(by_name) == {"cascade-tiny-a/none", "cascade-tiny-a/global"}
    for arm in ARMS:
        metrics = load_run(cascade / arm)["metrics"]
        hist = by_name[f"cascade-tiny-a/{arm}"]
        assert sorted(hist) == metrics["update"].tolist()
        for u, loss in zip(metrics["update"], metrics["loss"], strict=True):
            got = float(hist[u]["loss/train"])  # W&B writes NaN / Infinity as JSON's names
            assert (math.isnan(got) and math.isnan(loss)) or got == pytest.approx(loss)
    assert float(by_name["cascade-tiny-a/none"][11]["grad_norm/total"]) == math.inf
    assert "wandb sync" in res.output
    assert os.environ["WANDB_MODE"] == "online"  # the caller's setting is back


@pytest.mark.slow
def test_export_mlflow_logs_each_arm_to_the_file_store(cascade, tmp_path):
    mlflow = pytest.importorskip("mlflow")
    store = tmp_path / "mlruns"
    res = _cli("--mlflow", str(store), "--project", "mine", str(cascade))
    assert res.exit_code == 0, res.output
    client = mlflow.MlflowClient(tracking_uri=store.as_uri())
    exp = client.get_experiment_by_name("mine")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == {"cascade-tiny-a/none", "cascade-tiny-a/global"}
    for arm in ARMS:
        metrics = load_run(cascade / arm)["metrics"]
        run = runs[f"cascade-tiny-a/{arm}"]
        history = client.get_metric_history(run.info.run_id, "loss/train")
        finite = metrics[metrics["loss"].notna()]  # MLflow refuses NaN: those are left out
        assert {m.step: m.value for m in history} == pytest.approx(
            dict(zip(finite["update"], finite["loss"], strict=True))
        )
        # each point carries the row's own time (epoch ms), not the export's
        stamps = dict(zip(metrics["update"], metrics["unix_time_s"], strict=True))
        assert all(abs(m.timestamp - 1000 * stamps[m.step]) < 1 for m in history)
        assert run.info.status == "FINISHED"
        assert json.loads(run.data.params["clip"]) == arm


@pytest.mark.parametrize(("flag", "extra"), [("--wandb", "wandb"), ("--mlflow", "mlflow")])
def test_a_missing_extra_is_one_line_naming_it(flag, extra, cascade, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, extra, None)  # as if not installed
    args = [flag, *([str(tmp_path / "mlruns")] if flag == "--mlflow" else [])]
    res = _cli(*args, str(cascade), "--out", str(tmp_path / "o"))
    assert res.exit_code != 0
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1
    assert f"pip install 'andrea-diag[{extra}]'" in res.output
    assert not (tmp_path / "o").exists() and not (tmp_path / "mlruns").exists()


def test_no_format_names_every_choice(cascade):
    res = _cli(str(cascade))
    assert res.exit_code != 0 and "--wandb" in res.output and "--mlflow" in res.output


@pytest.mark.slow
def test_a_store_mlflow_cannot_use_is_one_line(cascade, tmp_path):
    pytest.importorskip("mlflow")
    res = _cli("--mlflow", "nosuchscheme://x", str(cascade))
    assert res.exit_code != 0
    assert [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert "MLflow refused the export" in res.output


@pytest.mark.slow
def test_mlflow_holds_a_tag_that_is_also_the_folder_of_others(cascade, tmp_path):
    """eval/loss beside eval/loss/<source>: the file store keeps each metric as a file named by
    its path, so the pooled one is eval/loss/all (it failed the export before)."""
    mlflow = pytest.importorskip("mlflow")
    for arm in ARMS:
        m = load_run(cascade / arm)["metrics"]
        m["eval_loss"] = m["update"].map(lambda u: 3.0 + u if u % 4 == 0 else math.nan)
        m["eval_loss_gutenberg"] = m["eval_loss"] + 0.5
        m.to_parquet(cascade / arm / "metrics.parquet", index=False)
    store = tmp_path / "mlruns"
    res = _cli("--mlflow", str(store), str(cascade))
    assert res.exit_code == 0, res.output
    client = mlflow.MlflowClient(tracking_uri=store.as_uri())
    exp = client.get_experiment_by_name("andrea-diag")
    run = client.search_runs([exp.experiment_id])[0]
    pooled = client.get_metric_history(run.info.run_id, "eval/loss/all")
    source = client.get_metric_history(run.info.run_id, "eval/loss/gutenberg")
    assert {m.step: m.value for m in pooled} == {4: 7.0, 8: 11.0, 12: 15.0}
    assert {m.step: m.value for m in source} == {4: 7.5, 8: 11.5, 12: 15.5}


@pytest.mark.parametrize("user_set", [None, "5"])
def test_an_mlflow_export_gives_up_on_a_server_in_seconds_unless_told_otherwise(
    cascade, monkeypatch, user_set
):
    """MLflow's defaults retry an unreachable server for minutes; the export sets 1 retry and a
    10 s timeout for its own block only, and a value the user set wins."""
    mlflow = pytest.importorskip("mlflow")
    from andrea_diag import sinks

    seen = {}

    def refused(*args, **kwargs):
        seen.update({k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES",
                                                     "MLFLOW_HTTP_REQUEST_TIMEOUT")})  # fmt: skip
        raise mlflow.exceptions.MlflowException("unreachable")

    if user_set:
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", user_set)
    else:
        monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    monkeypatch.setattr(sinks, "MLflowSink", refused)
    res = _cli("--mlflow", "http://127.0.0.1:9", str(cascade))
    assert res.exit_code != 0 and "unreachable" in res.output
    assert seen == {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": user_set or "1",
                    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}  # fmt: skip
    assert os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT") is None  # restored after the export
