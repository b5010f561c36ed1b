"""CPU tests: ``andrea_diag.clip_grad_norm_`` keeps torch's ``clip_grad_norm_`` contract where
its docstring says it does, checked side by side with torch on the same gradients (issue 18).

    pytest tests/test_clip_torch_contract.py -q
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from andrea_diag import clip_grad_norm_


def _pair(dtypes: tuple[torch.dtype, ...], seed: int = 0):
    """Two identical parameter lists (ours, torch's) with gradients of the given dtypes."""
    gen = torch.Generator().manual_seed(seed)
    ours, theirs = [], []
    for i, dt in enumerate(dtypes):
        g = (torch.randn(37 + 11 * i, generator=gen) * 3).to(dt)
        for side in (ours, theirs):
            p = torch.nn.Parameter(torch.zeros(g.shape, dtype=dt))
            p.grad = g.clone()
            side.append(p)
    return ours, theirs


@pytest.mark.parametrize(
    "dtypes",
    [(torch.bfloat16,), (torch.float16, torch.float16), (torch.float32, torch.bfloat16)],
    ids=["bf16", "fp16", "fp32+bf16"],
)
def test_return_dtype_is_torchs(dtypes: tuple[torch.dtype, ...]) -> None:
    ours, theirs = _pair(dtypes)
    a = clip_grad_norm_(ours, 0.5)
    b = torch.nn.utils.clip_grad_norm_(theirs, 0.5)
    assert a.dtype == b.dtype and a.shape == b.shape == ()
    assert float(a) == pytest.approx(float(b), rel=1e-2)  # torch rounds in the half dtype


@pytest.mark.parametrize("norm_type", [0.0, -1.0, -math.inf])
def test_nonpositive_norm_types_match_torch_exactly(norm_type: float) -> None:
    ours, theirs = _pair((torch.float32, torch.float32))
    ours[0].grad[3] = 0.0
    theirs[0].grad[3] = 0.0
    a = clip_grad_norm_(ours, 1.0, norm_type)
    b = torch.nn.utils.clip_grad_norm_(theirs, 1.0, norm_type)
    assert torch.equal(a, b)
    assert all(torch.equal(x.grad, y.grad) for x, y in zip(ours, theirs, strict=True))


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
def test_complex_gradients_match_torch_exactly(norm_type: float) -> None:
    ours, theirs = _pair((torch.complex64, torch.float32))
    for side in (ours, theirs):
        side[0] = torch.nn.Parameter(torch.zeros(3, dtype=torch.complex64))
        side[0].grad = torch.tensor([3 + 4j, 1j, 0], dtype=torch.complex64) * 2
    a = clip_grad_norm_(ours, 1.0, norm_type)
    b = torch.nn.utils.clip_grad_norm_(theirs, 1.0, norm_type)
    assert torch.equal(a, b) and not a.is_complex()
    assert all(torch.equal(x.grad, y.grad) for x, y in zip(ours, theirs, strict=True))


def test_the_stats_variant_refuses_complex_gradients() -> None:
    from andrea_diag.clip.api import clip_grad_norm_with_stats

    ours, _ = _pair((torch.complex64,))
    with pytest.raises(TypeError, match="complex gradients are not supported"):
        clip_grad_norm_with_stats(ours, 1.0)


def test_nan_max_norm_is_refused_where_torch_poisons_the_gradients() -> None:
    """A documented difference (see ``clip_grad_norm_``'s docstring): torch turns every gradient
    into NaN; here the call is refused before any gradient changes."""
    ours, theirs = _pair((torch.float32, torch.bfloat16))
    before = [p.grad.clone() for p in ours]
    with pytest.raises(ValueError, match="NaN"):
        clip_grad_norm_(ours, math.nan)
    assert all(torch.equal(p.grad, g) for p, g in zip(ours, before, strict=True))
    torch.nn.utils.clip_grad_norm_(theirs, math.nan)
    assert all(bool(y.grad.isnan().all()) for y in theirs)  # what the refusal spares the user


def test_empty_generator_warns_with_torchs_message() -> None:
    with pytest.warns(UserWarning, match="empty generator") as ours:
        a = clip_grad_norm_((p for p in []), 1.0)
    with pytest.warns(UserWarning, match="empty generator") as theirs:
        b = torch.nn.utils.clip_grad_norm_((p for p in []), 1.0)
    assert str(ours[0].message) == str(theirs[0].message)
    assert torch.equal(a, b)


def test_empty_list_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert float(clip_grad_norm_([], 1.0)) == 0.0


def test_fp32_norm_and_clipped_gradients_match_torch() -> None:
    ours, theirs = _pair((torch.float32, torch.float32, torch.float32), seed=3)
    a = clip_grad_norm_(ours, 0.5)
    b = torch.nn.utils.clip_grad_norm_(theirs, 0.5)
    assert a.dtype == b.dtype == torch.float32
    assert float(a) == pytest.approx(float(b), rel=1e-6)
    for x, y in zip(ours, theirs, strict=True):
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-6, atol=0)
