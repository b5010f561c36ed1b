"""``SpikeMonitor(...)`` refuses a bad argument when it is made, with one ``TypeError`` or
``ValueError`` naming it, before the run directory exists (``andrea_diag/monitor_checks.py``);
what it accepted before still works."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from monitor_helpers import monitored_update

from andrea_diag.config import ProbeConfig
from andrea_diag.monitor import SpikeMonitor

VOCAB = 10


class _Sink:
    """The smallest metric sink: andrea_diag.sinks.MetricSink's four methods."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def log(self, row: Any) -> None:
        self.rows.append(dict(row))

    def events(self, events: Any) -> None:
        pass

    def summary(self, summary: Any) -> None:
        pass

    def close(self) -> None:
        pass


class _LogOnly:
    def log(self, row: Any) -> None:
        pass


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, 4), torch.nn.Linear(4, VOCAB))


def _loss(model: torch.nn.Module) -> torch.Tensor:
    return model(torch.randint(0, VOCAB, (2, 5))).logsumexp(-1).mean()


BAD = [
    ({"total_steps": 0}, ValueError, "total_steps must be a whole number of at least 1, got 0"),
    ({"total_steps": -3}, ValueError, "total_steps must be a whole number of at least 1"),
    ({"total_steps": True}, TypeError, "total_steps must be an int, got bool"),
    ({"total_steps": 2.5}, TypeError, "total_steps must be an int, got float"),
    ({"total_steps": "5"}, TypeError, "total_steps must be an int, got str"),
    ({"seed": "a"}, TypeError, "seed must be an int, got str"),
    ({"seed": 1.5}, TypeError, "seed must be an int, got float"),
    ({"seed": 2**70}, ValueError, "seed must be at most 4294967295"),
    ({"vocab_size": 0}, ValueError, "vocab_size must be a whole number of at least 1"),
    ({"vocab_size": "10"}, TypeError, "vocab_size must be an int, got str"),
    ({"block_size": -1}, ValueError, "block_size must be a whole number of at least 1"),
    ({"spike_z": -1.0}, ValueError, "spike_z must be a positive number, got -1.0"),
    ({"spike_z": float("nan")}, ValueError, "spike_z must be a positive number"),
    ({"spike_window": "10"}, TypeError, "spike_window must be int, got str"),
    ({"spike_window": 0}, ValueError, "spike_window must be a whole number of at least 1"),
    ({"boundary_k": -1}, ValueError, "boundary_k must be a whole number of at least 0"),
    ({"lockin_every": 0}, ValueError, "lockin_every must be a whole number of at least 1"),
    ({"shadow": "no"}, TypeError, "shadow must be bool | None, got str"),
    ({"per_layer": 1}, TypeError, "per_layer must be bool, got int"),
    ({"probes": {"spike_z": 3.0}}, TypeError, "probes must be a ProbeConfig, got dict"),
    ({"probes": ProbeConfig(spike_window=0)}, ValueError, "spike_window must be a whole"),
    ({"prompts": {"a": torch.tensor([1, VOCAB])}}, ValueError,
     f"prompt 'a' has token id {VOCAB}, outside the vocabulary [0, {VOCAB})"),
    ({"prompts": {"a": torch.tensor([-1, 2])}}, ValueError, "prompt 'a' has token id -1"),
    ({"prompts": {"a": torch.tensor([1.0, 2.0])}}, TypeError, "holds torch.float32, not integer"),
    ({"prompts": [torch.tensor([1])]}, TypeError, "prompts must be a dict of name -> token ids"),
    ({"prompts": {"a": torch.tensor([1]), "b": "hello"}}, TypeError, "prompt 'b' is not token"),
    ({"loggers": [object()]}, TypeError,
     "loggers[0] (object) is not a metric sink: it has no log, events, summary, close"),
    ({"loggers": [_Sink(), _LogOnly()]}, TypeError,
     "loggers[1] (_LogOnly) is not a metric sink: it has no events, summary, close"),
    ({"loggers": "wandb"}, TypeError, "loggers must be a list of sinks, got str"),
    ({"loggers": _Sink()}, TypeError, "pass loggers=[sink]"),
    ({"meta": ["x"]}, TypeError, "meta must be a dict, got list"),
    ({"layer_groups": ["h00.mlp"]}, TypeError, "layer_groups must be a callable or a dict"),
    ({"tokenizer": "gpt2"}, TypeError, "tokenizer must have a decode(list[int]) method, got str"),
    ({"resume": "yes"}, TypeError, "resume must be a bool, got str"),
]  # fmt: skip


