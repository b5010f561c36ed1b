"""Small clip workload for compute-sanitizer (memcheck / racecheck) on a GPU machine, checked
against the float64 reference as it goes.

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python3 bench/sanitize_clip.py
    compute-sanitizer --tool racecheck python3 bench/sanitize_clip.py

With the caching allocator off, every tensor is its own cudaMalloc, so an out-of-bounds access
past a gradient's end is caught instead of landing in a neighbour inside one pool block.
Exercises every kernel: all dtypes, sizes around the 256-element tile and the 16384-element
chunk, odd sizes, empty tensors (the inf norm too), a tensor split over many blocks and blocks
spanning many tensors, small tensors next to large ones (many tensor ends in one run), a list needing
several launches (one completion counter across them), the stages alone, an all-empty list,
unaligned views (the scalar path), PDL on and off, and the experiments of csrc/dev/ (the
single-launch variant, ClippedAdamW's fused update), and the pipelined update's two flags
(k_spike_flag over signals of 1 to 70 values, k_skip_flag with and without the mode's skip). Every clip's norm, per-tensor norms and
clipped gradients are compared with torch's clip in float64; the script exits non-zero on the
first mismatch.
"""

from __future__ import annotations

import torch

from andrea_diag.clip import cuda, reference

SHAPES = [
    (1,),
    (255,),
    (257,),
    (555,),
    (65535,),
    (65537,),
    (2048 * 32 + 1,),
    (97, 1025),
    (0,),
    (7,),
]
# relative to float64: norms accumulate in float32/float64; gradients are rounded once to T
TOL = {torch.float32: (2e-6, 2e-7), torch.bfloat16: (2e-6, 4e-3), torch.float16: (2e-6, 5e-4)}
checked = 0


def check(grads: list[torch.Tensor], max_norm: float, p: float = 2.0, **kw: object) -> None:
    """One clip of ``grads`` (in place) against the float64 truth of their values before it."""
    global checked
    # on the host: only the clipper's own kernels run under the sanitizer (and fast)
    total64, per64, truth = reference.float64_truth([g.cpu() for g in grads], max_norm, p)
    total, per, _, _ = cuda.clip(grads, max_norm, p, **kw)
    tol_norm, tol_grad = max(TOL[g.dtype] for g in grads)  # the loosest dtype of the list
    errs = (
        reference.rel_err(total, total64),
        reference.rel_err(per, per64),
        reference.rel_err(grads, truth),
    )
    ok = errs[0] <= tol_norm and errs[1] <= tol_norm and errs[2] <= tol_grad
    shapes = [tuple(g.shape) for g in grads][:6]
    assert ok, f"mismatch {grads[0].dtype} p={p} max_norm={max_norm} {kw} {shapes}: {errs}"
    checked += 1


