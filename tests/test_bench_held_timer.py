"""The held timer (``Timer(hold_us=...)``): a GPU spin between the flush and the start event, so
a host launch gap cannot fall inside the timed region (bench.headroom's ``(held)`` rows).

python -m pytest -q tests/test_bench_held_timer.py
"""

from __future__ import annotations

import pytest
import torch

from andrea_diag.bench.harness import Timer, spin_cycles_per_us


def test_a_hold_on_the_cpu_is_no_spin_and_times_as_before() -> None:
    timer = Timer("cpu", reps=3, warmup=0, hold_us=100.0)
    assert timer._hold == 0
    times = timer(lambda: torch.ones(8).sum())
    assert len(times) == 3 and all(t >= 0 for t in times)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_hold_on_the_gpu_spins_before_each_timed_call() -> None:
    rate = spin_cycles_per_us()
    assert rate > 0 and rate == rate  # cycles per microsecond, calibrated with events
    x = torch.ones(1 << 20, device="cuda")
    held = Timer("cuda", reps=5, warmup=1, hold_us=50.0)
    assert held._hold > 0
    times = held(lambda: x.sum())  # the spin runs before the start event (read, not asserted)
    assert len(times) == 5 and all(t > 0 for t in times)


def test_the_held_spin_runs_after_the_flush_and_before_the_start_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The order the held rows exist for, with the CUDA calls recorded (runs on the CPU)."""
    calls: list[str] = []

    class Event:
        def __init__(self, enable_timing: bool) -> None:
            assert enable_timing

        def record(self) -> None:
            calls.append("event")

        def elapsed_time(self, other: Event) -> float:
            return 1.0

    class Flush:
        def zero_(self) -> None:
            calls.append("flush")

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: calls.append(f"spin {cycles}"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    timer = Timer("cpu", reps=2, warmup=0)
    timer.cuda, timer._hold, timer._flush = True, 7, Flush()  # as a held timer on a GPU
    assert timer(lambda: calls.append("call")) == [1.0, 1.0]
    assert calls == ["flush", "spin 7", "event", "call", "event"] * 2
