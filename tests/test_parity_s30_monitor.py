"""Parity review (s30): what ``SpikeMonitor`` records of the clip it observes.

- torch's ``clip_grad_norm_`` returns a bf16 total for bf16 gradients. Handed to ``after_clip``
  as ``total.item()`` or ``total.float()`` (a loop that logs a float, the Trainer's
  ``grad_norm``), it lost its dtype, and the factor read back from the gradients (one ulp of
  bf16 from 1) was taken as a clip: an update torch never clipped was recorded with
  ``clip_coef`` 0.997 or 1.002, and its per-tensor pre-clip norms were divided by that.
- A ``ClipResult`` of another list of gradients than the model's (a clip of one layer) was
  recorded as the whole model's ``grad_norm``, and the per-layer norm probe failed on the count
  and was disabled for the rest of the run. It is refused now, before the update is counted.

    pytest tests/test_parity_s30_monitor.py -q -p no:cacheprovider
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from andrea_diag.clip.api import clip_grad_norm_with_stats
from andrea_diag.clip.from_total import clip_from_total
from andrea_diag.monitor import SpikeMonitor
from andrea_diag.record import load_run


def _model(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 8)]
    return torch.nn.Sequential(*layers).to(dtype)


def _bf16_grads(seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(2000, generator=gen) * 3).to(torch.bfloat16) for _ in range(3)]


@pytest.mark.parametrize("as_float", [lambda t: t.item(), lambda t: t.float()])
def test_an_unclipped_bf16_update_reads_a_factor_of_one_whatever_the_totals_type(as_float):
    for seed in range(12):  # a factor one bf16 ulp from 1 on most seeds before the fix
        params = []
        for g in _bf16_grads(seed):
            p = torch.nn.Parameter(torch.zeros_like(g))
            p.grad = g.clone()
            params.append(p)
        total = torch.nn.utils.clip_grad_norm_(params, 1e9)  # the peer: nothing clipped
        assert all(torch.equal(p.grad, g) for p, g in zip(params, _bf16_grads(seed), strict=True))
        clip = clip_from_total(as_float(total), [p.grad for p in params])
        assert clip is not None
        assert float(clip.scale) == 1.0, seed
        # the pre-clip per-tensor norms are the gradients' own, not divided by a phantom factor
        own = torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in params])
        torch.testing.assert_close(clip.per_tensor_norm, own, rtol=1e-6, atol=0.0)


def test_a_clipped_bf16_update_is_still_read_as_clipped_from_a_float_total() -> None:
    params = []
    for g in _bf16_grads(0):
        p = torch.nn.Parameter(torch.zeros_like(g))
        p.grad = g.clone()
        params.append(p)
    total = torch.nn.utils.clip_grad_norm_(params, 10.0)  # ~ 232 -> 10
    clip = clip_from_total(total.item(), [p.grad for p in params])
    assert clip is not None
    assert float(clip.scale) == pytest.approx(10.0 / total.item(), rel=2**-7)


def _run(tmp_path: Path, dtype: torch.dtype, max_norm: float, to_host: bool) -> dict:
    model = _model(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    clipped: list[bool] = []
    with SpikeMonitor(model, opt, tmp_path / "run", shadow=False, lockin=False) as mon:
        for _ in range(8):
            loss = model(torch.randn(32, 64, dtype=dtype)).float().square().mean() * 100
            loss.backward()
            mon.after_backward(loss)
            before = [p.grad.clone() for p in model.parameters()]
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            after = [p.grad for p in model.parameters()]
            clipped.append(not all(map(torch.equal, before, after)))
            mon.after_clip(total.item() if to_host else total)
            opt.step()
            mon.after_step()
            opt.zero_grad()
    return {"metrics": load_run(mon.run_dir)["metrics"], "torch_clipped": clipped}


@pytest.mark.parametrize("to_host", [True, False])
def test_a_bf16_loop_torch_never_clipped_records_no_clip(tmp_path: Path, to_host: bool) -> None:
    got = _run(tmp_path, torch.bfloat16, math.inf, to_host)
    assert not any(got["torch_clipped"])  # the peer's own answer
    metrics = got["metrics"]
    assert metrics["clip_coef"].tolist() == [1.0] * len(metrics)
    assert metrics["grad_norm_post"].tolist() == metrics["grad_norm"].tolist()


def test_a_bf16_loop_torch_clipped_records_the_clip(tmp_path: Path) -> None:
    got = _run(tmp_path, torch.bfloat16, 1e-3, True)
    assert all(got["torch_clipped"])
    metrics = got["metrics"]
    want = (1e-3 / metrics["grad_norm"]).tolist()
    assert metrics["clip_coef"].tolist() == pytest.approx(want, rel=2**-7)


def test_a_clip_result_of_another_list_of_gradients_is_refused(tmp_path: Path) -> None:
    model = _model(torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with SpikeMonitor(model, opt, tmp_path / "run", shadow=False, lockin=False) as mon:
        loss = model(torch.randn(32, 64)).square().mean()
        loss.backward()
        mon.after_backward(loss)
        first = list(model[0].parameters())  # one layer's weight and bias of the model's four
        subset = clip_grad_norm_with_stats(first, 0.1)
        with pytest.raises(ValueError, match=r"2 per-tensor norms.*4 trainable parameters"):
            mon.after_clip(subset)
        assert mon.update == 0  # refused before the update was counted
        # the same call over the model's parameters is taken, and is torch's total
        twin = [p.grad.clone() for p in model.parameters()]
        full = clip_grad_norm_with_stats(model.parameters(), 0.1)
        mon.after_clip(full)
        opt.step()
        mon.after_step()
    holders = [torch.nn.Parameter(torch.zeros_like(g)) for g in twin]
    for h, g in zip(holders, twin, strict=True):
        h.grad = g
    expected = float(torch.nn.utils.clip_grad_norm_(holders, 0.1))
    metrics = load_run(mon.run_dir)["metrics"]
    assert metrics["grad_norm"].tolist() == pytest.approx([expected], rel=1e-6)
    assert any(c.startswith("layer_gn/") for c in metrics.columns)  # the probe still ran
