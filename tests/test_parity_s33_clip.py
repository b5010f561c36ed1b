"""Parity review (s33): where the drop-in parts from ``torch.nn.utils.clip_grad_norm_`` on
purpose, found by a fuzz of mixed-dtype lists on the CPU, pinned so the docstring's list of
differences stays true.

- An fp16 gradient whose own norm passes 65504 beside a float32 one: torch takes each norm in
  its own dtype, so its total is inf and every gradient is zeroed; ours is the finite float32
  total, and the clip brings the list to ``max_norm``.
- float32 gradients whose squares over- or underflow: both give the same total (torch's CPU
  norm accumulates float32 in float32 too), so nothing is documented for them.

    pytest tests/test_parity_s33_clip.py -q
"""

from __future__ import annotations

import math

import torch

from andrea_diag import clip_grad_norm_


def _mixed() -> list[torch.nn.Parameter]:
    half = torch.nn.Parameter(torch.zeros(3, dtype=torch.float16))
    half.grad = torch.tensor([-60000.0, 59968.0, -40000.0], dtype=torch.float16)
    single = torch.nn.Parameter(torch.zeros(1))
    single.grad = torch.tensor([2e-4])
    return [half, single]


def test_an_fp16_norm_past_its_range_beside_float32_is_finite_here_and_inf_in_torch() -> None:
    theirs, ours = _mixed(), _mixed()
    t = torch.nn.utils.clip_grad_norm_(theirs, 1.0, 2.0)
    o = clip_grad_norm_(ours, 1.0, 2.0, impl="reference")
    assert math.isinf(t.item()) and all(not p.grad.any() for p in theirs)  # torch: all zeroed
    assert o.dtype == torch.float32 and math.isfinite(o.item())
    true = math.sqrt(sum(float(v) ** 2 for p in _mixed() for v in p.grad.double().tolist()))
    assert math.isclose(o.item(), true, rel_tol=1e-6)
    after = math.sqrt(sum(float(v) ** 2 for p in ours for v in p.grad.double().tolist()))
    assert math.isclose(after, 1.0, rel_tol=2e-3)  # fp16 rounding of the scaled values


def test_float32_squares_that_leave_the_range_agree_with_torch() -> None:
    for value in (3e19, 1e-24):
        for p_norm in (2.0, 1.0, 3.0, math.inf):
            got = []
            for clip in (torch.nn.utils.clip_grad_norm_, clip_grad_norm_):
                p = torch.nn.Parameter(torch.zeros(4))
                p.grad = torch.full((4,), value)
                got.append((clip([p], 1.0, p_norm).item(), p.grad.tolist()))
            assert got[0] == got[1], (value, p_norm, got)
