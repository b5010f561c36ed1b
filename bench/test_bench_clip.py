"""pytest-benchmark suite over the bench-kernels cases (kept out of the default test run).

    pytest bench/ --benchmark-only                       # GPU when present, else CPU on tiny
    pytest bench/ --benchmark-only --benchmark-json=out.json

Wall-clock timing (pytest-benchmark's timer) with a device sync per call on GPUs, so numbers
include launch latency; `andrea-diag bench-kernels` is the event-timed, L2-flushed reference
measurement. Every case is checked against the float64 truth before it is timed.
"""

from __future__ import annotations

import pytest
import torch

from andrea_diag.bench.clip import CHECK_TOL, clip_variants
from andrea_diag.bench.harness import ACTIVE, DTYPES, INACTIVE, grad_shapes, make_grads
from andrea_diag.clip import reference

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
SIZES = ["12m", "120m"] if ON_GPU else ["tiny"]
VARIANTS = ["torch_foreach", "torch_loop", "reference"] + (
    ["cuda_three", "cuda_single", "cuda_dropin"] if ON_GPU else []
)


@pytest.mark.parametrize("max_norm", [ACTIVE, INACTIVE], ids=["active", "inactive"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dt", ["fp32", "bf16"])
@pytest.mark.parametrize("size", SIZES)
def test_clip(benchmark, size: str, dt: str, variant: str, max_norm: float) -> None:
    pristine = make_grads(grad_shapes(size), DTYPES[dt], DEVICE)
    grads = [g.clone() for g in pristine]
    fn = clip_variants(DEVICE)[variant]
    total64, _, truth = reference.float64_truth(pristine, max_norm)
    total = fn(grads, max_norm)
    tol_norm, tol_grad = CHECK_TOL[DTYPES[dt]]
    assert reference.rel_err(total, total64) <= tol_norm
    assert reference.rel_err(grads, truth) <= tol_grad

    def step() -> None:
        torch._foreach_copy_(grads, pristine)
        fn(grads, max_norm)
        if ON_GPU:
            torch.cuda.synchronize()  # host sync: pytest-benchmark times on the host clock

    benchmark.pedantic(step, rounds=20 if ON_GPU else 3, warmup_rounds=2)
