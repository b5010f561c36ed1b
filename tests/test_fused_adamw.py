"""ClippedAdamW (clip folded into AdamW): the reference against torch, the kernel against both.

    pytest tests/test_fused_adamw.py -q            # CPU tests; the cuda-marked ones skip
    pytest tests/test_fused_adamw.py -q -m cuda    # on a GPU machine

CPU: the pure-torch path equals ``torch.nn.utils.clip_grad_norm_`` + ``torch.optim.AdamW`` in
float64 over 20 steps (clip active and inactive, two parameter groups), skips a non-finite
step without touching anything, and keeps torch-compatible state. GPU: ``k_adamw_clipped``
matches the float64 reference within the fp32 tolerance table, never syncs with the host and
gives the same bits on every run.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from andrea_diag.clip import reference
from andrea_diag.clip.fused_adamw import ClippedAdamW, adamw_clipped_reference, clip_adamw_

# Shapes: a matrix over several 16384-element chunks with a ragged tail, vectors, a scalar and
# an empty tensor (owns no chunk; its step still counts, as in torch).
SHAPES = [(96, 200), (200,), (33, 7), (1,), (0,), (16385,)]
HYPER = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def make_params(shapes, dtype, device="cpu", seed=0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.nn.Parameter(torch.randn(s, generator=gen, dtype=torch.float64).to(device, dtype))
        for s in shapes
    ]


def make_grad_seq(shapes, steps, device="cpu", seed=1, scale=1.0) -> list[list[torch.Tensor]]:
    """Per step, one gradient per shape; per-tensor magnitudes spread over 1e-3..1."""
    gen = torch.Generator().manual_seed(seed)
    seq = []
    for _ in range(steps):
        seq.append(
            [
                (torch.randn(s, generator=gen, dtype=torch.float64) * scale * 10 ** (-(i % 4)))
                for i, s in enumerate(shapes)
            ]
        )
    return seq


def groups_of(params: list[torch.nn.Parameter]) -> list[dict]:
    # Two groups with their own lr / weight decay: the clip is global over both.
    return [
        {"params": params[:3]},
        {"params": params[3:], "lr": 1e-3, "weight_decay": 0.0},
    ]


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("max_norm", [0.5, 1e9], ids=["clip-active", "clip-inactive"])
def test_reference_equals_torch_clip_then_adamw(max_norm: float) -> None:
    ours_p = make_params(SHAPES, torch.float64)
    torch_p = [torch.nn.Parameter(p.detach().clone()) for p in ours_p]
    ours = ClippedAdamW(groups_of(ours_p), **HYPER, max_norm=max_norm, impl="reference")
    ref = torch.optim.AdamW(groups_of(torch_p), **HYPER)
    for grads in make_grad_seq(SHAPES, 20):
        for p, q, g in zip(ours_p, torch_p, grads, strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        total = torch.nn.utils.clip_grad_norm_(torch_p, max_norm)
        ref.step()
        ours.step()
        clip = ours.last_clip
        assert clip is not None and clip.impl == "reference"
        assert (float(total) > max_norm) == (max_norm == 0.5)  # the clip really is (in)active
        _close(clip.total_norm, total)
        _close(clip.scale, torch.clamp(max_norm / (total + 1e-6), max=1.0))
        assert not bool(clip.nonfinite)
        for p, g in zip(ours_p, grads, strict=True):
            assert torch.equal(p.grad, g)  # the gradient is read, never rewritten
        for p, q in zip(ours_p, torch_p, strict=True):
            _close(p.detach(), q.detach())
            s, t = ours.state[p], ref.state[q]
            _close(s["exp_avg"], t["exp_avg"])
            _close(s["exp_avg_sq"], t["exp_avg_sq"])
            assert float(s["step"]) == float(t["step"])


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_reference_skips_nonfinite_step(bad: float) -> None:
    params = make_params(SHAPES, torch.float64)
    twin = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt = ClippedAdamW(params, **HYPER, max_norm=1.0, impl="reference")
    ref = torch.optim.AdamW(twin, **HYPER)
    seq = make_grad_seq(SHAPES, 3)
    for p, q, g in zip(params, twin, seq[0], strict=True):
        p.grad, q.grad = g.clone(), g.clone()
    torch.nn.utils.clip_grad_norm_(twin, 1.0)
    ref.step()
    opt.step()
    before = {
        "p": [p.detach().clone() for p in params],
        "m": [opt.state[p]["exp_avg"].clone() for p in params],
        "v": [opt.state[p]["exp_avg_sq"].clone() for p in params],
        "step": [opt.state[p]["step"].clone() for p in params],
    }
    for p, g in zip(params, seq[1], strict=True):
        p.grad = g.clone()
    params[0].grad[3, 4] = bad
    opt.step()
    assert bool(opt.last_clip.nonfinite)
    for i, p in enumerate(params):
        assert torch.equal(p.detach(), before["p"][i])
        assert torch.equal(opt.state[p]["exp_avg"], before["m"][i])
        assert torch.equal(opt.state[p]["exp_avg_sq"], before["v"][i])
        assert torch.equal(opt.state[p]["step"], before["step"][i])
    # The next finite step carries on as if the bad one never happened.
    for p, q, g in zip(params, twin, seq[2], strict=True):
        p.grad, q.grad = g.clone(), g.clone()
    torch.nn.utils.clip_grad_norm_(twin, 1.0)
    ref.step()
    opt.step()
    for p, q in zip(params, twin, strict=True):
        _close(p.detach(), q.detach())
        assert float(opt.state[p]["step"]) == 2.0


def test_nonfinite_on_first_step_leaves_fresh_state() -> None:
    params = make_params([(4, 4), (3,)], torch.float32)
    before = [p.detach().clone() for p in params]
    opt = ClippedAdamW(params, max_norm=1.0)
    for p in params:
        p.grad = torch.ones_like(p)
    params[1].grad[0] = math.inf
    opt.step()
    for p, b in zip(params, before, strict=True):
        assert torch.equal(p.detach(), b)
        st = opt.state[p]
        assert float(st["step"]) == 0.0 and not st["exp_avg"].any() and not st["exp_avg_sq"].any()


def test_state_is_torch_adamw_compatible() -> None:
    params = make_params(SHAPES, torch.float32)
    twin = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt = ClippedAdamW(params, **HYPER, max_norm=0.5)
    ref = torch.optim.AdamW(twin, **HYPER)
    for p, q, g in zip(params, twin, make_grad_seq(SHAPES, 1)[0], strict=True):
        p.grad, q.grad = g.float(), g.float()
    opt.step()
    torch.nn.utils.clip_grad_norm_(twin, 0.5)
    ref.step()
    for p in params:
        st = opt.state[p]
        assert set(st) == {"step", "exp_avg", "exp_avg_sq"}
        assert st["step"].dtype == torch.float32 and st["step"].dim() == 0
        assert st["exp_avg"].shape == p.shape and st["exp_avg_sq"].dtype == p.dtype
    # torch AdamW's state dict loads into ClippedAdamW and continues identically.
    fresh = ClippedAdamW(params, **HYPER, max_norm=0.5)
    fresh.load_state_dict(ref.state_dict())
    for p, q in zip(params, twin, strict=True):
        assert fresh.state[p]["step"].device == p.device
        torch.testing.assert_close(fresh.state[p]["exp_avg"], ref.state[q]["exp_avg"])


def test_reference_function_without_optimizer() -> None:
    p = torch.tensor([1.0, -2.0], dtype=torch.float64)
    g = torch.tensor([0.5, 0.5], dtype=torch.float64)
    m, v, step = torch.zeros_like(p), torch.zeros_like(p), torch.zeros(())
    scale = torch.tensor(0.5, dtype=torch.float64)
    adamw_clipped_reference(
        [p], [g], [m], [v], [step], scale, torch.tensor(False),
        lr=0.1, beta1=0.9, beta2=0.999, eps=0.0, weight_decay=0.0,
    )  # fmt: skip
    # First step, no decay, eps 0: p -= lr * sign(g) exactly (bias corrections cancel).
    torch.testing.assert_close(p, torch.tensor([0.9, -2.1], dtype=torch.float64))
    assert float(step) == 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lr": -1.0},
        {"betas": (1.0, 0.9)},
        {"eps": -1.0},
        {"weight_decay": -0.1},
        {"max_norm": 0.0},
        {"max_norm": math.nan},
        {"norm_type": 0.0},
        {"impl": "triton"},
        {"lr": torch.tensor(1e-3)},
    ],
)
def test_bad_hyperparameters(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ClippedAdamW([torch.nn.Parameter(torch.zeros(2))], **kwargs)


def test_impl_cuda_needs_cuda_params() -> None:
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.ones(2)
    with pytest.raises(ValueError):
        ClippedAdamW([p], impl="cuda").step()


# ---- GPU ------------------------------------------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# rel err vs float64 truth after the steps (fp32 kernel arithmetic, same bf16 inputs on both
# sides): params, the update (p - p0; bounded below by ulp(p) / |update|, ~1e-5 for fp32
# arithmetic at all, measured with the fp32 reference on CPU), exp_avg, exp_avg_sq, total norm.
GPU_TOL = {"p": 1e-6, "update": 1e-4, "m": 2e-5, "v": 2e-5, "norm": 2e-6}
# "many" has 170 tensors in two dtypes: two k_adamw_clipped launches of <= 68 tensors (the
# depth-5 TensorTable) per dtype.
GPU_CASES = {
    "shapes": SHAPES,
    "many": [(17, 33)] * 90 + [(5,)] * 79 + [(3 * 16384 + 5,)],
}


def _functional_run(shapes, grad_dtype, max_norm, impl, device, dtype, steps=5, bad_step=None):
    """``steps`` clip_adamw_ calls from fixed data; even-indexed grads in ``grad_dtype``
    (mixed grad dtypes in one list), the rest fp32. Returns (params, p0, state, last clip)."""
    params = [p.detach() for p in make_params(shapes, torch.float32)]
    p0 = [p.clone() for p in params]
    params = [p.to(device, dtype) for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    st = [torch.zeros((), dtype=torch.float32, device=device) for _ in params]
    clip = None
    for k, grads in enumerate(make_grad_seq(shapes, steps, scale=3.0)):
        gs = [
            g.to(grad_dtype if i % 2 == 0 else torch.float32).to(device)
            for i, g in enumerate(grads)
        ]
        if dtype == torch.float64:
            gs = [g.double() for g in gs]
        if bad_step == k:
            gs[0].view(-1)[0] = math.nan
        clip = clip_adamw_(
            params, gs, m, v, st, max_norm=max_norm, lr=HYPER["lr"], beta1=0.9, beta2=0.95,
            eps=HYPER["eps"], weight_decay=HYPER["weight_decay"], impl=impl,
        )  # fmt: skip
    return params, p0, {"exp_avg": m, "exp_avg_sq": v, "step": st}, clip


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("case", list(GPU_CASES))
@pytest.mark.parametrize("grad_dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("max_norm", [0.5, 1e9], ids=["clip-active", "clip-inactive"])
def test_kernel_matches_reference(case: str, grad_dtype: torch.dtype, max_norm: float) -> None:
    from andrea_diag.clip import cuda

    ok, why = cuda.available()
    assert ok, why
    shapes = GPU_CASES[case]
    params, p0, state, clip = _functional_run(
        shapes, grad_dtype, max_norm, "cuda", "cuda", torch.float32
    )
    assert clip.impl == "cuda"
    # Truth: the reference in float64 on the CPU, fed the same (rounded) gradients.
    t_params, _, t_state, t_clip = _functional_run(
        shapes, grad_dtype, max_norm, "reference", "cpu", torch.float64
    )
    err = {
        "p": reference.rel_err(params, t_params),
        "update": reference.rel_err(
            [p - a.cuda() for p, a in zip(params, p0, strict=True)],
            [p - a.double() for p, a in zip(t_params, p0, strict=True)],
        ),
        "m": reference.rel_err(state["exp_avg"], t_state["exp_avg"]),
        "v": reference.rel_err(state["exp_avg_sq"], t_state["exp_avg_sq"]),
        "norm": reference.rel_err(clip.total_norm, t_clip.total_norm),
    }
    assert all(err[k] <= GPU_TOL[k] for k in GPU_TOL), err
    assert all(float(s) == 5.0 for s in state["step"])
    assert (float(clip.scale) < 1.0) == (max_norm == 0.5)


@pytest.mark.cuda
@needs_cuda
def test_optimizer_uses_kernels_and_matches_functional() -> None:
    params = make_params(SHAPES, torch.float32, "cuda")
    opt = ClippedAdamW(params, **HYPER, max_norm=0.5, impl="cuda")
    for grads in make_grad_seq(SHAPES, 5, scale=3.0):
        for p, g in zip(params, grads, strict=True):
            p.grad = g.to("cuda", torch.float32)
        opt.step()
    assert opt.last_impl == "cuda"
    f_params, _, _, _ = _functional_run(SHAPES, torch.float32, 0.5, "cuda", "cuda", torch.float32)
    assert all(torch.equal(p.detach(), q) for p, q in zip(params, f_params, strict=True))


@pytest.mark.cuda
@needs_cuda
def test_kernel_no_host_sync() -> None:
    params = make_params(SHAPES, torch.float32, "cuda")
    opt = ClippedAdamW(params, **HYPER, max_norm=0.5, impl="cuda")
    seq = make_grad_seq(SHAPES, 4, scale=3.0)
    grads = [[g.to("cuda", torch.float32) for g in step] for step in seq]
    for p, g in zip(params, grads[0], strict=True):
        p.grad = g
    opt.step()  # warm-up: builds the extension, the state and the chunk-offset plan
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in grads[1:]:
            for p, g in zip(params, step, strict=True):
                p.grad = g
            opt.step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert float(opt.state[params[0]]["step"]) == 4.0


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("grad_dtype", [torch.float32, torch.bfloat16], ids=str)
def test_kernel_bit_identical_across_runs(grad_dtype: torch.dtype) -> None:
    runs = [
        _functional_run(GPU_CASES["many"], grad_dtype, 0.5, "cuda", "cuda", torch.float32)
        for _ in range(3)
    ]
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0][0], other[0], strict=True))
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert all(
                torch.equal(a, b) for a, b in zip(runs[0][2][key], other[2][key], strict=True)
            )


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("grad_dtype", [torch.float32, torch.bfloat16], ids=str)
def test_kernel_skips_nonfinite_step(grad_dtype: torch.dtype) -> None:
    good = _functional_run(SHAPES, grad_dtype, 0.5, "cuda", "cuda", torch.float32, steps=2)
    bad = _functional_run(
        SHAPES, grad_dtype, 0.5, "cuda", "cuda", torch.float32, steps=3, bad_step=2
    )
    assert bool(bad[3].nonfinite)
    assert all(torch.equal(p, q) for p, q in zip(good[0], bad[0], strict=True))
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert all(torch.equal(a, b) for a, b in zip(good[2][key], bad[2][key], strict=True))


@pytest.mark.cuda
@needs_cuda
def test_cuda_a_deepcopied_optimizer_steps_on_the_kernels_as_the_original() -> None:
    """The copy (adamw_state.py) keeps ``impl="cuda"`` and its state on the device: both take
    the same next steps through the fused kernels, bit for bit, and the copy's ``step``
    stays a device tensor (an int or host step would have sent it down another path)."""
    params = make_params(SHAPES, torch.float32, "cuda")
    opt = ClippedAdamW(params, **HYPER, max_norm=0.5, impl="cuda")
    seq = make_grad_seq(SHAPES, 4, scale=3.0)
    for p, g in zip(params, seq[0], strict=True):
        p.grad = g.to("cuda", torch.float32)
    opt.step()
    twin = copy.deepcopy(opt)
    for o in (opt, twin):
        for grads in seq[1:]:
            for p, g in zip(o.param_groups[0]["params"], grads, strict=True):
                p.grad = g.to("cuda", torch.float32)
            o.step()
        assert o.last_impl == "cuda"
    pairs = zip(opt.param_groups[0]["params"], twin.param_groups[0]["params"], strict=True)
    for p, q in pairs:
        assert torch.equal(p, q)
        assert twin.state[q]["step"].device == q.device
        assert torch.equal(opt.state[p]["exp_avg_sq"], twin.state[q]["exp_avg_sq"])
