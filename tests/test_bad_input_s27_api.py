"""Python API input refused in one line (round 27, from a bad-input audit): a positive number
setting past float32's range, the dtype it meets the tensors in, is refused where it is given,
with the CLI's rule (``fields.POSITIVE_RANGE``): ``ClipParams(agc_eps=1e39)`` ended mid-run in
torch's overflow traceback, ``ProbeConfig(spike_z=1e-320)`` (0 in float32) was taken by
``SpikeMonitor`` without a word."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from andrea_diag.clip_params import ClipParams
from andrea_diag.config import ProbeConfig, RunConfig
from andrea_diag.errors import UserError
from andrea_diag.monitor import SpikeMonitor


@pytest.mark.parametrize(
    ("field", "value"),
    [("agc_eps", 1e39), ("agc_lambda", 1e-320), ("zclip_z", 1e31), ("spam_theta", 1e300),
     ("skip_z", 5e-324), ("agc_eps", 10**400)],  # an int past float's range: OverflowError
)  # fmt: skip
def test_clip_params_refuse_a_positive_value_past_float32s_range(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"^--{field.replace('_', '-')} must be from 1e-30 to"):
        dataclasses.replace(ClipParams(), **{field: value}).validate()


@pytest.mark.parametrize("spike_z", [1e-320, 1e31])
def test_spike_monitor_refuses_a_spike_z_past_float32s_range_before_any_output(
    tmp_path: Path, spike_z: float
) -> None:
    model = torch.nn.Linear(2, 2)
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=r"^SpikeMonitor: spike_z must be from 1e-30 to 1e\+30"):
        SpikeMonitor(model, torch.optim.AdamW(model.parameters()), out,
                     probes=ProbeConfig(spike_z=spike_z))  # fmt: skip
    assert not out.exists()


def test_a_run_config_with_an_lr_that_overflows_adams_step_is_one_user_error() -> None:
    with pytest.raises(UserError, match=r"^--lr must be from 1e-30 to 1e\+30, got 1e\+38$"):
        RunConfig(lr=1e38).resolve()
