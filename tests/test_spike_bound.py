"""The pipelined update's spike bound (probes/spike_bound.py): a superset of the spike probe's
decision, checked on the device, so the optimizer-state probe's copies for a spike are made only
where one may be. The pipeline's own tests (tests/test_pipeline.py) run it inside an arm."""

from __future__ import annotations

import math
import random
from collections import deque

import pytest
import torch

from andrea_diag.device import PinnedStaging
from andrea_diag.probes.base import robust_z
from andrea_diag.probes.spike_bound import NO_BOUND, SpikeBound, copy_if, spike_bound, threshold
from andrea_diag.probes.spikes import REL_FLOOR, SpikeProbe


def test_every_value_whose_robust_z_spikes_lies_above_the_threshold_in_float32() -> None:
    rng = random.Random(0)
    checked = 0
    for _ in range(400):
        level, spread = rng.uniform(-5, 12), 10 ** rng.uniform(-6, 1)
        hist = [level + spread * rng.gauss(0, 1) for _ in range(rng.randint(10, 50))]
        z = rng.choice([1.0, 3.0, 6.0])
        thr = threshold(hist, 10, z, REL_FLOOR)
        thr32 = torch.tensor(thr, dtype=torch.float32)
        for _ in range(50):  # values near the threshold: the hard cases
            v = thr + (abs(thr) + spread) * rng.uniform(-1e-3, 1e-3)
            v32 = float(torch.tensor(v, dtype=torch.float32))  # what the device holds
            zv = robust_z(v32, hist, REL_FLOOR)
            if zv is not None and zv > z:
                checked += 1
                assert torch.tensor(v32, dtype=torch.float32) > thr32, (v32, thr, hist)
    assert checked > 1000  # the property was exercised, not vacuous


def test_the_warm_up_bounds_nothing_but_non_finite_values() -> None:
    assert threshold([1.0] * 4, 10, 6.0, REL_FLOOR) == NO_BOUND
    bound = SpikeBound(NO_BOUND, NO_BOUND, None)
    staging, norm = PinnedStaging(), torch.tensor(1e30)
    assert not bool(bound.device_flag(torch.tensor(1e30), torch.empty(0), norm, staging))
    for bad in (math.inf, -math.inf, math.nan):
        assert bool(bound.device_flag(torch.tensor(bad), torch.empty(0), norm, staging))
        assert bool(
            bound.device_flag(torch.tensor(1.0), torch.empty(0), torch.tensor(bad), staging)
        )


def test_the_bound_follows_the_probes_signal_raw_loss_then_excess() -> None:
    probe = SpikeProbe(window=20, z_thresh=3.0)
    for i in range(probe.warmup):
        probe._win["loss"].append(3.0 + 0.01 * (i % 3))
        probe._win["grad_norm"].append(1.0 + 0.02 * (i % 4))
        probe._win["excess"].append(0.01 * (i % 5) - 0.02)
    raw = spike_bound(probe, [0, 1])  # no source has 3 means yet: the raw loss
    assert raw.ref is None and 3.0 < raw.signal_max < 3.1 and 1.0 < raw.grad_max < 1.2
    for _ in range(3):
        probe._src_hist.setdefault(0, deque()).append(2.0)
        probe._src_hist.setdefault(1, deque()).append(4.0)
    mixed = spike_bound(probe, [1, 0, 1])
    assert mixed.ref == [4.0, 2.0, 4.0] and -0.1 < mixed.signal_max < 0.2
    assert spike_bound(probe, [0, -1]).ref is None  # an unlabelled example: the raw loss
    staging, norm = PinnedStaging(), torch.tensor(1.0)
    ordinary, outlier = torch.tensor([4.0, 2.0, 4.0]), torch.tensor([4.0, 2.0, 5.0])
    assert not bool(mixed.device_flag(torch.tensor(3.3), ordinary, norm, staging))
    assert bool(mixed.device_flag(torch.tensor(3.3), outlier, norm, staging))  # excess 1/3
    assert bool(mixed.device_flag(torch.tensor(3.3), ordinary, torch.tensor(5.0), staging))


