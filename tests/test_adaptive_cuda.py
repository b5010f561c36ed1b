"""GPU tests of the adaptive clip modes (marked ``cuda``; skipped without a CUDA device).

    pytest tests/test_adaptive_cuda.py -q -m cuda

On CUDA each mode takes its pre-clip norms from the fused norm pass and scales through the fused
kernel; here that path is checked against the same mode with ``impl="reference"`` on the same
gradients and the same history, and every mode (with ``step_unless`` for skip) is run under
``torch.cuda.set_sync_debug_mode("error")``: no host sync.
"""

from __future__ import annotations

import pytest
import torch

from andrea_diag.clip.adaptive import step_unless
from andrea_diag.clip.modes import make_clipper
from andrea_diag.clip_params import ClipParams

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

MODES = ("zclip", "agc", "spam", "skip")
SHAPES = [(64, 33), (33,), (1000, 7), (5,), (257, 129)]
# a short history: warm-ups of 4 norms, a window of 8, SPAM clipping from its second update
PARAMS = ClipParams(zclip_warmup=4, skip_window=8, skip_z=2.0, spam_warmup=1, spam_reset=50)
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
# gradient scale per update: a quiet history, then a spike every mode acts on
HISTORY = [1.0, 1.3, 0.8, 1.1, 0.9, 1.2, 1.0, 40.0]


@pytest.fixture(scope="module")
def cuda_ext():
    from andrea_diag.clip import cuda

    ok, why = cuda.available()
    assert ok, why  # on a GPU machine a build failure is a test failure, not a skip
    return cuda


def _setup(dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    params = [
        torch.nn.Parameter(torch.randn(s, generator=gen, device="cuda").to(dtype)) for s in SHAPES
    ]
    grads = [torch.randn(s, generator=gen, device="cuda").to(dtype) * 1e-2 for s in SHAPES]
    opt = torch.optim.Adam(params, lr=1e-4, fused=True)
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    opt.step()  # Adam's v exists for SPAM
    return params, grads, opt


def _run(mode: str, impl: str, dtype: torch.dtype):
    params, grads, opt = _setup(dtype)
    clipper = make_clipper(mode, 1.0, impl, PARAMS, optimizer=opt)
    results = []
    for scale in HISTORY:
        for p, g in zip(params, grads, strict=True):
            p.grad = (g.float() * scale).to(dtype)
        res = clipper(params)
        results.append((res, [p.grad.clone() for p in params]))
    return results


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("mode", MODES)
def test_cuda_path_matches_the_reference_over_a_history(cuda_ext, mode: str, dtype) -> None:
    fused = _run(mode, "cuda", dtype)
    ref = _run(mode, "reference", dtype)
    assert fused[-1][0].impl == "cuda" and ref[-1][0].impl == "reference"
    for (rf, gf), (rr, gr) in zip(fused, ref, strict=True):
        for a, b in zip(gf, gr, strict=True):
            torch.testing.assert_close(a.float(), b.float(), rtol=TOL[dtype], atol=1e-7)
        torch.testing.assert_close(
            rf.post_norm.float(), rr.post_norm.float(), rtol=TOL[dtype], atol=0
        )
        if rf.skip is not None:
            assert bool(rf.skip) == bool(rr.skip)
    last = fused[-1][0]
    # the spike at the end is acted on: clipped (zclip, agc, spam) or skipped (skip)
    if mode == "skip":
        assert bool(last.skip)
    else:
        assert float(last.post_norm) < float(last.total_norm)


@pytest.mark.parametrize("mode", MODES)
def test_mode_and_step_run_without_a_host_sync(cuda_ext, mode: str) -> None:
    params, grads, opt = _setup(torch.float32)
    clipper = make_clipper(mode, 1.0, "cuda", PARAMS, optimizer=opt)
    for scale in HISTORY[:-1]:  # past every warm-up, outside the sync check
        for p, g in zip(params, grads, strict=True):
            p.grad = g * scale
        step_unless(opt, clipper(params).skip)
    for p, g in zip(params, grads, strict=True):
        p.grad = g * HISTORY[-1]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        res = clipper(params)
        step_unless(opt, res.skip)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.isfinite(res.total_norm)
