"""CPU tests: the pure-torch three-stage clipper matches torch's clip_grad_norm_ run in float64.

    pytest tests/test_clip_reference.py -q

The case list and the tolerance table are shared with tests/test_clip_cuda.py (which imports
them), so the CUDA extension is held to exactly the same cases and bounds.
"""

from __future__ import annotations

import math

import pytest
import torch

from andrea_diag import clip_grad_norm_, clip_grad_norm_with_stats
from andrea_diag.clip import reference

# Per-dtype tolerances, relative errors ||out - truth|| / ||truth|| against torch in float64.
# norm: our accumulation is fp32 (or better) for every input dtype, so the norm of the *same
#   quantised values* is good to ~1e-6 whatever the gradient dtype.
# grads: the clipped gradients are rounded once to their dtype; the bound is max(floor,
#   2 x torch's own error in that dtype) -- flash-attention's "at most 2x plain PyTorch" rule.
TOL: dict[torch.dtype, dict[str, float]] = {
    torch.float32: {"norm": 2e-6, "grad_floor": 2e-7},
    torch.bfloat16: {"norm": 2e-6, "grad_floor": 4e-3},  # bf16 half-ulp 2^-9, RMS well below
    torch.float16: {"norm": 2e-6, "grad_floor": 5e-4},  # fp16 half-ulp 2^-12
}
DTYPES = list(TOL)

# Sizes that straddle the 16384-element chunk edge (reference.CHUNK; 65536 = 4 chunks), the (97, 1025) awkward matrix, empty and
# one-element tensors, and a list longer than one launch holds (160 tensors per launch).
CASES: dict[str, list[tuple[int, ...]]] = {
    "awkward": [(1,), (555,), (65535,), (65537,), (2048 * 32 + 1,), (97, 1025)],
    "chunk_edges": [(16383,), (16384,), (16385,), (65536,), (131073,), (3, 16384 + 7)],
    "empty_and_one": [(0,), (1,), (3, 0), (7,), (1, 1)],
    "many_tensors": [((i * 37) % 300 + 1,) for i in range(400)],
    "single": [(1000,)],
}
NORM_TYPES = [2.0, math.inf, 1.0, 3.0]


def make_grads(
    case: str, dtype: torch.dtype, device: str | torch.device = "cpu", seed: int = 0
) -> list[torch.Tensor]:
    """Fresh random gradients for a named case; tensors differ in scale like real layers do."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, shape in enumerate(CASES[case]):
        g = torch.randn(shape, generator=gen) * (0.5 + (i % 5))
        out.append(g.to(device=device, dtype=dtype))
    return out


def torch_same_dtype_err(grads: list[torch.Tensor], max_norm: float, p: float) -> float:
    """How far torch's own clip in the gradients' dtype lands from the float64 truth."""
    _, _, truth = reference.float64_truth(grads, max_norm, p)
    copies = [g.clone() for g in grads]
    clip_grad_norm_(_params(copies), max_norm, p, impl="torch")
    return reference.rel_err(copies, truth)


def _params(grads: list[torch.Tensor]) -> list[reference.GradHolder]:
    return [reference.GradHolder(g) for g in grads]


def check_impl(
    grads: list[torch.Tensor], impl: str, max_norm: float, p: float, variant: str | None = None
) -> None:
    """Clip ``grads`` in place with ``impl`` and assert the table's bounds against float64."""
    dtype = grads[0].dtype
    total64, per64, truth = reference.float64_truth(grads, max_norm, p)
    torch_err = torch_same_dtype_err(grads, max_norm, p)
    if variant is None:
        res = clip_grad_norm_with_stats(_params(grads), max_norm, p, impl=impl)
        total, per = res.total_norm, res.per_tensor_norm
    else:
        from andrea_diag.clip import cuda

        total, per, _, _ = cuda.clip(grads, max_norm, p, apply=True, variant=variant)
    tol = TOL[dtype]
    assert total.shape == ()
    assert reference.rel_err(total, total64) <= tol["norm"], (total, total64)
    assert reference.rel_err(per, per64) <= tol["norm"]
    grad_bound = max(tol["grad_floor"], 2 * torch_err)
    assert reference.rel_err(grads, truth) <= grad_bound


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("max_norm", [0.5, 1e9], ids=["active", "inactive"])
def test_reference_matches_torch_float64(case: str, dtype: torch.dtype, max_norm: float) -> None:
    check_impl(make_grads(case, dtype), "reference", max_norm, 2.0)


