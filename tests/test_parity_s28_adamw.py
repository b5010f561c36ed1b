"""Parity review (s28): ``ClippedAdamW`` against ``torch.optim.AdamW`` in torch 2.13 on the CPU.

- The step after the clip is torch's single-tensor AdamW step op for op (``clip/adamw_reference.py``):
  the same bits in float32, float64 and bfloat16. It rounded elsewhere: one ulp apart in
  float32, and in bf16 (where it also rounded the step size to bf16) up to 18 ulps after one step.
- A group flag changed after the group was added (``group["maximize"] = True``) is honoured by
  torch at its next step; ours ignored it. It is refused at ``step()`` now, before anything runs.
- ``clip_adamw_`` (the functional form) refuses a ``norm_type`` its sums cannot take, as the
  optimizer does: 0 skipped every step as non-finite, a negative p never clipped.

    pytest tests/test_parity_s28_adamw.py -q -p no:cacheprovider
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from andrea_diag.clip.fused_adamw import ClippedAdamW, clip_adamw_

HYPERS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "large lr and decay": {"lr": 0.1, "weight_decay": 0.5},
    "low betas": {"lr": 1e-2, "betas": (0.5, 0.9)},
    "no decay, eps 0": {"weight_decay": 0.0, "eps": 0.0},
}


def _train(cls: type, dtype: torch.dtype, steps: int, **hyper: Any) -> list[torch.Tensor]:
    """``steps`` updates of two parameters (one without a gradient every third step) from fixed
    data; returns the parameters and their moments."""
    gen = torch.Generator().manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4096, generator=gen).to(dtype))
    b = torch.nn.Parameter(torch.randn(3, generator=gen).to(dtype))
    extra = {"max_norm": math.inf, "impl": "reference"} if cls is ClippedAdamW else {}
    opt = cls([w, b], **hyper, **extra)
    for i in range(steps):
        w.grad = torch.randn(4096, generator=gen).to(dtype)
        b.grad = torch.randn(3, generator=gen).to(dtype) if i % 3 else None
        opt.step()
    out = [w.detach(), b.detach()]
    for p in (w, b):
        out += [opt.state[p]["exp_avg"], opt.state[p]["exp_avg_sq"], opt.state[p]["step"]]
    return out


@pytest.mark.parametrize("hyper", list(HYPERS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_the_step_after_the_clip_gives_torch_adamws_bits_on_the_cpu(
    dtype: torch.dtype, hyper: str
) -> None:
    ours = _train(ClippedAdamW, dtype, 10, **HYPERS[hyper])
    theirs = _train(torch.optim.AdamW, dtype, 10, **HYPERS[hyper])
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b), int((a != b).sum())


def test_an_fp16_step_is_torchs_to_one_ulp() -> None:
    """torch's half ``sqrt`` rounds a few elements differently from float32's sqrt rounded to
    fp16, so fp16 is not bit for bit; each element stays within one fp16 ulp of torch's."""
    hyper = {"lr": 0.1, "weight_decay": 0.5, "eps": 1e-3}  # eps 1e-8 is 0 in fp16: inf steps
    ours = _train(ClippedAdamW, torch.float16, 10, **hyper)[0].double()
    theirs = _train(torch.optim.AdamW, torch.float16, 10, **hyper)[0].double()
    assert bool(theirs.isfinite().all())
    ulp = torch.finfo(torch.float16).eps * theirs.abs().clamp(min=2.0**-14)
    assert bool(((ours - theirs).abs() <= ulp).all())
    assert int((ours != theirs).sum()) <= 8  # of 4096


FLAGS_SET_LATER: dict[str, tuple[str, Any]] = {
    "maximize": ("maximize", True),
    "amsgrad": ("amsgrad", True),
    "differentiable": ("differentiable", True),
    "Adam's coupled decay": ("decoupled_weight_decay", False),
    "a tensor lr": ("lr", torch.tensor(1e-3)),
}


@pytest.mark.parametrize("case", list(FLAGS_SET_LATER))
def test_a_flag_set_on_a_group_after_it_was_added_is_refused_at_the_next_step(case: str) -> None:
    key, value = FLAGS_SET_LATER[case]
    p = torch.nn.Parameter(torch.ones(3))
    opt = ClippedAdamW([p], lr=1e-2, max_norm=1.0)
    p.grad = torch.full((3,), 0.5)
    opt.step()
    before = (p.detach().clone(), {k: v.clone() for k, v in opt.state[p].items()})
    opt.param_groups[0][key] = value  # torch's AdamW honours this at its next step
    calls = []
    with pytest.raises(ValueError, match="ClippedAdamW does not support"):
        opt.step(lambda: calls.append(1))
    assert calls == []  # refused before the closure's forward and backward
    assert torch.equal(p.detach(), before[0])
    assert all(torch.equal(opt.state[p][k], v) for k, v in before[1].items())


@pytest.mark.parametrize("norm_type", [0.0, -1.0, -math.inf], ids=["zero", "minus-one", "-inf"])
def test_the_functional_step_refuses_a_norm_type_its_sums_cannot_take(norm_type: float) -> None:
    p, g = torch.ones(4), torch.full((4,), 0.5)
    m, v, step = torch.zeros(4), torch.zeros(4), torch.zeros(())
    with pytest.raises(ValueError, match="norm_type must be positive or inf"):
        clip_adamw_([p], [g], [m], [v], [step], max_norm=1.0, norm_type=norm_type)
    assert torch.equal(p, torch.ones(4)) and float(step) == 0.0 and not m.any()
