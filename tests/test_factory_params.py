"""``--model MODULE:FACTORY`` must return a module with something to train: a model with no
trainable parameters is one line before any output, not an unpack error in the trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import ModelConfig, RunConfig
from andrea_diag.errors import UserError
from andrea_diag.factories import build_model

BASE = ["--size", "tiny", "--steps", "2", "--device", "cpu"]


class _Logits(torch.nn.Module):
    """Right-shaped logits from buffers alone (``frozen``: one parameter, requires_grad off)."""

    def __init__(self, vocab: int, frozen: bool = False) -> None:
        super().__init__()
        self.vocab = vocab
        if frozen:
            self.bias = torch.nn.Parameter(torch.zeros(vocab), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*ids.shape, self.vocab) + getattr(self, "bias", 0.0)


def no_parameters(config: ModelConfig) -> torch.nn.Module:
    return _Logits(config.vocab_size)


def frozen_parameters(config: ModelConfig) -> torch.nn.Module:
    return _Logits(config.vocab_size, frozen=True)


def returns_none(config: ModelConfig) -> Any:
    return None


def returns_a_class(config: ModelConfig) -> Any:
    return _Logits


@pytest.mark.parametrize("factory", ["no_parameters", "frozen_parameters"])
def test_a_factory_model_with_no_trainable_parameters_is_refused_before_any_output(
    factory: str, tmp_path: Path
) -> None:
    spec = f"test_factory_params:{factory}"
    with pytest.raises(UserError, match="returned a model with no trainable parameters"):
        build_model(RunConfig(size="tiny", model_factory=spec).resolve())
    out = tmp_path / "never"
    res = CliRunner().invoke(app, ["train", *BASE, "--model", spec, "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert f"--model {spec!r} returned a model with no trainable parameters" in res.output
    assert "Traceback" not in res.output and not out.exists()


@pytest.mark.parametrize(
    ("factory", "message"),
    [("returns_none", "returned a NoneType, not a torch.nn.Module"),
     ("returns_a_class", "returned a type, not a torch.nn.Module")],
)  # fmt: skip
def test_a_factory_returning_no_module_stays_one_line(factory: str, message: str) -> None:
    spec = f"test_factory_params:{factory}"
    with pytest.raises(UserError, match=message):
        build_model(RunConfig(size="tiny", model_factory=spec).resolve())
