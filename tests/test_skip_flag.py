"""The pipelined step's skip flag (train/measure.py ``skip_flag``): 1.0 exactly where the eager
path would not step. The CPU runs torch's ops; CUDA one launch of k_skip_flag, checked here
against the same truth table."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from andrea_diag.clip.api import ClipResult
from andrea_diag.train.measure import skip_flag

LOSSES = [2.5, 0.0, math.inf, -math.inf, math.nan]


def _cases(device: str) -> list[tuple[torch.Tensor, ClipResult, float]]:
    out = []
    for loss, nonfinite, skip, dtype in itertools.product(
        LOSSES, (False, True), (None, False, True), (torch.float32, torch.bfloat16)
    ):
        clip = ClipResult(
            total_norm=torch.tensor(1.0, device=device),
            per_tensor_norm=torch.ones(1, device=device),
            scale=torch.tensor(1.0, device=device),
            nonfinite=torch.tensor(nonfinite, device=device),
            impl="test",
            skip=None if skip is None else torch.tensor(skip, device=device),
        )
        want = 1.0 if nonfinite or not math.isfinite(loss) or bool(skip) else 0.0
        out.append((torch.tensor(loss, device=device, dtype=dtype), clip, want))
    return out


def test_the_skip_flag_is_one_exactly_where_the_eager_path_would_not_step() -> None:
    for loss, clip, want in _cases("cpu"):
        flag = skip_flag(loss, clip)
        assert flag.dtype == torch.float32 and flag.dim() == 0
        assert float(flag) == want, (loss, clip.nonfinite, clip.skip)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA kernel needs a GPU")
def test_the_cuda_skip_flag_kernel_keeps_the_truth_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from andrea_diag.clip import cuda

    ok, why = cuda.available()
    assert ok, why  # on a GPU machine a build failure is a failure, not a skip
    launched = []
    real = cuda.skip_flag
    monkeypatch.setattr(cuda, "skip_flag", lambda *a: launched.append(1) or real(*a))
    cases = _cases("cuda")
    for loss, clip, want in cases:
        flag = skip_flag(loss, clip)
        assert flag.dtype == torch.float32 and flag.dim() == 0 and flag.is_cuda
        assert float(flag) == want, (loss, clip.nonfinite, clip.skip)
    assert len(launched) == len(cases)  # the kernel, not the fallback
