"""End to end on CPU: a short tiny cascade, its run directories, identical batches, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from pinned_sources import source_args
from typer.testing import CliRunner

from andrea_diag import metrics
from andrea_diag.cli import app
from andrea_diag.config import SOURCE_NAMES
from andrea_diag.record import load_run

pytestmark = pytest.mark.slow  # trains a tiny cascade end to end

STEPS = 40  # crosses several bandit boundaries (phases are 7..42 updates)
# lr 3e-3 so the tiny model has learned its sources by update 25: before that, rare-token
# sequences cost about what everything else costs (loss ~ ln V) and are no outlier at all.
OUTLIER_AT, NONFINITE_AT = 25, 32
OUTPUT: dict[str, str] = {}  # the fixture's console output


@pytest.fixture(scope="module")
def cascade_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cascade") / "c"
    args = ["cascade", "--size", "tiny", "--steps", str(STEPS), "--lr", "3e-3", "--out", str(out)]
    args += ["--inject", f"outlier@{OUTLIER_AT}", "--inject", f"nonfinite@{NONFINITE_AT}"]
    args += source_args()  # the same tokens on every machine (pinned_sources.py)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    OUTPUT["cascade"] = res.output
    return out


def test_batch_hashes_are_identical_across_arms(cascade_dir: Path) -> None:
    meta = json.loads((cascade_dir / "cascade.json").read_text())
    assert meta["arms"] == ["none", "global"] and meta["batch_hashes_identical"] is True
    a = json.loads((cascade_dir / "none" / "schedule.json").read_text())["batch_hashes"]
    b = json.loads((cascade_dir / "global" / "schedule.json").read_text())["batch_hashes"]
    assert len(a) == STEPS and a == b
    assert len(set(a)) == STEPS  # every update really drew a different batch


def test_arms_differ_only_in_clipping(cascade_dir: Path) -> None:
    none = json.loads((cascade_dir / "none" / "config.json").read_text())
    glob = json.loads((cascade_dir / "global" / "config.json").read_text())
    diff = {k for k in none if none[k] != glob[k]}
    assert diff == {"clip", "arm"}
    m_none = load_run(cascade_dir / "none")["metrics"]
    m_glob = load_run(cascade_dir / "global")["metrics"]
    # identical first update: same weights, same batch, clipping only acts on the gradient
    assert m_none["loss"].iloc[0] == pytest.approx(m_glob["loss"].iloc[0], rel=1e-6)
    assert (m_none["clip_coef"] == 1.0).all()
    # every finite update leaves the global clip at most 1; the injected non-finite one is left
    # out by name, not by an `or` that the injection makes always true
    finite = m_glob[m_glob["update"] != NONFINITE_AT]
    assert not finite["nonfinite"].any()
    assert (finite["grad_norm_post"] <= 1.0 + 1e-4).all()
    assert (finite["clip_coef"] < 1.0).any()  # and the clip really acted at least once


def test_metrics_have_one_row_per_update_with_named_units(cascade_dir: Path) -> None:
    df = pd.read_parquet(cascade_dir / "global" / "metrics.parquet")
    assert list(df["update"]) == list(range(1, STEPS + 1))
    # every column the loop always writes, each per-source one for every source
    expected = [
        name
        for col in metrics.owned_by(metrics.LOOP)
        if not col.optional
        for name in ([col.name_for(s) for s in SOURCE_NAMES] if col.variable else [col.name])
    ]
    assert {"update", "tokens", "clip_coef", "loss_gutenberg", "w_repo-docs"} <= set(expected)
    assert [c for c in expected if c not in df.columns] == []
    cfg = json.loads((cascade_dir / "global" / "config.json").read_text())
    m, a = cfg["micro_batch"], cfg["accum"]
    assert df["microbatches"].iloc[-1] == STEPS * a
    assert df["examples"].iloc[-1] == STEPS * m * a
    assert df["tokens"].iloc[-1] == STEPS * m * a * cfg["seq_len"]
    weights = df[["w_repo-docs", "w_gutenberg", "w_hermes3-general"]].sum(axis=1)
    assert weights.round(6).eq(1.0).all()


def test_every_recorded_column_is_declared_in_the_metrics_schema(cascade_dir: Path) -> None:
    for arm in ("none", "global"):
        df = pd.read_parquet(cascade_dir / arm / "metrics.parquet")
        assert metrics.undeclared(df.columns) == [], arm
        owners = {metrics.owner_of(c) for c in df.columns}
        assert owners == {"loop", "evaluator", "spikes", "optstate", "layers", "lockin"}, arm


def test_nonfinite_injection_is_recorded_and_the_update_skipped(cascade_dir: Path) -> None:
    df = pd.read_parquet(cascade_dir / "none" / "metrics.parquet")
    row = df[df["update"] == NONFINITE_AT].iloc[0]
    assert bool(row["nonfinite"]) and not bool(row["applied"])
    assert df.loc[df["update"] != NONFINITE_AT, "applied"].all()
    assert df["loss"].iloc[-1] == df["loss"].iloc[-1]  # training went on, not NaN


def test_report_is_written_and_marks_every_boundary(cascade_dir: Path) -> None:
    html = (cascade_dir / "report.html").read_text()
    assert "<html" in html.lower()
    assert '<script src="http' not in html and "<script src='http" not in html  # offline
    df = pd.read_parquet(cascade_dir / "none" / "metrics.parquet")
    assert int(df["boundary"].sum()) >= 1
    summary = json.loads((cascade_dir / "none" / "summary.json").read_text())
    assert summary["n_boundaries"] == int(df["boundary"].sum())


def test_report_command_re_renders_from_run_directories(cascade_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "again.html"
    res = CliRunner().invoke(
        app, ["report", str(cascade_dir / "none"), str(cascade_dir / "global"), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert out.stat().st_size > 100_000  # plotly.js is embedded, not linked


def test_injected_spikes_are_detected_and_attributed_end_to_end(cascade_dir: Path) -> None:
    for arm in ("none", "global"):
        events = load_run(cascade_dir / arm)["events"]
        causes: dict[int, set[str]] = {}
        for e in events.to_dict("records"):
            causes.setdefault(int(e["update"]), set()).update(e["causes"])
        assert "outlier" in causes.get(OUTLIER_AT, set()), (arm, causes)
        assert "numerical" in causes.get(NONFINITE_AT, set()), (arm, causes)
        assert all("outlier" not in c for u, c in causes.items() if u != OUTLIER_AT)


def test_progress_is_logged_when_the_output_is_not_a_terminal(cascade_dir: Path) -> None:
    out = OUTPUT["cascade"]
    for arm in ("none", "global"):
        assert f"{arm}: update {STEPS // 10}/{STEPS}" in out
        assert f"{arm}: update {STEPS}/{STEPS}" in out


def test_every_arm_records_the_run_sheet(cascade_dir: Path) -> None:
    for arm in ("none", "global"):
        sheet = json.loads((cascade_dir / arm / "summary.json").read_text())["run_sheet"]
        df = pd.read_parquet(cascade_dir / arm / "metrics.parquet")
        assert (sheet["m"], sheet["A"], sheet["D"]) == (8, 2, 1)
        assert sheet["supervised_tokens"] == int(df["tokens"].iloc[-1])
        assert "token-weighted" in sheet["normalisation"] and sheet["last_group"]
        assert sheet["peaks"]["process_max_rss"] > 0
