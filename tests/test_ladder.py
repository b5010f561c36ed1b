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


FLAT = {"gaps": [0.05, -0.04, 0.01, -0.02, 0.03, -0.01]}  # straddles 0: no harm
HARMED = {"gaps": [0.30, 0.25, 0.40, 0.35, 0.28, 0.31]}  # all six above 0: p = 2/64
MIXED = {"gaps": [0.40, -0.10, 0.30, -0.05, 0.02, -0.03]}  # big on some seeds: p large
COLLAPSING = {**FLAT, "collapse_none": [True] * 6}  # 6/6 vs 0/6: Fisher p = 2/924
SOME_COLLAPSE = {**FLAT, "collapse_none": [True, True, False, False, False, False]}  # p = 0.45
FIVE = {"gaps": [0.30, 0.25, 0.40, 0.35, 0.28]}  # all positive, but p >= 2/32 whatever they are


def _only(result: list[dict]) -> dict:
    assert len(result) == 1
    return result[0]


def test_threshold_at_rung_3_harm_and_rung_4_collapse_with_procedure_n_and_p() -> None:
    table = records({"12m": FLAT, "30m": MIXED, "60m": HARMED, "120m": {**HARMED, **COLLAPSING,
                                                                          "gaps": HARMED["gaps"]}})  # fmt: skip
    t = _only(thresholds(table, SIZES, steps=1500))
    assert (t["harm"], t["collapse"]) == ("60m", "120m")
    assert t["harm_text"].startswith("harm threshold (global): 60m at lr 0.0003, max_norm 1 "
                                     "(fixed-sequence test from the largest rung down")  # fmt: skip
    # the planted 60m gaps: mean 0.315, all six positive -> exact sign-flip p = 2/64
    assert "at 60m: gap +0.315 nats, n = 6" in t["harm_text"]
    assert "sign-flip p = 0.031" in t["harm_text"] and "95% t [+0.259, +0.371]" in t["harm_text"]
    assert "the sequence stops at 30m" in t["harm_text"]
    assert "at 120m: unclipped 6/6 vs global 0/6 collapsed, Fisher p = 0.0022" in t["collapse_text"]
    assert t["claim_text"].startswith('the seeds\' claim "12M survives, 120M collapses without '
                                      'clipping", read as 12m against 120m (global): consistent')  # fmt: skip
    assert t["rungs"]["60m"]["p_value"] == pytest.approx(2 / 64) and not t["insufficient"]


def test_fixed_sequence_from_the_largest_rung_stops_where_the_largest_shows_nothing() -> None:
    # 30m alone has p = 2/64, but 120m is tested first and shows nothing: no threshold, and
    # Holm across 4 rungs (4 * 2/64 = 0.125) does not single 30m out either
    table = records({"12m": FLAT, "30m": HARMED, "60m": FLAT, "120m": MIXED})
    t = _only(thresholds(table, SIZES))
    assert t["harm"] is None and "on its own" not in t["harm_text"]
    assert t["rungs"]["30m"]["p_holm_helps"] == pytest.approx(4 * 2 / 64)


def test_no_threshold_says_none_with_the_smallest_detectable_gap() -> None:
    table = records({"12m": FLAT, "30m": MIXED, "60m": SOME_COLLAPSE, "120m": MIXED})
    t = _only(thresholds(table, SIZES, steps=1500))
    assert (t["harm"], t["collapse"]) == (None, None)
    want = "none in 12m–120m at lr 0.0003, max_norm 1 and 1,500 updates"
    assert t["harm_text"].startswith(f"harm threshold (global): {want}, with the smallest "
                                     "detectable gap ")  # fmt: skip
    assert "nats at 120m (80% power, t-based; there n = 6" in t["harm_text"]
    assert "a gap of 0.02 nats would need" in t["harm_text"]
    assert t["collapse_text"].startswith(f"collapse threshold (global): {want} (at 120m: ")
    assert "6 seeds per arm tell at best 5/6 from 0/6" in t["collapse_text"]
    assert "not seen at these settings" in t["claim_text"]


def test_five_seeds_say_insufficient_seeds_whatever_the_gaps() -> None:
    table = records({"12m": FIVE, "120m": {**FIVE, "collapse_none": [True] * 5}})
    t = _only(thresholds(table, ["12m", "120m"]))
    assert (t["harm"], t["collapse"]) == (None, None) and t["insufficient"]
    want = "insufficient seeds: 5 pairs at 12m, 120m (a threshold needs ≥ 6)"
    assert t["harm_text"] == f"harm threshold (global): {want}"
    assert t["collapse_text"] == f"collapse threshold (global): {want}"
    assert "not checked, insufficient seeds" in t["claim_text"]


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
    assert paired_gaps(table).iloc[0]["pairs"] == 5


@pytest.fixture(scope="module")
def tiny_ladder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("ladder") / "l"
    args = ["ladder", "--size", "tiny2,tiny", "--seed", "0,1", "--steps", "3",
            "--checkpoint-every", "0", "--out", str(out)]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return out, res.output


@pytest.mark.slow
def test_tiny_ladder_runs_end_to_end_and_states_both_thresholds(tiny_ladder) -> None:
    out, output = tiny_ladder
    table = pd.read_csv(out / "sweep.csv")
    assert len(table) == 2 * 2 * 2  # rungs x seeds x arms
    assert table["final_eval_loss"].notna().all() and table["final_v_share"].notna().all()
    result = json.loads((out / "ladder.json").read_text())
    assert result["rungs"] == ["tiny", "tiny2"]  # ordered by parameter count
    (t,) = result["thresholds"]
    assert t["seeds"] == 2
    # two seeds: never a threshold (issue 19: "12m at lr 0.0003" was printed from 2 gaps)
    short = "insufficient seeds: 2 pairs at tiny, tiny2 (a threshold needs ≥ 6)"
    assert t["harm_text"] == f"harm threshold (global): {short}" and t["harm"] is None
    assert f"collapse threshold (global): {short}" in output
    rows = pd.read_csv(out / "ladder.csv")
    assert set(rows["size"]) == {"tiny", "tiny2"} and set(rows["clip"]) == {"none", "global"}
    assert {"collapse_lo", "event_hi", "gap_lo", "harm_per_event"} <= set(rows.columns)


