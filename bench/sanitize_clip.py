"""Small clip workload for compute-sanitizer (memcheck / racecheck) on a GPU machine.

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python3 bench/sanitize_clip.py
    compute-sanitizer --tool racecheck python3 bench/sanitize_clip.py

With the caching allocator off, every tensor is its own cudaMalloc, so an out-of-bounds access
past a gradient's end is caught instead of landing in a neighbour inside one pool block.
Exercises every kernel: all dtypes, chunk-edge sizes, empty tensors, a list needing several
launches, the stages alone and the single-launch variant, clipping on and off.
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
    torch.cuda.synchronize()
    print("sanitize workload done")


if __name__ == "__main__":
    main()