@pytest.mark.parametrize(("kwargs", "error", "message"), BAD)
def test_a_bad_monitor_argument_is_refused_at_construction_before_any_output(
    tmp_path: Path, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    model = _model()
    out = tmp_path / "run"
    with pytest.raises(error) as err:
        SpikeMonitor(model, torch.optim.AdamW(model.parameters()), out, **kwargs)
    assert message in str(err.value) and str(err.value).startswith("SpikeMonitor: ")
    assert not out.exists()


def _other_model_optimizer() -> torch.optim.Optimizer:
    return torch.optim.AdamW(_model().parameters())


@pytest.mark.parametrize(
    ("model", "optimizer", "error", "message"),
    [
        (None, "own", TypeError, "model must be a torch.nn.Module, got NoneType"),
        ("a model", "own", TypeError, "model must be a torch.nn.Module, got str"),
        ("own", None, TypeError, "optimizer must be a torch.optim.Optimizer, got NoneType"),
        ("own", "adamw", TypeError, "optimizer must be a torch.optim.Optimizer, got str"),
        ("own", "other", ValueError, "none of the optimizer's parameters is a trainable"),
        ("frozen", "own", ValueError, "the model has no trainable parameters"),
    ],
)
def test_a_wrong_model_or_optimizer_is_refused_at_construction(
    tmp_path: Path, model: Any, optimizer: Any, error: type[Exception], message: str
) -> None:
    own = _model()
    if model == "frozen":
        own.requires_grad_(False)
    opt = {
        "own": torch.optim.SGD(own.parameters(), lr=0.1),
        "other": _other_model_optimizer(),
    }.get(optimizer, optimizer)
    with pytest.raises(error, match=message):
        SpikeMonitor(own if model in ("own", "frozen") else model, opt, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("where", ["out_dir", "out_dir_inside", "tensorboard_dir"])
def test_an_output_folder_that_is_a_file_is_refused_before_any_output(
    tmp_path: Path, where: str
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    model = _model()
    out = {"out_dir": afile, "out_dir_inside": afile / "run"}.get(where, tmp_path / "run")
    kwargs = {"tensorboard_dir": afile} if where == "tensorboard_dir" else {}
    if where == "tensorboard_dir":
        pytest.importorskip("tensorboardX", reason="the writer is checked first otherwise")
    name = "tensorboard_dir" if where == "tensorboard_dir" else "out_dir"
    with pytest.raises(ValueError, match=f"{name} .* a file"):
        SpikeMonitor(model, torch.optim.SGD(model.parameters(), lr=0.1), out, **kwargs)
    assert afile.read_text() == "keep me"
    assert not (tmp_path / "run").exists()


def test_what_the_monitor_accepted_before_still_runs(tmp_path: Path) -> None:
    import numpy as np

    model = _model()
    model[0].weight.requires_grad_(False)  # a partly frozen model: the optimizer steps the rest
    extra = torch.nn.Parameter(torch.ones(()))  # a tensor outside the model, stepped too
    opt = torch.optim.SGD([*model.parameters(), extra], lr=0.1)
    sink = _Sink()
    with SpikeMonitor(
        model, opt, str(tmp_path / "run"), total_steps=np.int64(3), seed=np.int32(7),
        prompts={"a": [1, 2, 3], "b": torch.arange(4, dtype=torch.int32), "empty": []},
        loggers=(s for s in [sink]), vocab_size=VOCAB, block_size=5, spike_z=6,
        probes=ProbeConfig(shadow=False), layer_groups={"1": "head.head"}, meta={"k": 1},
    ) as mon:  # fmt: skip
        for _ in range(3):
            monitored_update(mon, opt, _loss(model))
    assert [r["update"] for r in sink.rows] == [1, 2, 3]