@pytest.mark.slow
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


@pytest.mark.slow
def test_report_on_a_ladder_states_its_thresholds_again_by_the_current_statistics(
    tiny_ladder,
) -> None:
    out, _ = tiny_ladder
    path = out / "ladder.json"
    stale = json.loads(path.read_text())
    stale["thresholds"][0]["harm_text"] = "harm threshold (global): tiny at lr 0.0003 (2 gaps)"
    path.write_text(json.dumps(stale))
    res = CliRunner().invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    again = json.loads(path.read_text())["thresholds"][0]["harm_text"]
    assert again.startswith("harm threshold (global): insufficient seeds: 2 pairs")
    page = (out / "ladder.html").read_text()
    assert "(2 gaps)" not in page and "insufficient seeds: 2 pairs at tiny, tiny2" in page


def test_ladder_page_states_the_threshold_with_its_procedure_p_and_interval(tmp_path: Path) -> None:
    from andrea_diag.experiments.ladder import write_ladder
    from andrea_diag.report.ladder_page import render_ladder

    share = [0.9, 0.1, 0.8, 0.0, 0.7, 0.2]
    table = records({"12m": FLAT, "120m": {**HARMED, "share_none": share}})
    meta = {"steps": 1500, "recipe": "v1", "lrs": [3e-4], "seeds": list(range(6)),
            "command": "andrea-diag ladder <x>", "plotly": "inline"}  # fmt: skip
    result, rows = write_ladder(tmp_path, table, ["12m", "120m"], meta)
    page = render_ladder(tmp_path, rows, result).read_text()
    assert "harm threshold (global): 120m at lr 0.0003, max_norm 1 (fixed-sequence" in page
    assert "sign-flip p = 0.031" in page and "collapse threshold (global): none in 12m–120m" in page
    assert "What this says about the seeds' claim" in page and "method: " in page
    assert "andrea-diag ladder &lt;x&gt;" in page  # escaped after formatting
    assert "<script type='text/javascript'>" in page  # inline: the page opens alone
    # 120m none: 3 of 6 seeds kept v polluted -> Wilson [0.19, 0.81]; harm over those 3 seeds
    assert "0.50 [0.19, 0.81]" in page and "(3)" in page
    csv = pd.read_csv(tmp_path / "ladder.csv")
    assert {"p_value", "p_holm", "gap_t_lo", "sd", "detectable_gap", "collapse_p"} <= set(csv)
    # the event rates get Fisher's test too: 3/6 unclipped against 0/6 clipped at 120m
    at = csv[(csv["size"] == "120m") & (csv["clip"] == "global")].iloc[0]
    assert at["event_p"] == pytest.approx(0.181818, abs=1e-6)


def _finished_ladder(out: Path, gaps: list[float], sizes=("tiny", "tiny2")) -> None:
    """Cells as a finished ``ladder --steps 3`` leaves them (summaries, no training): the
    unclipped arm's held-out loss is the clipped one's plus the planted gap. Their data.json
    names the default sources' bytes, as a sweep checks before it keeps a cell."""
    from andrea_diag.data.corpus import build_sources

    data = {"sources": {n: {"sha256": s.sha256} for n, s in build_sources(seed=0).items()}}
    for size in sizes:
        for seed, gap in enumerate(gaps):
            cell = out / f"{size}-lr0.0003-mn1-s{seed}"
            for arm, loss in (("none", 5.0 + gap), ("global", 5.0)):
                (cell / arm).mkdir(parents=True)
                (cell / arm / "summary.json").write_text(json.dumps(
                    {"status": "done", "final_loss": loss, "min_loss": loss, "final_eval_loss":
                     loss, "lockin": {"verdict": "healthy"}, "pollution": {"final_v_share": 0.0}}
                ))  # fmt: skip
                (cell / arm / "data.json").write_text(json.dumps(data))
            (cell / "cascade.json").write_text(
                json.dumps(
                    {"status": "done", "arms": ["none", "global"], "steps": 3, "recipe": "v1"}
                )
            )


@pytest.mark.parametrize("n_seeds", [5, 6])
def test_ladder_console_from_finished_cells_states_a_threshold_only_from_6_seeds(
    tmp_path: Path, n_seeds: int
) -> None:
    out = tmp_path / "l"
    _finished_ladder(out, [0.30, 0.25, 0.40, 0.35, 0.28, 0.31][:n_seeds])
    seeds = ",".join(map(str, range(n_seeds)))
    res = CliRunner().invoke(app, ["ladder", "--size", "tiny,tiny2", "--seed", seeds,
                                   "--steps", "3", "--out", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output  # too few seeds is a statement, not an error
    assert "already done, kept" in res.output  # nothing trained
    text = " ".join(res.output.split())  # the console wraps long lines
    if n_seeds == 5:
        assert "harm threshold (global): insufficient seeds: 5 pairs at tiny, tiny2 (a " in text
    else:
        assert "harm threshold (global): tiny at lr 0.0003, max_norm 1 (fixed-sequence" in text
        assert "sign-flip p = 0.031" in text
    assert 'the seeds\' claim "12M survives, 120M collapses without clipping"' in text
    assert "sign-flip p" in (out / "ladder.html").read_text()


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
