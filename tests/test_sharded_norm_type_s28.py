"""clip_grad_norm_sharded_ takes norm_type by the drop-in's rules (round 28c's leftover)."""

from __future__ import annotations

import pytest
import torch

from andrea_diag.clip.sharded import clip_grad_norm_sharded_


def _params() -> list[torch.nn.Parameter]:
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.tensor([3.0, -4.0, 0.0])
    return [p]


def test_a_bool_norm_type_is_refused_by_the_sharded_clip_as_by_the_drop_in() -> None:
    params = _params()
    with pytest.raises(TypeError, match="norm_type"):
        clip_grad_norm_sharded_(params, 1.0, norm_type=True)  # was the L1 norm, 7
    assert params[0].grad.tolist() == [3.0, -4.0, 0.0]


def test_a_norm_type_past_a_float_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="norm_type"):
        clip_grad_norm_sharded_(_params(), 1.0, norm_type=10**400)  # was a bare OverflowError
