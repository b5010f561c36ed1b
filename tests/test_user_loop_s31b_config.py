"""``config.json`` of a user's loop records the optimizer's settings torch took as tensors.

torch's Adam/AdamW take a tensor ``lr`` (and tensor betas, a tensor weight decay); the monitor's
``param_groups`` left a tensor ``lr`` out, so a reviewer could not read the run's learning rate.
"""

from __future__ import annotations

import json

import pytest
import torch

from andrea_diag.monitor import SpikeMonitor


def _groups(tmp_path, optimizer, model) -> list[dict]:
    with SpikeMonitor(model, optimizer, tmp_path / "run", lockin=False):
        pass
    return json.loads((tmp_path / "run" / "config.json").read_text())["param_groups"]


def test_a_tensor_lr_and_tensor_betas_are_recorded_as_numbers(tmp_path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 3))
    opt = torch.optim.Adam(
        model.parameters(),
        lr=torch.tensor(1e-3),
        betas=(torch.tensor(0.9), torch.tensor(0.999)),
    )
    (group,) = _groups(tmp_path, opt, model)
    assert group["lr"] == pytest.approx(1e-3)
    assert group["betas"] == pytest.approx([0.9, 0.999])
    assert group["eps"] == 1e-8


def test_a_setting_json_cannot_hold_is_left_out_and_the_rest_kept(tmp_path) -> None:
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.param_groups[0]["mask"] = torch.ones(3)  # a user's own many-valued group entry
    opt.param_groups[0]["pair"] = (torch.ones(2), 1.0)
    (group,) = _groups(tmp_path, opt, model)
    assert "mask" not in group and "pair" not in group
    assert group["lr"] == 0.1
