"""The norm pass's load modes (``cuda.set_norm_load``): each changes only L2's replacement order,
so every mode must give the clip's exact bits, eager and under a CUDA graph, and each must launch
its own kernel (else bench-kernels' side-by-side rows would time one kernel three times)."""

from __future__ import annotations

import pytest
import torch

from andrea_diag.clip import cuda, reference

no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def cuda_ext():
    ok, why = cuda.available()
    assert ok, why  # on a GPU machine a build failure is a test failure, not a skip
    return cuda


def test_an_unknown_norm_load_mode_is_refused_by_name_before_any_build() -> None:
    with pytest.raises(ValueError, match=r"'evict_last'.*cached, evict_first, stream"):
        cuda.set_norm_load("evict_last")


def _base(dtype: torch.dtype) -> list[torch.Tensor]:
    # runs crossing many tensor ends (the parked batches) and one tensor over many blocks
    blocks = torch.cuda.get_device_properties(0).multi_processor_count * 3
    shapes = [24 * blocks * 256 + 3, *[(i * 37) % 256 + 1 for i in range(150)], 8 * blocks * 256]
    gen = torch.Generator().manual_seed(31)
    return [
        (torch.randn(n, generator=gen) * (1 + i % 4)).to(dtype).cuda() for i, n in enumerate(shapes)
    ]


def _graphed_clip(
    base: list[torch.Tensor], max_norm: float, norm_type: float
) -> tuple[torch.Tensor, ...]:
    grads = [g.clone() for g in base]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        cuda.clip(grads, max_norm, norm_type)  # warm-up on a side stream, as capture requires
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = cuda.clip(grads, max_norm, norm_type)
    torch._foreach_copy_(grads, base)
    graph.replay()
    torch.cuda.synchronize()
    return (*out[:2], *grads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("norm_type", [2.0, float("inf"), 3.0], ids=["l2", "inf", "p3"])
@pytest.mark.parametrize("max_norm", [0.5, 1e9], ids=["active", "inactive"])
@pytest.mark.cuda
@no_cuda
@pytest.mark.usefixtures("cuda_ext")
def test_cuda_every_norm_load_mode_gives_the_same_bits(dtype, norm_type, max_norm) -> None:
    base = _base(dtype)
    total64 = reference.float64_truth(base, max_norm, norm_type)[0]
    outs = {}
    before = cuda.set_norm_load("cached")
    try:
        for mode in cuda.NORM_LOADS:
            cuda.set_norm_load(mode)
            grads = [g.clone() for g in base]
            total, per, _, _ = cuda.clip(grads, max_norm, norm_type)
            outs[mode] = (total, per, *grads)
            outs[f"{mode} graphed"] = _graphed_clip(base, max_norm, norm_type)
    finally:
        cuda.set_norm_load(before)
    assert reference.rel_err(outs["cached"][0], total64) < 2e-6
    for name, out in outs.items():
        assert all(torch.equal(a, b) for a, b in zip(out, outs["cached"], strict=True)), name


@pytest.mark.cuda
@no_cuda
def test_cuda_set_norm_load_switches_the_norm_kernel(cuda_ext) -> None:
    grads = [torch.randn(1000 + i, device="cuda") for i in range(3)]
    names = {}
    before = cuda_ext.set_norm_load("cached")
    try:
        for mode in cuda_ext.NORM_LOADS:
            cuda_ext.set_norm_load(mode)
            acts = [torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=acts) as prof:
                cuda_ext.clip([g.clone() for g in grads], 0.5)
                torch.cuda.synchronize()
            names[mode] = frozenset(e.name for e in prof.events() if "k_clip_norm" in e.name)
    finally:
        cuda_ext.set_norm_load(before)
    assert before == "cached"  # the default
    assert all(names.values()) and len(set(names.values())) == 3, names
