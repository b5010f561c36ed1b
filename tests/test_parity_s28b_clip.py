"""Parity review (s28b): the clip API and ClippedAdamW's checks against torch 2.13.

- float8 gradients: torch's ``clip_grad_norm_`` raises NotImplementedError ("norm_cpu" not
  implemented for 'Float8_e4m3fn'); ours clipped them and returned a float8 norm (e4m3fn has
  no inf, its largest is 448), and ``error_if_nonfinite`` failed on the norm's own dtype.
  Now torch's own error, before any gradient changes, from the drop-in and the stats variant.
- a ``max_norm`` tensor of several (or no) elements: torch's ValueError; ours was a TypeError
  only (it is now both, so code written against either catches it).
- ClippedAdamW's betas: torch's AdamW refuses an int beta or a float beside a tensor ("betas
  must be either both floats or both Tensors") and keeps a one-element tensor beta 0-dim in a
  tuple; ours took the ints and kept the betas as given. (A tensor beta of several elements
  was already torch's own RuntimeError in both: its range check compares it first.)

    pytest tests/test_parity_s28b_clip.py -q -p no:cacheprovider
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from andrea_diag import clip_grad_norm_, clip_grad_norm_with_stats
from andrea_diag.clip.fused_adamw import ClippedAdamW
from andrea_diag.clip.reference import GradHolder

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2]


def _float8_params(dtype: torch.dtype) -> list[Any]:
    """An fp32 gradient, then a float8 one whose norm (1000) is past e4m3fn's largest, 448."""
    fp32 = torch.nn.Parameter(torch.zeros(2))
    fp32.grad = torch.tensor([3.0, 4.0])
    return [fp32, GradHolder(torch.full((4,), 500.0).to(dtype))]


def _raised(call: Callable[[], Any]) -> tuple[type[BaseException], str]:
    with pytest.raises(Exception) as info:
        call()
    return info.type, str(info.value)


@pytest.mark.parametrize("error_if_nonfinite", [False, True])
@pytest.mark.parametrize("dtype", FLOAT8)
def test_a_float8_gradient_raises_torchs_own_error_before_any_gradient_changes(
    dtype: torch.dtype, error_if_nonfinite: bool
) -> None:
    theirs = _raised(
        lambda: torch.nn.utils.clip_grad_norm_(
            _float8_params(dtype), 1.0, error_if_nonfinite=error_if_nonfinite
        )
    )
    assert theirs[0] is NotImplementedError and "norm_cpu" in theirs[1]
    for clip in (clip_grad_norm_, clip_grad_norm_with_stats):
        params = _float8_params(dtype)
        before = params[1].grad.clone()
        ours = _raised(lambda p=params, c=clip: c(p, 1.0, error_if_nonfinite=error_if_nonfinite))
        assert ours == theirs
        assert params[0].grad.tolist() == [3.0, 4.0]
        assert params[1].grad.view(torch.uint8).equal(before.view(torch.uint8))


def test_a_float8_gradient_on_the_meta_device_is_refused_too() -> None:
    """A meta tensor's norm checks no dtype: the error is torch's CPU one, not a meta norm."""
    kind, message = _raised(
        lambda: clip_grad_norm_with_stats(
            [GradHolder(torch.empty(4, dtype=torch.float8_e4m3fn, device="meta"))], 1.0
        )
    )
    assert kind is NotImplementedError and "Float8_e4m3fn" in message


def _params() -> list[torch.nn.Parameter]:
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.tensor([3.0, 4.0, 0.0])
    return [p]


@pytest.mark.parametrize(
    "max_norm", [torch.tensor([1.0, 2.0]), torch.zeros(0), torch.ones(2, 2)], ids=["2", "0", "2x2"]
)
def test_a_max_norm_tensor_not_of_one_element_is_torchs_value_error(max_norm: Any) -> None:
    kind, message = _raised(lambda: torch.nn.utils.clip_grad_norm_(_params(), max_norm))
    assert kind is ValueError and "only one element tensors" in message
    calls = [lambda p: clip_grad_norm_(p, max_norm), lambda p: clip_grad_norm_with_stats(p, max_norm),
             lambda p: ClippedAdamW(p, max_norm=max_norm)]  # fmt: skip
    for call in calls:
        params = _params()
        with pytest.raises(ValueError, match="only one element tensors") as info:
            call(params)
        assert isinstance(info.value, TypeError)  # what ours raised before: still caught
        assert params[0].grad.tolist() == [3.0, 4.0, 0.0]


@pytest.mark.parametrize(
    "betas",
    [(0, 0.9), (0.9, 0), (0, 0), (torch.tensor(0.9), 0.99), (0.9, torch.tensor(0.99))],
    ids=["int-first", "int-second", "ints", "tensor-float", "float-tensor"],
)
def test_betas_of_mixed_types_are_refused_as_torchs_adamw_refuses_them(betas: tuple) -> None:
    theirs = _raised(lambda: torch.optim.AdamW(_params(), betas=betas))
    assert theirs == (ValueError, "betas must be either both floats or both Tensors")
    assert _raised(lambda: ClippedAdamW(_params(), betas=betas)) == theirs


def test_betas_are_kept_as_torchs_adamw_keeps_them_a_tuple_of_0_dim_tensors() -> None:
    for betas in ((torch.tensor([0.9]), torch.tensor([[0.99]])), [0.9, 0.99]):
        ours = ClippedAdamW(_params(), betas=betas).param_groups[0]["betas"]
        theirs = torch.optim.AdamW(_params(), betas=betas).param_groups[0]["betas"]
        assert type(ours) is type(theirs) is tuple
        assert [getattr(b, "shape", None) for b in ours] == [
            getattr(b, "shape", None) for b in theirs
        ]
        assert [float(b) for b in ours] == [float(b) for b in theirs]


def test_betas_on_a_device_are_refused_as_a_tensor_lr_is() -> None:
    # the step reads each beta with float() every step: on a device that is a host sync
    from andrea_diag.clip.fused_adamw import ClippedAdamW

    p = torch.nn.Parameter(torch.zeros(2))
    betas = (torch.tensor(0.9, device="meta"), torch.tensor(0.999, device="meta"))
    with pytest.raises(ValueError, match="betas on a device"):
        ClippedAdamW([p], betas=betas)
    ClippedAdamW([p], betas=(torch.tensor(0.9), torch.tensor(0.999)))  # on the CPU: taken
