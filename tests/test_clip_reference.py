"""CPU tests: the pure-torch three-stage clipper matches torch's clip_grad_norm_ run in float64.

    pytest tests/test_clip_reference.py -q

The case list and the tolerance table live in tests/conftest.py (fixtures ``clip_case``,
``clip_dtype``, ``make_grads``, ``check_impl``, ...), shared with tests/test_clip_cuda.py, so the
CUDA extension is held to exactly the same cases and bounds.
"""

from __future__ import annotations

import math

import pytest
import torch

from andrea_diag import clip_grad_norm_, clip_grad_norm_with_stats
from andrea_diag.clip import reference


@pytest.mark.parametrize("max_norm", [0.5, 1e9], ids=["active", "inactive"])
def test_reference_matches_torch_float64(
    clip_case: str, clip_dtype: torch.dtype, max_norm: float, make_grads, check_impl
) -> None:
    check_impl(make_grads(clip_case, clip_dtype), "reference", max_norm, 2.0)


def test_reference_norm_types(clip_norm_type: float, make_grads, check_impl) -> None:
    check_impl(make_grads("awkward", torch.float32), "reference", 1.0, clip_norm_type)


def test_partials_layout_matches_chunk_counts(make_grads) -> None:
    grads = make_grads("awkward", torch.float32)
    parts = reference.grad_norm_partial(grads)
    assert parts.numel() == sum(reference.chunk_counts(grads))
    c = reference.CHUNK
    assert reference.chunk_counts([torch.zeros(0), torch.zeros(c + 1), torch.zeros(c)]) == [0, 2, 1]


def test_all_empty_grads(grad_holders) -> None:
    grads = [torch.zeros(0), torch.zeros(3, 0)]
    res = clip_grad_norm_with_stats(grad_holders(grads), 1.0, impl="reference")
    assert float(res.total_norm) == 0.0 and float(res.scale) == 1.0
    assert res.per_tensor_norm.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nonfinite_propagates_like_torch(bad: float, make_grads, check_nonfinite) -> None:
    grads = make_grads("awkward", torch.float32)
    grads[3].view(-1)[1234] = bad
    check_nonfinite(grads, "reference")


def test_error_if_nonfinite_raises_before_touching_grads(make_grads, grad_holders) -> None:
    grads = make_grads("awkward", torch.float32)
    grads[0].fill_(math.nan)
    before = [g.clone() for g in grads]
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(grad_holders(grads), 1.0, error_if_nonfinite=True, impl="reference")
    for g, b in zip(grads[1:], before[1:], strict=True):
        assert torch.equal(g, b)


def test_drop_in_return_value(make_grads, grad_holders) -> None:
    grads = make_grads("awkward", torch.float32)
    ours = clip_grad_norm_(grad_holders([g.clone() for g in grads]), 1.0)
    theirs = torch.nn.utils.clip_grad_norm_(grad_holders([g.clone() for g in grads]), 1.0)
    assert ours.shape == theirs.shape == ()
    assert ours.dtype == theirs.dtype
    assert torch.allclose(ours, theirs, rtol=1e-5)


def test_auto_on_cpu_uses_reference(make_grads, grad_holders) -> None:
    res = clip_grad_norm_with_stats(grad_holders(make_grads("single", torch.float32)), 1.0)
    assert res.impl == "reference"


@pytest.mark.parametrize("norm_type", [0.0, -1.0, -math.inf])
def test_stats_variant_refuses_norm_types_the_three_stages_cannot_compute(norm_type: float) -> None:
    # (the drop-in hands these to torch itself: tests/test_clip_torch_contract.py)
    p = torch.nn.Parameter(torch.ones(4))
    p.grad = torch.ones(4)
    with pytest.raises(ValueError, match="norm_type"):
        clip_grad_norm_with_stats([p], 1.0, norm_type)
    assert torch.equal(p.grad, torch.ones(4))  # nothing was scaled


def test_every_clipper_entry_point_refuses_a_zero_norm_type_in_the_same_words() -> None:
    from andrea_diag.clip.fused_adamw import ClippedAdamW
    from andrea_diag.clip.sharded import clip_grad_norm_sharded_

    p = torch.nn.Parameter(torch.ones(4))
    p.grad = torch.ones(4)
    calls = [
        lambda: clip_grad_norm_with_stats([p], 1.0, 0.0),
        lambda: clip_grad_norm_sharded_([p], 1.0, 0.0),
        lambda: ClippedAdamW([p], max_norm=1.0, norm_type=0.0),
    ]
    for call in calls:  # one rule, one message (clip/reference.py: check_norm_type)
        with pytest.raises(ValueError, match=r"^norm_type must be positive or inf, got 0\.0$"):
            call()


def test_per_tensor_mode_scales_half_gradients_with_one_rounding() -> None:
    g_bf = torch.linspace(-3, 3, 1001).to(torch.bfloat16)
    p = torch.nn.Parameter(torch.zeros(1001, dtype=torch.bfloat16))
    p.grad = g_bf.clone()
    res = clip_grad_norm_with_stats([p], 0.7, mode="per-tensor")
    expected = (g_bf.float() * res.scale[0].float()).to(torch.bfloat16)  # one rounding
    assert torch.equal(p.grad, expected)


@pytest.mark.parametrize("norm_type", [2.0, math.inf, 3.0], ids=["l2", "inf", "p3"])
def test_float64_truth_gives_empty_tensors_norm_zero_for_every_norm_type(norm_type: float) -> None:
    # torch refuses the inf norm of an empty tensor; the kernels and clip_reference give it 0
    # (and it adds nothing to the total), so the truth every implementation is checked against
    # must too (bench/sanitize_clip.py died on this before checking anything).
    g = torch.tensor([3.0, -4.0, 1.0])
    total, per, clipped = reference.float64_truth(
        [torch.zeros(0), g, torch.zeros(0)], 1.0, norm_type
    )
    want = torch.linalg.vector_norm(g.double(), norm_type)
    assert torch.equal(per, torch.stack([torch.zeros((), dtype=torch.float64), want, want * 0]))
    assert torch.allclose(total, want)
    assert [c.numel() for c in clipped] == [0, 3, 0]
    ref_total, ref_per, _, _ = reference.clip_reference(
        [torch.zeros(0), g, torch.zeros(0)], 1.0, norm_type
    )
    assert torch.allclose(ref_total.double(), total) and torch.allclose(ref_per.double(), per)
    total0, per0, _ = reference.float64_truth([torch.zeros(0)], 1.0, norm_type)
    assert float(total0) == 0.0 and per0.tolist() == [0.0]
