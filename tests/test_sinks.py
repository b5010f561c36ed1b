"""Metric sinks (andrea_diag/sinks.py): SpikeMonitor(loggers=[...]) feeds every row to each sink
under the TensorBoard tag names; W&B (offline) and MLflow (file store) are read back with their
own readers, no network. The real back ends are skipped where their extra is not installed."""

from __future__ import annotations

import math

import pytest
import torch
from monitor_helpers import monitored_update
from wandb_records import wandb_records

from andrea_diag.monitor import SpikeMonitor
from andrea_diag.record import load_run
from andrea_diag.sinks import MLflowSink, WandbSink, _scalars


class Recording:
    def __init__(self) -> None:
        self.rows, self.closed, self.got_summary = [], False, None

    def log(self, row):
        self.rows.append(dict(row))

    def events(self, events):
        self.n_events = len(events)

    def summary(self, summary):
        self.got_summary = summary

    def close(self):
        self.closed = True


def _train(tmp_path, loggers, nan_at: int | None = None):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with SpikeMonitor(model, opt, tmp_path / "run", shadow=False, loggers=loggers) as mon:
        for u in range(1, 5):
            x = torch.randn(4, 3) * (float("nan") if u == nan_at else 1.0)
            loss = model(x).square().mean()
            monitored_update(mon, opt, loss)
    return load_run(tmp_path / "run")["metrics"]


def test_every_row_reaches_every_logger_and_the_logger_is_closed(tmp_path):
    sink = Recording()
    metrics = _train(tmp_path, [sink])
    assert [r["update"] for r in sink.rows] == metrics["update"].tolist()
    assert [r["loss"] for r in sink.rows] == pytest.approx(metrics["loss"].tolist())
    assert sink.closed and sink.got_summary["n_updates"] == 4


def test_a_nan_loss_is_kept_for_wandb_and_left_out_for_mlflow():
    row = {"update": 3, "loss": float("nan"), "grad_norm": math.inf, "lr": 0.1}
    kept = _scalars(row, keep_nonfinite=True)
    assert math.isnan(kept["loss/train"]) and kept["grad_norm/total"] == math.inf
    assert "loss/train" not in _scalars(row, keep_nonfinite=False)


@pytest.mark.slow
def test_wandb_offline_run_holds_the_metrics(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    sink = WandbSink(project="t", dir=tmp_path / "wb", mode="offline")
    metrics = _train(tmp_path, [sink])
    # finish() returns before W&B's service has written the file; stopping it waits for that
    __import__("wandb").teardown()
    files = list((tmp_path / "wb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    losses = {}
    for rec in wandb_records(files[0]):
        if rec.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): i.value_json for i in rec.history.item}
            if "loss/train" in items:
                losses[int(items["_step"])] = float(items["loss/train"])
    assert losses == pytest.approx(dict(zip(metrics["update"], metrics["loss"], strict=True)))


@pytest.mark.slow
def test_mlflow_file_store_holds_the_metrics(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    uri = (tmp_path / "mlruns").as_uri()
    metrics = _train(tmp_path, [MLflowSink(experiment="t", tracking_uri=uri)])
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.search_runs([client.get_experiment_by_name("t").experiment_id])[0]
    history = client.get_metric_history(run.info.run_id, "loss/train")
    assert {m.step: m.value for m in history} == pytest.approx(
        dict(zip(metrics["update"], metrics["loss"], strict=True))
    )
    assert run.info.status == "FINISHED"


def test_mlflow_takes_config_keys_it_would_refuse_under_names_it_accepts(tmp_path):
    """A meta key such as "schedule (cosine)", or a "../x" planted in an exported run's
    config.json, was refused by MLflow and with it the whole export."""
    mlflow = pytest.importorskip("mlflow")
    uri = (tmp_path / "mlruns").as_uri()
    config = {"lr": 1e-3, "schedule (cosine)": True, "../../x": 1, "": 2, "a" * 300: 3}
    sink = MLflowSink(experiment="t", tracking_uri=uri, config=config)
    sink.close()
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.search_runs([client.get_experiment_by_name("t").experiment_id])[0]
    assert run.data.params == {
        "lr": "0.001", "schedule _cosine_": "true", "____x": "1", "_": "2", "a" * 246: "3"
    }  # fmt: skip
    assert [p.name for p in tmp_path.iterdir()] == ["mlruns"]
