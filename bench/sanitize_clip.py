"""Small clip workload for compute-sanitizer (memcheck / racecheck) on a GPU machine.

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python3 bench/sanitize_clip.py
    compute-sanitizer --tool racecheck python3 bench/sanitize_clip.py

With the caching allocator off, every tensor is its own cudaMalloc, so an out-of-bounds access
past a gradient's end is caught instead of landing in a neighbour inside one pool block.
Exercises every kernel: all dtypes, chunk-edge sizes, empty tensors, a list needing several
launches (the last-block-done counter across launches), the stages alone, an all-empty list,
and the experiments of kernels/dev/ (the single-launch variant, ClippedAdamW's fused update).
"""

from __future__ import annotations

import torch

from andrea_diag.clip import cuda

SHAPES = [(1,), (555,), (65535,), (65537,), (2048 * 32 + 1,), (97, 1025), (0,), (7,)]


def main() -> None:
    ok, why = cuda.available()
    assert ok, why
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        grads = [torch.randn(s, generator=gen, device="cuda").to(dtype) for s in SHAPES]
        for variant in ("three", "single"):
            for max_norm in (0.5, 1e9):
                for p in (2.0, float("inf"), 1.5):
                    cuda.clip(grads, max_norm, p, variant=variant)
        parts = cuda.norm_partial(grads)
        _, _, scale, _ = cuda.norm_final(parts, cuda.chunk_offsets(grads), 0.5)
        cuda.scale_(grads, scale)
        # unaligned views: the scalar (non-vector) path
        flat = torch.randn(70001, generator=gen, device="cuda").to(dtype)
        cuda.clip([flat[1:], flat[3:100]], 0.5)
    many = [torch.randn((i % 50) + 1, generator=gen, device="cuda") for i in range(400)]
    cuda.clip(many, 0.5)
    mixed = [g.to(torch.bfloat16) if i % 2 else g for i, g in enumerate(many[:200])]
    cuda.clip(mixed, 0.5)  # several dtypes and launches, one completion counter
    cuda.clip([torch.zeros(0, device="cuda")], 0.5)  # no chunk at all: the final kernel alone
    _adamw(gen)
    torch.cuda.synchronize()
    print("sanitize workload done")


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
