"""Parity review (s24): ``andrea_diag.clip_grad_norm_`` against ``torch.nn.utils.clip_grad_norm_``
in torch 2.13, where the s21 and s23 reviews and tests/test_clip_torch_contract.py do not pin
it: a gradient of an integer or bool dtype (set by hand on a plain tensor).

    pytest tests/test_parity_s24_clip.py -q
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from andrea_diag import clip_grad_norm_, clip_grad_norm_with_stats


def _params(dtype: torch.dtype) -> list[torch.Tensor]:
    """A float parameter with a gradient, then a plain tensor whose ``.grad`` is ``dtype``."""
    floating = torch.nn.Parameter(torch.zeros(2))
    floating.grad = torch.tensor([3.0, 4.0])
    other = torch.zeros(2, dtype=dtype)
    other.grad = torch.tensor([3, 4]).to(dtype)
    return [floating, other]


def _error(call: Callable[[list[torch.Tensor]], Any], params: list[torch.Tensor]) -> str:
    with pytest.raises(RuntimeError) as info:
        call(params)
    return str(info.value)


@pytest.mark.parametrize("norm_type", [2.0, 1, math.inf, 3.0])
@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.bool])
def test_an_integer_or_bool_gradient_raises_torchs_error_before_any_gradient_changes(
    dtype: torch.dtype, norm_type: float
) -> None:
    """torch raises "linalg.vector_norm: Expected a floating point or complex tensor as input.
    Got Long"; ours returned the norm truncated to the integer dtype and scaled the integer
    gradient into zeros."""
    theirs = _error(lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0, norm_type), _params(dtype))
    assert "Expected a floating point or complex tensor" in theirs
    for clip in (clip_grad_norm_, clip_grad_norm_with_stats):
        params = _params(dtype)
        assert _error(lambda ps, clip=clip: clip(ps, 1.0, norm_type), params) == theirs
        assert params[0].grad.tolist() == [3.0, 4.0]  # nothing was scaled before the error
        assert params[1].grad.tolist() == torch.tensor([3, 4]).to(dtype).tolist()
