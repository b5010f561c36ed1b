"""The report judges a run by the run's own thresholds, never by a restated constant."""

from __future__ import annotations

import pandas as pd
import pytest

from andrea_diag.report.arms import Arm
from andrea_diag.report.findings import boundary_loss_finding, spike_boundary_finding


def _arm(config: dict, summary: dict) -> Arm:
    updates = list(range(1, 41))
    metrics = pd.DataFrame(
        {"update": updates, "boundary": [u == 10 for u in updates], "loss": [3.0] * 40}
    )
    events = pd.DataFrame([{"update": 15, "metric": "grad_norm"}])  # 5 updates after it
    return Arm(label="a", arm="none", size="tiny", config=config, summary=summary,
               metrics=metrics, events=events, samples=pd.DataFrame())  # fmt: skip


@pytest.mark.parametrize(
    ("config", "summary"),
    [
        ({"probes": {"boundary_k": 6}}, {}),  # a run stopped before its summary
        ({}, {"spikes": {"thresholds": {"boundary_k": 6}}}),  # the spike probe's own record
        ({"boundary_k": 6}, {}),  # a run directory from before ProbeConfig
    ],
    ids=["config", "summary", "old-flat-config"],
)
def test_a_run_with_boundary_k_6_counts_a_spike_5_updates_after_a_boundary(config, summary):
    arm = _arm(config, summary)
    assert arm.boundary_k == 6
    text = spike_boundary_finding(arm)
    assert "1 grad-norm spikes, 1 within 6 updates after a phase boundary" in text
    assert "over the 6 updates after a boundary" in boundary_loss_finding(arm)


def test_the_default_window_misses_it():
    text = spike_boundary_finding(_arm({}, {}))
    assert "1 grad-norm spikes, 0 within 3 updates after a phase boundary" in text


def test_a_cascade_of_one_seed_says_a_single_seed_cannot_support_a_comparison():
    from andrea_diag.report.findings import clip_cost_findings

    def arm(clip: str, loss: float) -> Arm:
        return Arm(label=clip, arm=clip, size="tiny", config={"clip": clip, "size": "tiny",
                   "lr": 1e-3, "seed": 0}, summary={"final_loss": loss},
                   metrics=pd.DataFrame(), events=pd.DataFrame(), samples=pd.DataFrame())  # fmt: skip

    (text,) = clip_cost_findings([arm("none", 3.00), arm("global", 3.01)])
    assert "seed noise" not in text  # one seed shows no noise to be within
    assert "(under 0.050 nats) in this one seed; insufficient seeds: 1 pair at tiny" in text