@pytest.mark.parametrize("p", NORM_TYPES)
def test_reference_norm_types(p: float) -> None:
    check_impl(make_grads("awkward", torch.float32), "reference", 1.0, p)


def test_partials_layout_matches_chunk_counts() -> None:
    grads = make_grads("awkward", torch.float32)
    parts = reference.grad_norm_partial(grads)
    assert parts.numel() == sum(reference.chunk_counts(grads))
    c = reference.CHUNK
    assert reference.chunk_counts([torch.zeros(0), torch.zeros(c + 1), torch.zeros(c)]) == [0, 2, 1]


def test_all_empty_grads() -> None:
    grads = [torch.zeros(0), torch.zeros(3, 0)]
    res = clip_grad_norm_with_stats(_params(grads), 1.0, impl="reference")
    assert float(res.total_norm) == 0.0 and float(res.scale) == 1.0
    assert res.per_tensor_norm.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nonfinite_propagates_like_torch(bad: float) -> None:
    grads = make_grads("awkward", torch.float32)
    grads[3].view(-1)[1234] = bad
    expect = [g.clone() for g in grads]
    t_total = torch.nn.utils.clip_grad_norm_(_params(expect), 1.0)
    res = clip_grad_norm_with_stats(_params(grads), 1.0, impl="reference")
    assert bool(res.nonfinite)
    assert math.isnan(float(res.total_norm)) == math.isnan(float(t_total))
    # torch poisons every gradient (NaN scale, or inf * 0); so must we, element for element.
    for g, e in zip(grads, expect, strict=True):
        assert torch.equal(g.isnan(), e.isnan())


def test_error_if_nonfinite_raises_before_touching_grads() -> None:
    grads = make_grads("awkward", torch.float32)
    grads[0].fill_(math.nan)
    before = [g.clone() for g in grads]
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(_params(grads), 1.0, error_if_nonfinite=True, impl="reference")
    for g, b in zip(grads[1:], before[1:], strict=True):
        assert torch.equal(g, b)


def test_drop_in_return_value() -> None:
    grads = make_grads("awkward", torch.float32)
    ours = clip_grad_norm_(_params([g.clone() for g in grads]), 1.0)
    theirs = torch.nn.utils.clip_grad_norm_(_params([g.clone() for g in grads]), 1.0)
    assert ours.shape == theirs.shape == ()
    assert ours.dtype == theirs.dtype
    assert torch.allclose(ours, theirs, rtol=1e-5)


def test_auto_on_cpu_uses_reference() -> None:
    res = clip_grad_norm_with_stats(_params(make_grads("single", torch.float32)), 1.0)
    assert res.impl == "reference"


@pytest.mark.parametrize("norm_type", [0.0, -1.0, -math.inf])
def test_norm_types_the_three_stages_cannot_compute_are_refused(norm_type: float) -> None:
    p = torch.nn.Parameter(torch.ones(4))
    p.grad = torch.ones(4)
    with pytest.raises(ValueError, match="norm_type"):
        clip_grad_norm_([p], 1.0, norm_type)
    assert torch.equal(p.grad, torch.ones(4))  # nothing was scaled


def test_per_tensor_mode_scales_half_gradients_with_one_rounding() -> None:
    g_bf = torch.linspace(-3, 3, 1001).to(torch.bfloat16)
    p = torch.nn.Parameter(torch.zeros(1001, dtype=torch.bfloat16))
    p.grad = g_bf.clone()
    res = clip_grad_norm_with_stats([p], 0.7, mode="per-tensor")
    expected = (g_bf.float() * res.scale[0].float()).to(torch.bfloat16)  # one rounding
    assert torch.equal(p.grad, expected)