def test_copy_if_copies_only_under_a_set_flag() -> None:
    src, dst = [torch.arange(4.0), torch.ones(2, 3)], [torch.zeros(4), torch.zeros(2, 3)]
    copy_if(dst, src, torch.tensor(False))
    assert all(not d.any() for d in dst)
    copy_if(dst, src, torch.tensor(True))
    assert all(torch.equal(d, s) for d, s in zip(dst, src, strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA kernel needs a GPU")
def test_the_cuda_copy_if_kernel_copies_every_dtype_and_view_only_under_a_set_flag() -> None:
    from andrea_diag.clip import cuda

    if not cuda.available()[0]:
        pytest.skip(cuda.available()[1])
    flat = torch.zeros(40_003, device="cuda")
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        flat.zero_()  # the float32 round wrote its view
        src = [torch.randn(n, device="cuda").to(dt) for n in (1, 17, 16_384, 70_001)]
        dst = [torch.zeros_like(s) for s in src]
        src.append(torch.randn(9_001, device="cuda").to(dt))
        dst.append(flat[3 : 3 + 9_001].to(dt) if dt != torch.float32 else flat[3 : 3 + 9_001])
        cuda.load().copy_if(dst, src, torch.tensor(False, device="cuda"))
        assert all(not d.any() for d in dst)
        cuda.load().copy_if(dst, src, torch.tensor(True, device="cuda"))
        assert all(torch.equal(d, s) for d, s in zip(dst, src, strict=True)), dt


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA kernel needs a GPU")
def test_the_cuda_spike_flag_kernel_decides_as_the_torch_ops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from andrea_diag.clip import cuda
    from andrea_diag.probes import spike_bound as sb

    ok, why = cuda.available()
    assert ok, why  # on a GPU machine a build failure is a failure, not a skip
    rng, staging, checked = random.Random(1), PinnedStaging(), 0
    special = [math.inf, -math.inf, math.nan]
    for i in range(600):
        ref = None if i % 2 else [rng.uniform(1.0, 9.0) for _ in range(16)]
        bound = SpikeBound(
            rng.choice([NO_BOUND, math.nan, *[rng.uniform(0.1, 5.0)] * 4]),
            rng.choice([NO_BOUND, math.nan, *[rng.uniform(-1.0, 5.0)] * 4]),
            ref,
        )
        grad_norm = rng.choice([*special, *[rng.uniform(0.0, 6.0)] * 6])
        loss = rng.choice([*special, *[rng.uniform(0.0, 6.0)] * 6])
        ex = [(r if ref else 3.0) + rng.uniform(-1.0, 2.0) for r in ref or [0.0] * 16]
        if i % 7 == 0:
            ex[rng.randrange(16)] = rng.choice(special)
        dtype = rng.choice([torch.float32, torch.bfloat16])
        args = (
            torch.tensor(loss, device="cuda", dtype=dtype),
            torch.tensor(ex, device="cuda").to(dtype),
            torch.tensor(grad_norm, device="cuda"),
        )
        bounds = [min(bound.grad_max, NO_BOUND), min(bound.signal_max, NO_BOUND)]
        fast = sb._kernel_flag(bound, *args, bounds)
        assert fast is not None  # the kernel ran, not the fallback
        with monkeypatch.context() as m:
            m.setattr(sb, "_kernel_flag", lambda *a: None)
            slow = bound.device_flag(*args, staging)
        if ref is not None:  # the two round the excess differently: skip what sits on the bound
            excess = float((args[1].float() - torch.tensor(ref, device="cuda")).mean())
            if math.isfinite(excess) and abs(excess - bound.signal_max) < 1e-4:
                continue
        checked += 1
        assert bool(fast) == bool(slow), (bound, loss, grad_norm, ex, dtype)
    assert checked > 500
