"""Parity review (s23): ``ClippedAdamW`` against ``torch.optim.AdamW`` in torch 2.13, where
tests/test_parity_s21_adamw.py and tests/test_fused_adamw.py do not pin it: the words of the
hyper-parameter errors, and parameters on the ``meta`` device.

    pytest tests/test_parity_s23_adamw.py -q
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from andrea_diag.clip.fused_adamw import ClippedAdamW

BAD = {
    "lr -1": {"lr": -1.0},
    "lr nan": {"lr": math.nan},
    "eps -1": {"eps": -1.0},
    "eps nan": {"eps": math.nan},
    "beta1 1.0": {"betas": (1.0, 0.9)},
    "beta1 -0.1": {"betas": (-0.1, 0.9)},
    "beta2 1.0": {"betas": (0.9, 1.0)},
    "beta2 nan": {"betas": (0.9, math.nan)},
    "weight_decay -0.1": {"weight_decay": -0.1},
    "weight_decay nan": {"weight_decay": math.nan},
}


def _message(cls: Any, kwargs: dict) -> str:
    with pytest.raises(ValueError) as info:
        cls([torch.nn.Parameter(torch.zeros(2))], **kwargs)
    return str(info.value)


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_hyperparameter_raises_torchs_value_error_message(case: str) -> None:
    """Ours said "invalid learning rate: -1.0" and "invalid betas: (0.9, 1.0)" where torch says
    "Invalid learning rate: -1.0" and "Invalid beta parameter at index 1: 1.0"; code and tests
    that match torch's words missed ours."""
    assert _message(ClippedAdamW, BAD[case]) == _message(torch.optim.AdamW, BAD[case])


def test_parameters_on_the_meta_device_step_like_torchs_adamw() -> None:
    """torch's AdamW steps meta parameters (shape tracing); ours crashed in the clip's final
    stage ("cannot repeat_interleave a meta tensor without output_size")."""
    shapes = []
    for cls in (torch.optim.AdamW, ClippedAdamW):
        p = torch.nn.Parameter(torch.zeros(3, 2, device="meta"))
        p.grad = torch.zeros(3, 2, device="meta")
        opt = cls([p])
        opt.step()
        shapes.append(
            (p.shape, p.device, opt.state[p]["exp_avg"].shape, opt.state[p]["step"].dtype)
        )
    assert shapes[0] == shapes[1]
