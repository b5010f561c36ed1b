"""GPU tests of the fused CUDA clipper (marked ``cuda``; skipped without a CUDA device).

    pytest tests/test_clip_cuda.py -q -m cuda

Same cases and tolerance table as tests/test_clip_reference.py (both take them from the fixtures
in tests/conftest.py), plus what only a GPU can show: bit-identical results across runs, no host
sync in the clip path, and CUDA-graph capture.
"""

from __future__ import annotations

import math

import pytest
import torch

from andrea_diag import clip_grad_norm_, clip_grad_norm_with_stats
from andrea_diag.clip import reference

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def cuda_ext():
    from andrea_diag.clip import cuda

    ok, why = cuda.available()
    assert ok, why  # on a GPU machine a build failure is a test failure, not a skip
    return cuda


@pytest.mark.parametrize("variant", ["three", "single"])
@pytest.mark.parametrize("max_norm", [0.5, 1e9], ids=["active", "inactive"])
def test_cuda_matches_float64(
    cuda_ext, clip_case, clip_dtype, max_norm, variant, make_grads, check_impl
) -> None:
    check_impl(make_grads(clip_case, clip_dtype, "cuda"), "cuda", max_norm, 2.0, variant=variant)


@pytest.mark.parametrize("variant", ["three", "single"])
def test_cuda_norm_types(cuda_ext, clip_norm_type, variant, make_grads, check_impl) -> None:
    grads = make_grads("awkward", torch.float32, "cuda")
    check_impl(grads, "cuda", 1.0, clip_norm_type, variant=variant)


def test_cuda_mixed_dtypes(cuda_ext, make_grads) -> None:
    grads = make_grads("awkward", torch.float32, "cuda")
    grads[1] = grads[1].bfloat16()
    grads[2] = grads[2].half()
    total64, per64, _ = reference.float64_truth(grads, 1.0)
    total, per, _, _ = cuda_ext.clip(grads, 1.0)
    assert reference.rel_err(total, total64) < 2e-6
    assert reference.rel_err(per, per64) < 2e-6


def test_cuda_drop_in_api(cuda_ext, make_grads, grad_holders) -> None:
    grads = make_grads("awkward", torch.float32, "cuda")
    theirs = torch.nn.utils.clip_grad_norm_(grad_holders([g.clone() for g in grads]), 1.0)
    res = clip_grad_norm_with_stats(grad_holders(grads), 1.0)  # impl="auto" picks the extension
    assert res.impl == "cuda"
    assert res.total_norm.device.type == "cuda" and res.total_norm.shape == ()
    assert torch.allclose(res.total_norm, theirs, rtol=1e-5)
    assert res.per_tensor_norm.shape == (len(grads),)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_cuda_nonfinite(cuda_ext, bad, make_grads, grad_holders, check_nonfinite) -> None:
    grads = make_grads("awkward", torch.float32, "cuda")
    grads[4].view(-1)[777] = bad
    check_nonfinite(grads, "cuda")
    grads = make_grads("awkward", torch.float32, "cuda")
    grads[0].fill_(bad)
    before = [g.clone() for g in grads]
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(grad_holders(grads), 1.0, error_if_nonfinite=True, impl="cuda")
    assert all(torch.equal(g, b) for g, b in zip(grads[1:], before[1:], strict=True))


