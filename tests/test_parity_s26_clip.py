"""The drop-in ``clip_grad_norm_`` refuses a NaN ``norm_type`` (round 26), as it refuses a NaN
``max_norm``: torch's own function, which ours handed the call to (NaN is no p it sums), makes
every gradient NaN, and the call was accepted. ``clip_grad_norm_with_stats`` and ClippedAdamW
refused it already. Zero and -inf keep torch's meaning (torch's own function runs them).
"""

from __future__ import annotations

import math

import pytest
import torch

from andrea_diag import clip_grad_norm_


def _param() -> torch.nn.Parameter:
    p = torch.nn.Parameter(torch.arange(1.0, 6.0))
    p.grad = torch.arange(-2.0, 3.0)
    return p


def test_a_nan_norm_type_is_refused_before_any_gradient_changes() -> None:
    p = _param()
    before = p.grad.clone()
    with pytest.raises(ValueError, match="norm_type must be a number, got nan"):
        clip_grad_norm_([p], 1.0, norm_type=math.nan)
    assert torch.equal(p.grad, before)


@pytest.mark.parametrize("norm_type", [0.0, -math.inf], ids=["zero", "minus-inf"])
def test_zero_and_minus_inf_norm_types_keep_torchs_meaning(norm_type: float) -> None:
    ours, theirs = _param(), _param()
    got = clip_grad_norm_([ours], 1.0, norm_type=norm_type)
    want = torch.nn.utils.clip_grad_norm_([theirs], 1.0, norm_type=norm_type)
    assert torch.equal(got, want) and torch.equal(ours.grad, theirs.grad)
