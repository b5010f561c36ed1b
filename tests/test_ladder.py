"""The capacity ladder: threshold logic on labelled per-seed records, and a tiny end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.errors import UserError
from andrea_diag.experiments.aggregate import arm_rates, paired_gaps
from andrea_diag.experiments.ladder import rungs, thresholds

SIZES = ["12m", "30m", "60m", "120m"]


def records(spec: dict[str, dict[str, list]]) -> pd.DataFrame:
    """Per-seed arm rows like sweep.csv. ``spec[size]``: ``gaps`` (unclipped minus clipped
    held-out loss, one per seed), ``collapse_none`` / ``collapse_global`` (bool per seed),
    ``share_none`` (final share of ‖v‖ in the unclipped arm, per seed)."""
    rows = []
    for size, s in spec.items():
        for seed, gap in enumerate(s["gaps"]):
            for clip in ("none", "global"):
                collapsed = s.get(f"collapse_{clip}", [False] * len(s["gaps"]))[seed]
                share = s.get("share_none", [0.0] * len(s["gaps"]))[seed] if clip == "none" else 0.0
                rows.append({"cell": f"{size}-s{seed}", "size": size, "lr": 3e-4, "max_norm": 1.0,
                             "seed": seed, "precision": "fp32", "clip": clip,
                             "final_eval_loss": 5.0 + (gap if clip == "none" else 0.0),
                             "final_v_share": share, "collapse": collapsed,
                             "lockin": "diverged" if collapsed else "healthy",
                             "status": "done"})  # fmt: skip
    return pd.DataFrame(rows)


FLAT = {"gaps": [0.05, -0.04, 0.01, -0.02, 0.03]}  # straddles 0: no harm
HARMED = {"gaps": [0.30, 0.25, 0.40, 0.35, 0.28]}  # all five above 0: interval above 0
MIXED = {"gaps": [0.40, -0.10, 0.30, -0.05, 0.02]}  # big on some seeds: still straddles 0
COLLAPSING = {**FLAT, "collapse_none": [True] * 5}  # 5/5 vs 0/5: Wilson [0.57,1] vs [0,0.43]
SOME_COLLAPSE = {**FLAT, "collapse_none": [True, True, False, False, False]}  # overlaps 0/5


def _only(result: list[dict]) -> dict:
    assert len(result) == 1
    return result[0]


def test_threshold_at_rung_3_harm_and_rung_4_collapse() -> None:
    table = records({"12m": FLAT, "30m": MIXED, "60m": HARMED, "120m": {**HARMED, **COLLAPSING,
                                                                          "gaps": HARMED["gaps"]}})  # fmt: skip
    t = _only(thresholds(table, SIZES, steps=1500))
    assert (t["harm"], t["collapse"]) == ("60m", "120m")
    assert t["harm_text"] == "harm threshold (global): 60m at lr 0.0003, max_norm 1"


def test_threshold_is_the_smallest_qualifying_rung_even_when_a_larger_one_does_not() -> None:
    table = records({"12m": FLAT, "30m": HARMED, "60m": FLAT, "120m": MIXED})
    assert _only(thresholds(table, SIZES))["harm"] == "30m"


def test_no_threshold_says_none_in_the_ladder_at_these_lrs_and_steps() -> None:
    table = records({"12m": FLAT, "30m": MIXED, "60m": SOME_COLLAPSE, "120m": MIXED})
    t = _only(thresholds(table, SIZES, steps=1500))
    assert (t["harm"], t["collapse"]) == (None, None)
    want = "none in 12m–120m at lr 0.0003, max_norm 1 and 1,500 updates"
    assert t["harm_text"] == f"harm threshold (global): {want}"
    assert t["collapse_text"] == f"collapse threshold (global): {want}"


def test_rungs_are_ordered_by_parameter_count_whatever_the_order_given() -> None:
    table = records({"120m": HARMED, "12m": FLAT})
    assert rungs(["120m", "30m", "12m"]) == ["12m", "30m", "120m"]
    assert _only(thresholds(table, ["120m", "12m"]))["harm"] == "120m"
    with pytest.raises(UserError):
        rungs(["12m"])


def test_harm_per_event_pools_only_seeds_whose_unclipped_arm_kept_v_polluted() -> None:
    spec = {"gaps": [0.40, 0.30, -0.05, 0.00], "share_none": [0.99, 0.83, 0.02, 0.51]}
    gaps = paired_gaps(records({"120m": spec})).iloc[0]
    assert gaps["event_pairs"] == 3  # 0.99, 0.83, 0.51 >= 0.5
    assert gaps["harm_per_event"] == pytest.approx((0.40 + 0.30 + 0.00) / 3)
    arms = arm_rates(records({"120m": spec})).set_index("clip")
    assert arms.loc["none", "event_rate"] == pytest.approx(0.75)
    assert arms.loc["global", "event_rate"] == 0.0


def test_crashed_arm_drops_its_pair() -> None:
    table = records({"12m": HARMED})
    table.loc[(table["seed"] == 0) & (table["clip"] == "global"), "status"] = "crashed"
    assert paired_gaps(table).iloc[0]["pairs"] == 4


@pytest.fixture(scope="module")
def tiny_ladder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("ladder") / "l"
    args = ["ladder", "--size", "tiny2,tiny", "--seed", "0,1", "--steps", "3",
            "--checkpoint-every", "0", "--out", str(out)]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return out, res.output


def test_tiny_ladder_runs_end_to_end_and_states_both_thresholds(tiny_ladder) -> None:
    out, output = tiny_ladder
    table = pd.read_csv(out / "sweep.csv")
    assert len(table) == 2 * 2 * 2  # rungs x seeds x arms
    assert table["final_eval_loss"].notna().all() and table["final_v_share"].notna().all()
    result = json.loads((out / "ladder.json").read_text())
    assert result["rungs"] == ["tiny", "tiny2"]  # ordered by parameter count
    (t,) = result["thresholds"]
    assert t["seeds"] == 2
    # two seeds of three updates: a statement either way, never a missing one
    assert t["harm_text"].startswith("harm threshold (global): ")
    assert "collapse threshold (global): " in output
    rows = pd.read_csv(out / "ladder.csv")
    assert set(rows["size"]) == {"tiny", "tiny2"} and set(rows["clip"]) == {"none", "global"}
    assert {"collapse_lo", "event_hi", "gap_lo", "harm_per_event"} <= set(rows.columns)


def test_tiny_ladder_pages_share_one_plotly_copy(tiny_ladder) -> None:
    out, _ = tiny_ladder
    bundle = out / "plotly.min.js"
    assert bundle.is_file() and bundle.stat().st_size > 1_000_000
    page = (out / "ladder.html").read_text()
    assert "src='plotly.min.js'" in page and "Thresholds" in page and "fig-ladder" in page
    cell = (out / "tiny-lr0.0003-mn1-s0" / "report.html").read_text()
    assert "src='../plotly.min.js'" in cell
    for p in [out / "ladder.html", out / "sweep.html", out / "tiny-lr0.0003-mn1-s0/report.html"]:
        assert p.stat().st_size < 1_000_000  # no inlined 4.9 MB bundle


def test_ladder_page_renders_from_records_with_intervals(tmp_path: Path) -> None:
    from andrea_diag.experiments.ladder import write_ladder
    from andrea_diag.report.ladder_page import render_ladder

    table = records({"12m": FLAT, "120m": {**HARMED, "share_none": [0.9, 0.1, 0.8, 0.0, 0.7]}})
    meta = {"steps": 1500, "recipe": "v1", "lrs": [3e-4], "seeds": [0, 1, 2, 3, 4],
            "command": "andrea-diag ladder", "plotly": "inline"}  # fmt: skip
    result = write_ladder(tmp_path, table, ["12m", "120m"], meta)
    page = render_ladder(tmp_path, table, result).read_text()
    assert "harm threshold (global): 120m at lr 0.0003, max_norm 1" in page
    assert "collapse threshold (global): none in 12m–120m" in page
    assert "<script type='text/javascript'>" in page  # inline: the page opens alone
    # 120m none: 3 of 5 seeds kept v polluted -> Wilson [0.23, 0.88]; harm over those 3 seeds
    assert "0.60 [0.23, 0.88]" in page and "(3)" in page


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--size", "12m"], "at least two sizes"),
        (["--size", "12m,13m"], "unknown size '13m'"),
        (["--clip", "global"], "compares arm none with at least one clipped arm"),
        (["--precision", "fp8"], "unknown precision 'fp8'"),
    ],
)
def test_ladder_refuses_bad_options_with_one_line(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["ladder", *args])
    assert res.exit_code != 0 and message in res.output and "Traceback" not in res.output
