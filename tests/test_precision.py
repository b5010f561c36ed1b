"""Mixed precision in the trainer: bf16 autocast, fp16 autocast + GradScaler (document 002)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from andrea_diag.config import RunConfig
from andrea_diag.data import BatchPlan, Mixer, PreparedData, prepare_data
from andrea_diag.errors import UserError
from andrea_diag.train.loop import Trainer


@pytest.fixture(scope="module")
def data() -> PreparedData:
    return prepare_data({}, seed=0)


def _trainer(data: PreparedData, tmp: Path, precision: str, **kw) -> Trainer:
    cfg = RunConfig(size="tiny", steps=6, clip="global", device="cpu", precision=precision, **kw)
    cfg = cfg.resolve()
    plan = BatchPlan(data, Mixer(seed=0), seed=0, micro_batch=cfg.micro_batch,
                     accum=cfg.accum, seq_len=cfg.seq_len)  # fmt: skip
    return Trainer(cfg, tmp / precision, data, plan)


def test_an_fp16_overflow_skips_the_update_halves_the_scale_and_is_recorded(
    data: PreparedData, tmp_path: Path
) -> None:
    tr = _trainer(data, tmp_path, "fp16", inject=["nonfinite@3"])
    rows = [tr.train_update(1), tr.train_update(2)]
    before = [p.detach().clone() for p in tr.params]
    rows.append(tr.train_update(3))  # the injected overflow
    assert all(torch.equal(b, p.detach()) for b, p in zip(before, tr.params, strict=True))
    rows.append(tr.train_update(4))
    assert [r["applied"] for r in rows] == [True, True, False, True]
    assert rows[2]["nonfinite"] is True  # attempted, not applied
    assert rows[3]["loss_scale"] == rows[2]["loss_scale"] / 2 == 2.0**15
    assert tr.precision.state_dict()["scaler"]["scale"] == 2.0**15


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_the_clipper_sees_unscaled_gradients(
    data: PreparedData, tmp_path: Path, precision: str
) -> None:
    ref = _trainer(data, tmp_path / "ref", "fp32").train_update(1)
    row = _trainer(data, tmp_path / "low", precision).train_update(1)
    # a scaled gradient would be 65536x larger; low-precision forward passes move it by ~1%
    assert row["grad_norm"] == pytest.approx(ref["grad_norm"], rel=0.05)
    assert row["loss"] == pytest.approx(ref["loss"], rel=0.01)
    assert row["grad_norm_post"] <= 1.0 + 1e-5  # clipped in true units
    assert ("loss_scale" in row) == (precision == "fp16")


def test_an_unknown_precision_is_one_clear_error() -> None:
    """The precision registry checks the name (the torch-free config cannot see it): the
    commands before any work starts, and the trainer's make_precision for library callers."""
    from andrea_diag.commands.options import checked
    from andrea_diag.train.components import UnknownPrecision, make_precision

    with pytest.raises(UserError, match="unknown precision 'fp8'"):
        checked(RunConfig(precision="fp8"))
    with pytest.raises(UnknownPrecision, match="unknown precision 'fp8'") as err:
        make_precision("fp8", torch.device("cpu"))
    assert isinstance(err.value, ValueError) and "fp32, bf16, fp16" in (err.value.hint or "")
