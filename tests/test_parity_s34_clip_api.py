"""Peer parity of the clip API (session 34's audit against torch 2.13):

- ``error_if_nonfinite=True`` raises, as torch's does, where one fp16 gradient's own norm is past
  65504 beside float32 gradients (ours, accumulated in float32, was finite and clipped, so the
  flag stopped guarding; the stats variant's docstring already promised the raise);
- a ``max_norm`` of the caller's own number type, read by ``float()`` through ``__float__`` or
  ``__index__``, is taken as torch's clip takes it (ours refused it as "not a real number").
"""

from __future__ import annotations

import pytest
import torch

from andrea_diag import clip_grad_norm_, clip_grad_norm_with_stats
from andrea_diag.clip.max_norm import check_max_norm


def _mixed() -> list[torch.nn.Parameter]:
    a = torch.nn.Parameter(torch.zeros(4, dtype=torch.float16))
    a.grad = torch.full((4,), 40000.0, dtype=torch.float16)  # its own norm, 80000: fp16 inf
    b = torch.nn.Parameter(torch.zeros(3))
    b.grad = torch.ones(3)
    return [a, b]


@pytest.mark.parametrize("clip", [clip_grad_norm_, torch.nn.utils.clip_grad_norm_])
def test_error_if_nonfinite_raises_for_an_fp16_norm_past_65504_beside_float32_ones(clip) -> None:
    params = _mixed()
    with pytest.raises(RuntimeError, match="non-finite, so it cannot be clipped"):
        clip(params, 1.0, error_if_nonfinite=True)
    assert torch.equal(params[0].grad, torch.full((4,), 40000.0, dtype=torch.float16))
    assert torch.equal(params[1].grad, torch.ones(3))  # raised before any gradient changed


@pytest.mark.parametrize("mode", ["global", "per-tensor", "none"])
def test_the_stats_variant_raises_for_it_in_every_mode(mode: str) -> None:
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_with_stats(_mixed(), 1.0, mode=mode, error_if_nonfinite=True)


def test_an_fp16_norm_just_under_65504_beside_float32_ones_does_not_raise() -> None:
    params = _mixed()
    params[0].grad.fill_(30000.0)  # norm 60000: finite in fp16, as in torch
    total = clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    assert torch.isfinite(total) and params[0].grad.abs().max() < 1.0


def test_without_the_flag_the_documented_difference_stands() -> None:
    params = _mixed()
    total = clip_grad_norm_(params, 1.0)
    assert torch.isfinite(total) and float(params[1].grad[0]) > 0  # torch's would be inf, 0


class _Quantity:
    def __float__(self) -> float:
        return 0.5


class _Count:
    def __index__(self) -> int:
        return 2


@pytest.mark.parametrize(("value", "want"), [(_Quantity(), 0.5), (_Count(), 2.0)])
def test_a_max_norm_that_float_reads_through_its_own_type_is_taken_as_torch_takes_it(
    value: object, want: float
) -> None:
    assert check_max_norm(value) == want
    ours, theirs = _mixed()[1:], _mixed()[1:]
    ours[0].grad.mul_(10)
    theirs[0].grad.mul_(10)
    clip_grad_norm_(ours, value)
    torch.nn.utils.clip_grad_norm_(theirs, value)
    assert torch.allclose(ours[0].grad, theirs[0].grad)


@pytest.mark.parametrize("value", [b"1", bytearray(b"1"), "1", True, object()])
def test_text_bytes_bools_and_objects_stay_refused(value: object) -> None:
    with pytest.raises(TypeError, match="max_norm must be a real number"):
        check_max_norm(value)


def test_an_array_of_one_or_more_dimensions_is_no_scalar_max_norm() -> None:
    import numpy as np

    with pytest.raises(TypeError, match="max_norm must be a real number"):
        check_max_norm(np.array([1.0, 2.0]))
    assert check_max_norm(np.float32(0.5)) == 0.5 and check_max_norm(np.array(2.0)) == 2.0


def test_max_norm_shape_error_is_still_importable_from_the_clip_api() -> None:
    from andrea_diag.clip.api import MaxNormShapeError

    with pytest.raises(MaxNormShapeError):
        check_max_norm(torch.ones(2))
