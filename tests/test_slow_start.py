"""A run known to be slow on CPU (12m and larger, bf16) says so at the start, then gives an
estimate from its own first updates' wall time ("about N min for M updates")."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from andrea_diag.config import RunConfig
from andrea_diag.experiments.cascade import CascadeSpec, run_cascade
from andrea_diag.experiments.slow_start import ETA_AFTER, SlowStart, slow_reasons

ETA = re.compile(
    r"estimate: \d+\.\d\d s per update over updates 1-3: about \d+ min for \d+ updates"
)


def test_a_12m_or_larger_model_on_cpu_is_slow_and_tiny_fp32_is_not():
    assert "a 12m model (17.5M parameters) on CPU" in slow_reasons(
        RunConfig(size="12m", device="cpu")
    )
    assert slow_reasons(RunConfig(size="120m", device="cpu"))
    assert slow_reasons(RunConfig(size="tiny", device="cpu")) == []
    assert "bf16" in slow_reasons(RunConfig(size="tiny", device="cpu", precision="bf16"))[0]


def test_the_estimate_counts_the_updates_left_in_every_arm():
    buf = io.StringIO()
    eta = SlowStart.check([RunConfig(size="12m", device="cpu")] * 2, Console(file=buf, width=300))
    assert eta is not None and "slow run: a 12m model" in buf.getvalue()
    for u in range(1, ETA_AFTER + 2):
        eta.observe(u, {"time_s": 2.0}, updates_left=2 * 240 - u)
    [line] = [ln for ln in buf.getvalue().splitlines() if ln.startswith("estimate:")]
    assert line == "estimate: 2.00 s per update over updates 1-3: about 16 min for 477 updates"


@pytest.mark.slow  # a real (tiny) training run
def test_a_bf16_cascade_on_cpu_prints_the_warning_and_the_estimate(tmp_path):
    buf = io.StringIO()
    cfg = RunConfig(size="tiny", steps=4, device="cpu", precision="bf16")
    run_cascade(CascadeSpec(base=cfg, clips=["none"], out=tmp_path / "c"),
                Console(file=buf, width=300))  # fmt: skip
    lines = buf.getvalue().splitlines()
    assert [ln for ln in lines if ln.startswith("slow run: bf16 on CPU")]
    assert len([ln for ln in lines if ETA.fullmatch(ln.strip())]) == 1, lines
