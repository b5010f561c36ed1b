"""compute-sanitizer target: k_copy_if with the flag off, then on, over aligned and unaligned tensors (CUDA only)."""

import torch

from andrea_diag.clip import cuda

ext = cuda.load()
src = [torch.randn(n, device="cuda") for n in (1, 17, 16384, 70001)]
flat = torch.zeros(80000, device="cuda")
dst = [torch.zeros_like(s) for s in src[:-1]] + [flat[3 : 3 + 70001]]
for f in (False, True):
    ext.copy_if(dst, src, torch.tensor(f, device="cuda"))
torch.cuda.synchronize()
print("copy_if ok", all(torch.equal(a, b) for a, b in zip(dst, src, strict=True)))