def main() -> None:
    ok, why = cuda.available()
    assert ok, why
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for variant in ("three", "single"):
            for max_norm in (0.5, 1e9):
                for p in (2.0, float("inf"), 1.5):
                    grads = [torch.randn(s, generator=gen, device="cuda").to(dtype) for s in SHAPES]
                    check(grads, max_norm, p, variant=variant)
        grads = [torch.randn(s, generator=gen, device="cuda").to(dtype) for s in SHAPES]
        parts = cuda.norm_partial(grads)
        _, _, scale, _ = cuda.norm_final(parts, cuda.chunk_offsets(grads), 0.5)
        cuda.scale_(grads, scale)
        # unaligned views: the scalar (non-vector) path
        flat = torch.randn(70001, generator=gen, device="cuda").to(dtype)
        check([flat[1:35001], flat[35003:]], 0.5)
    # one tensor over every block, then one block over many tensors; PDL off then on
    for pdl in (False, True):
        before = cuda.set_pdl(pdl)
        big = [torch.randn(3_000_001, generator=gen, device="cuda"), torch.randn(5, device="cuda")]
        check(big, 0.5)
        check([torch.randn((i % 50) + 1, generator=gen, device="cuda") for i in range(400)], 0.5)
        cuda.set_pdl(before)
    # GPT-like: matrices between layer-norm / bias sized tensors (many tensor ends in one run),
    # with the norm pass's pieces parked per warp (the default) and one block reduction each
    for parked in (True, False):
        before = cuda.set_parked_pieces(parked)
        for p in (2.0, float("inf")):
            gpt = [(200_000 + 999 * i, 384, 1152, 129, 2048)[i % 5] for i in range(60)]
            check([torch.randn(n, generator=gen, device="cuda") for n in gpt], 0.5, p)
        # runs of ~32 pieces (several batches of the 8 parked at once) on any GPU: two large
        # tensors of 24 and 8 tiles per block of the SMs x 3 grid, 150 one-tile tensors between
        blocks = torch.cuda.get_device_properties(0).multi_processor_count * 3
        ends = [24 * blocks * 256 + 3] + [(i * 37) % 256 + 1 for i in range(150)]
        for p in (2.0, float("inf")):
            ends_grads = [torch.randn(n, generator=gen, device="cuda") for n in ends]
            check([*ends_grads, torch.randn(8 * blocks * 256 + 1, device="cuda")], 0.5, p)
        cuda.set_parked_pieces(before)
    # the norm pass's load modes (an L2 policy operand in each load): the same runs, p = 2
    for mode in cuda.NORM_LOADS:
        before_load = cuda.set_norm_load(mode)
        blocks = torch.cuda.get_device_properties(0).multi_processor_count * 3
        ends = [24 * blocks * 256 + 3] + [(i * 37) % 256 + 1 for i in range(150)]
        check([torch.randn(n, generator=gen, device="cuda") for n in ends], 0.5)
        check([torch.randn(n, generator=gen, device="cuda").to(torch.bfloat16) for n in ends], 0.5)
        cuda.set_norm_load(before_load)
    many = [torch.randn((i % 300) + 1, generator=gen, device="cuda") for i in range(400)]
    mixed = [g.to(torch.bfloat16) if i % 2 else g for i, g in enumerate(many[:200])]
    check(mixed, 0.5)  # several dtypes and launches, one completion counter
    check([torch.zeros(0, device="cuda"), torch.zeros(3, 0, device="cuda")], 0.5)  # no tile
    _adamw(gen)
    _flags(gen)
    torch.cuda.synchronize()
    print(f"sanitize workload done: {checked} clips matched the float64 reference")


def _flags(gen: torch.Generator) -> None:
    """k_spike_flag (one warp over n values, n around the warp's 32) and k_skip_flag, each
    against its rule on the host."""
    global checked
    norm = torch.tensor(1.0, device="cuda")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for n in (1, 31, 32, 33, 70):
            signal = torch.rand(n, generator=gen, device="cuda").to(dtype)
            mean = float(signal.float().mean())
            assert bool(cuda.spike_flag(norm, signal, 2.0, mean - 0.01))
            assert not bool(cuda.spike_flag(norm, signal, 2.0, mean + 0.01))
            checked += 2
        loss, bad = torch.tensor(2.0, device="cuda").to(dtype), torch.tensor(False, device="cuda")
        for skip in (None, bad, ~bad):
            want = 0.0 if skip is None or not bool(skip) else 1.0
            assert float(cuda.skip_flag(bad, loss, skip)) == want
            checked += 1


def _adamw(gen: torch.Generator) -> None:
    """ClippedAdamW on CUDA: k_step_inc + k_adamw_clipped (fp32 gradients, as p.grad must be)."""
    from andrea_diag.clip.fused_adamw import ClippedAdamW

    params = [torch.nn.Parameter(torch.randn(s, generator=gen, device="cuda")) for s in SHAPES]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen, device="cuda")
    opt = ClippedAdamW(params, lr=1e-3, max_norm=0.5, impl="cuda")
    for _ in range(2):
        opt.step()


if __name__ == "__main__":
    main()
