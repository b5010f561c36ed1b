"""An arm no spike reached is not "not recovered": the report said of the README's own tiny
cascade (no spike flagged in either arm) "m pollution peaked at a share of 0 and did not
recover within the run" and "not recovered / not recovered". Now: "no spike" in the tables
and one finding that says so; an optimizer without Adam moments stays "not measured"."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from andrea_diag.report.arm_comparison import comparison_rows
from andrea_diag.report.arms import Arm, summary_row
from andrea_diag.report.findings import pollution_finding

NO_SPIKE = {"has_moments": True, "n_spikes_tracked": 0, "max_m_share": 0.0, "max_v_share": 0.0,
            "recovery_m": None, "recovery_v": None}  # fmt: skip


def _arm(pollution: dict[str, Any]) -> Arm:
    metrics = pd.DataFrame({"update": [1, 2], "loss": [3.0, 2.9]})
    return Arm("none", "none", "tiny", {"clip": "none"}, {"pollution": pollution}, metrics,
               pd.DataFrame(), pd.DataFrame())  # fmt: skip


def test_an_arm_without_spikes_is_said_to_have_none_not_to_be_unrecovered() -> None:
    arm = _arm(NO_SPIKE)
    assert summary_row(arm)["recovery m / v (updates)"] == "no spike / no spike"
    assert comparison_rows([arm])[1][0][-3] == "no spike"
    finding = pollution_finding(arm)
    assert "no spike reached m and v" in finding and "did not recover" not in finding


@pytest.mark.parametrize(("tracked", "rec", "want"), [(2, None, "not recovered"), (2, 7, "7")])
def test_a_tracked_spike_keeps_its_recovery_or_not_recovered(
    tracked: int, rec: int | None, want: str
) -> None:
    arm = _arm({**NO_SPIKE, "n_spikes_tracked": tracked, "recovery_m": rec, "recovery_v": rec})
    assert summary_row(arm)["recovery m / v (updates)"] == f"{want} / {want}"


def test_an_optimizer_without_moments_is_not_measured() -> None:
    arm = _arm({**NO_SPIKE, "has_moments": False, "max_m_share": None, "max_v_share": None})
    assert summary_row(arm)["recovery m / v (updates)"] == "not measured / not measured"
    assert "no Adam moments" in pollution_finding(arm)


def test_an_m_share_past_1_is_explained_where_it_is_said() -> None:
    # the README's own cascade: m's spikes' part 1.47x m itself (m's terms cancel; v's cannot)
    arm = _arm({**NO_SPIKE, "n_spikes_tracked": 4, "max_m_share": 1.47, "recovery_m": 51})
    finding = pollution_finding(arm)
    assert (
        "m pollution peaked at a share of 1.47 (past 1: the rest of m partly cancelled" in finding
    )
    assert "past 1" not in pollution_finding(_arm({**NO_SPIKE, "n_spikes_tracked": 4,
                                                   "max_m_share": 0.9}))  # fmt: skip