@pytest.mark.parametrize("variant", ["three", "single"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_bit_identical_over_10_runs(cuda_ext, dtype, variant, make_grads) -> None:
    base = make_grads("many_tensors", dtype, "cuda", seed=3)[:150] + make_grads(
        "awkward", dtype, "cuda", seed=4
    )
    outs = []
    for _ in range(10):
        grads = [g.clone() for g in base]
        total, per, scale, _ = cuda_ext.clip(grads, 0.5, variant=variant)
        outs.append((total.clone(), per.clone(), scale.clone(), [g.clone() for g in grads]))
    for total, per, scale, grads in outs[1:]:
        assert torch.equal(total, outs[0][0]) and torch.equal(per, outs[0][1])
        assert torch.equal(scale, outs[0][2])
        assert all(torch.equal(a, b) for a, b in zip(grads, outs[0][3], strict=True))


def test_three_and_single_agree_bitwise(cuda_ext, make_grads) -> None:
    base = make_grads("awkward", torch.float32, "cuda", seed=5)
    a, b = [g.clone() for g in base], [g.clone() for g in base]
    ra = cuda_ext.clip(a, 0.5, variant="three")
    rb = cuda_ext.clip(b, 0.5, variant="single")
    assert all(torch.equal(x, y) for x, y in zip(ra, rb, strict=True))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("max_norm", [0.5, 1e9], ids=["active", "inactive"])
def test_cuda_long_and_many_tensors_match_float64(cuda_ext, max_norm) -> None:
    # one tensor split over every block of the grid (a shared tensor's pieces), then blocks
    # that each cover many small tensors, sizes around the 256-element tile
    gen = torch.Generator().manual_seed(13)
    shapes = [(3_000_001,), (255,), (256,), (257,)] + [((i * 53) % 700 + 1,) for i in range(150)]
    grads = [(torch.randn(s, generator=gen) * (1 + i % 3)).cuda() for i, s in enumerate(shapes)]
    total64, per64, truth = reference.float64_truth(grads, max_norm)
    total, per, _, _ = cuda_ext.clip(grads, max_norm)
    assert reference.rel_err(total, total64) < 2e-6
    assert reference.rel_err(per, per64) < 2e-6
    assert reference.rel_err(grads, truth) < 2e-7


def many_ends_shapes() -> list[tuple[int]]:
    """One launch whose runs cross about 30 tensor ends each on any GPU: the grid is SMs x 3
    blocks (span_grid), so two large tensors of 24 and 8 tiles per block put ~32 tiles in each
    run, and the 150 one-tile tensors between them give runs of ~32 pieces (four batches of the
    8 parked at once), with a shared piece at both ends of the runs that cross the large ones."""
    blocks = torch.cuda.get_device_properties(0).multi_processor_count * 3
    small = [((i * 37) % 256 + 1,) for i in range(150)]
    return [(24 * blocks * 256 + 3,), *small, (8 * blocks * 256 + 1,)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("norm_type", [2.0, float("inf"), 3.0], ids=["l2", "inf", "p3"])
def test_cuda_parked_and_block_pieces_both_match_float64(cuda_ext, dtype, norm_type) -> None:
    # runs with many tensor ends (more than the 8 pieces parked at once), one tensor over many
    # blocks (a shared piece at both ends of a run), and a NaN in a small tensor
    gen = torch.Generator().manual_seed(21)
    base = [
        (torch.randn(s, generator=gen) * (1 + i % 4)).to(dtype).cuda()
        for i, s in enumerate(many_ends_shapes())
    ]
    total64, per64, truth = reference.float64_truth(base, 0.5, norm_type)
    before = cuda_ext.set_parked_pieces(True)
    try:
        for parked in (True, False):
            cuda_ext.set_parked_pieces(parked)
            grads = [g.clone() for g in base]
            total, per, _, _ = cuda_ext.clip(grads, 0.5, norm_type)
            assert reference.rel_err(total, total64) < 2e-6, parked
            assert reference.rel_err(per, per64) < 2e-6, parked
            assert reference.rel_err(grads, truth) < (2e-7 if dtype == torch.float32 else 1e-2)
        nan = [g.clone() for g in base]
        nan[7][0] = float("nan")
        for parked in (True, False):
            cuda_ext.set_parked_pieces(parked)
            total, per, _, nonfinite = cuda_ext.clip([g.clone() for g in nan], 0.5, norm_type)
            assert torch.isnan(total) and bool(nonfinite) and torch.isnan(per[7]), parked
            assert torch.isfinite(per[6]) and torch.isfinite(per[8]), parked
    finally:
        cuda_ext.set_parked_pieces(before)
    assert before is True  # parked pieces are the default


def test_cuda_set_parked_pieces_switches_the_norm_kernel(cuda_ext) -> None:
    # else the A/B rows of bench-kernels would time one kernel twice and every test still pass
    grads = [torch.randn(1000 + i, device="cuda") for i in range(3)]
    names = {}
    before = cuda_ext.set_parked_pieces(True)
    try:
        for parked in (True, False):
            cuda_ext.set_parked_pieces(parked)
            acts = [torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=acts) as prof:
                cuda_ext.clip([g.clone() for g in grads], 0.5)
                torch.cuda.synchronize()
            names[parked] = {e.name for e in prof.events() if "k_clip_norm" in e.name}
    finally:
        cuda_ext.set_parked_pieces(before)
    # k_clip_norm<T, K, Parked, Load>: the third template argument is the switch
    assert names[True] and all(", true, " in n for n in names[True]), names
    assert names[False] and all(", false, " in n for n in names[False]), names


def test_cuda_parked_pieces_are_the_same_bits_run_to_run_and_under_a_graph(cuda_ext) -> None:
    gen = torch.Generator().manual_seed(22)
    base = [torch.randn((i * 53) % 900 + 1, generator=gen).cuda() for i in range(120)]
    base.append(torch.randn(1_500_001, generator=gen).cuda())
    runs = [cuda_ext.clip([g.clone() for g in base], 0.5)[:2] for _ in range(3)]
    grads = [g.clone() for g in base]
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        cuda_ext.clip(grads, 0.5)  # warm-up on the side stream, as capture requires
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        captured = cuda_ext.clip(grads, 0.5)
    for _ in range(2):
        torch._foreach_copy_(grads, base)
        graph.replay()
    torch.cuda.synchronize()
    runs.append(captured[:2])
    for total, per in runs[1:]:
        assert torch.equal(total, runs[0][0]) and torch.equal(per, runs[0][1])


def test_cuda_pdl_on_and_off_agree_bitwise(cuda_ext, make_grads) -> None:
    if torch.cuda.get_device_capability() < (9, 0):  # else both launch alike: a vacuous pass
        pytest.skip("programmatic dependent launch needs sm_90 or newer")
    base = make_grads("awkward", torch.float32, "cuda", seed=6)
    outs = []
    before = cuda_ext.set_pdl(True)
    try:
        for pdl in (True, False):
            cuda_ext.set_pdl(pdl)
            grads = [g.clone() for g in base]
            outs.append((cuda_ext.clip(grads, 0.5), grads))
    finally:
        cuda_ext.set_pdl(before)
    (ra, ga), (rb, gb) = outs
    assert all(torch.equal(x, y) for x, y in zip(ra, rb, strict=True))
    assert all(torch.equal(x, y) for x, y in zip(ga, gb, strict=True))
    assert not torch.equal(ga[5], base[5])  # the clip was active: the scale pass ran


@pytest.mark.parametrize("variant", ["three", "single"])
def test_cuda_no_host_sync(cuda_ext, variant, make_grads, grad_holders) -> None:
    grads = make_grads("many_tensors", torch.float32, "cuda")
    params = grad_holders(grads)
    clip_grad_norm_(params, 1.0, impl="cuda")  # warm-up: build + cache the chunk plan
    cuda_ext.clip(grads, 1.0, variant=variant)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        clip_grad_norm_(params, 1.0, impl="cuda")
        clip_grad_norm_with_stats(params, 1.0, impl="cuda")
        cuda_ext.clip(grads, 1e9, variant=variant)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_cuda_graph_capture(cuda_ext, make_grads) -> None:
    grads = make_grads("awkward", torch.float32, "cuda", seed=7)
    pristine = [g.clone() for g in grads]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on a side stream, as torch's graph recipe does
        for _ in range(2):
            cuda_ext.clip(grads, 0.5)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        total, per, _scale, _nonfinite = cuda_ext.clip(grads, 0.5)
    for seed in (11, 12):
        fresh = make_grads("awkward", torch.float32, "cuda", seed=seed)
        for g, f in zip(grads, fresh, strict=True):
            g.copy_(f)
        total64, per64, truth = reference.float64_truth(fresh, 0.5)
        graph.replay()
        torch.cuda.synchronize()
        assert reference.rel_err(total, total64) < 2e-6
        assert reference.rel_err(per, per64) < 2e-6
        assert reference.rel_err(grads, truth) < 2e-7
    del pristine


def test_a_captured_clip_replays_right_after_the_plan_cache_is_refilled(
    cuda_ext, make_grads
) -> None:
    # the cache holds 64 list shapes, then starts over; a graph keeps its plan's raw pointers,
    # so a plan used under capture must outlive that (tables.h keep_if_captured)
    grads = make_grads("awkward", torch.float32, "cuda", seed=7)
    for _ in range(2):
        cuda_ext.clip(grads, 0.5)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        total, per, _scale, _nonfinite = cuda_ext.clip(grads, 0.5)
    for n in range(1, 70):  # 69 new list shapes: the cache is cleared at least once
        cuda_ext.clip([torch.ones(n + 1000, device="cuda")], 1e9)
    torch.cuda.empty_cache()  # a freed plan's memory is given back and may be reused
    junk = [torch.full((1 << 20,), 7, dtype=torch.int32, device="cuda") for _ in range(8)]
    fresh = make_grads("awkward", torch.float32, "cuda", seed=13)
    for g, f in zip(grads, fresh, strict=True):
        g.copy_(f)
    total64, per64, truth = reference.float64_truth(fresh, 0.5)
    graph.replay()
    torch.cuda.synchronize()
    assert reference.rel_err(total, total64) < 2e-6
    assert reference.rel_err(per, per64) < 2e-6
    assert reference.rel_err(grads, truth) < 2e-7
    del junk


def test_stages_alone_match_reference(cuda_ext, make_grads) -> None:
    grads = make_grads("awkward", torch.float32, "cuda", seed=9)
    parts = cuda_ext.norm_partial(grads)
    ref_parts = reference.grad_norm_partial(grads, acc_dtype=torch.float64)
    assert reference.rel_err(parts, ref_parts) < 2e-6
    total, _per, scale, nonfinite = cuda_ext.norm_final(parts, cuda_ext.chunk_offsets(grads), 0.5)
    total64, _per64, truth = reference.float64_truth(grads, 0.5)
    assert reference.rel_err(total, total64) < 2e-6 and not bool(nonfinite)
    cuda_ext.scale_(grads, scale)
    assert reference.rel_err(grads, truth) < 2e-7
    one = torch.ones((), device="cuda")
    before = [g.clone() for g in grads]
    cuda_ext.scale_(grads, one)  # scale == 1: kernels exit at once, nothing written
    assert all(torch.equal(a, b) for a, b in zip(grads, before, strict=True))


def test_cuda_rejects_bad_inputs(cuda_ext) -> None:
    ext = cuda_ext.load()
    # what the reference can take raises the registered type (a RuntimeError subclass) ...
    assert issubclass(ext.UnsupportedInput, RuntimeError)
    with pytest.raises(ext.UnsupportedInput, match="contiguous"):
        ext.clip([torch.randn(8, 8, device="cuda").t()], 1.0, 2.0, True)
    with pytest.raises(ext.UnsupportedInput, match="dtype"):
        ext.clip([torch.randn(8, device="cuda", dtype=torch.float64)], 1.0, 2.0, True)
    # ... and a real misuse a plain RuntimeError, which the Python face does not swallow
    with pytest.raises(RuntimeError, match="CUDA") as info:
        ext.clip([torch.randn(8)], 1.0, 2.0, True)
    assert not isinstance(info.value, ext.UnsupportedInput)
    # the Python face routes what the kernels cannot take to the reference instead
    g = [torch.randn(8, 8, device="cuda", dtype=torch.float64)]
    total, *_ = cuda_ext.clip(g, 1.0)
    assert total.dtype == torch.float64


@pytest.mark.parametrize("p", [2.0, math.inf, 3.0], ids=["l2", "inf", "p3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_gpt_like_list_of_large_and_small_tensors_matches_float64(cuda_ext, p, dtype) -> None:
    # a GPT-like list: large matrices between runs of layer-norm / bias sized tensors (many
    # tensor ends inside one block's run), some of them unaligned views (scalar path),
    # and a NaN in one small tensor that must reach its own per-tensor norm and the total
    gen = torch.Generator().manual_seed(21)
    grads = []
    for i in range(24):
        big = torch.randn(400_000 + 4099 * i, generator=gen)
        small = [torch.randn(s, generator=gen) * (1 + i % 4) for s in (384, 1152, 2048, 129)]
        small.append(torch.randn(769, generator=gen))  # sliced below: a view 4 bytes in
        grads += [big, *small]
    # the slice after the copy to the device (a copy would be aligned): 768 elements, offset 1
    grads = [(g[1:] if g.numel() == 769 else g) for g in (x.to("cuda", dtype) for x in grads)]
    total64, per64, truth = reference.float64_truth(grads, 0.5, p)
    total, per, _, _ = cuda_ext.clip(grads, 0.5, p)
    assert reference.rel_err(total, total64) < 2e-6
    assert reference.rel_err(per, per64) < 2e-6
    assert reference.rel_err(grads, truth) < (2e-7 if dtype == torch.float32 else 4e-3)
    grads[8].view(-1)[100] = math.nan  # a 1152-element tensor (4.5 tiles)
    total, per, _, nonfinite = cuda_ext.clip(grads, 0.5, p, apply=False)
    assert bool(nonfinite) and math.isnan(float(total)) and math.isnan(float(per[8]))
    assert torch.isfinite(per[:8]).all() and torch.isfinite(per[9:]).all()
