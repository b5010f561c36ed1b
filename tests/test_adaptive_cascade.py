"""All six clip arms in one tiny cascade on CPU: identical batches, arms that differ only in the
clip mode, each adaptive mode acting, and a report that compares them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from pinned_sources import source_args
from typer.testing import CliRunner

from andrea_diag.cli import app

pytestmark = pytest.mark.slow  # trains a tiny cascade end to end

ARMS = ["none", "global", "zclip", "agc", "spam", "skip"]
STEPS, OUTLIER = 36, 30
# short warm-ups and windows so every mode is past its warm-up well before the outlier, and
# SPAM resets its moments inside the run (update 20)
SHORT = ["--zclip-warmup", "5", "--skip-window", "12", "--skip-z", "3", "--spam-reset", "20",
         "--spam-warmup", "2"]  # fmt: skip


@pytest.fixture(scope="module")
def six_arms(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("adaptive") / "c"
    args = ["cascade", "--size", "tiny", "--steps", str(STEPS), "--lr", "3e-3", "--out", str(out),
            "--clip", ",".join(ARMS), "--inject", f"outlier@{OUTLIER}", "--checkpoint-every", "0",
            "--mixer-sharpness", "1",  # the seeds' mild mixer: this outlier, not a shock
            *SHORT, *source_args()]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return out


def _metrics(out: Path, arm: str) -> pd.DataFrame:
    return pd.read_parquet(out / arm / "metrics.parquet")


def test_six_arms_share_every_batch_and_differ_only_in_the_clip_mode(six_arms: Path) -> None:
    meta = json.loads((six_arms / "cascade.json").read_text())
    assert meta["arms"] == ARMS and meta["batch_hashes_identical"] is True
    configs = {a: json.loads((six_arms / a / "config.json").read_text()) for a in ARMS}
    for arm in ARMS[1:]:
        diff = {k for k in configs["none"] if configs["none"][k] != configs[arm][k]}
        assert diff == {"clip", "arm"}, (arm, diff)
    assert configs["zclip"]["clip_params"]["zclip_warmup"] == 5  # the options reached the arms


def test_each_adaptive_mode_acts_and_records_what_it_did(six_arms: Path) -> None:
    z = _metrics(six_arms, "zclip")
    assert (z.loc[z["update"] <= 5, "clip_coef"] == 1.0).all()  # warm-up: never clipped
    agc = _metrics(six_arms, "agc")
    assert (agc["clip_coef"] < 1.0).any()
    skip = _metrics(six_arms, "skip")
    assert skip["skipped"].any()  # skip-update acted (the outlier at least)...
    assert not skip.loc[skip["skipped"], "applied"].any()  # ...and a skipped update is not applied
    assert not skip["nonfinite"].any()  # a skip is the mode's choice, not a non-finite update
    assert (skip["clip_coef"] == 1.0).all()  # skip never changes the gradient
    for arm in ARMS:
        m = _metrics(six_arms, arm)
        assert (m["clip_ms"] > 0).all() and m["skipped"].dtype == bool
        summary = json.loads((six_arms / arm / "summary.json").read_text())
        assert summary["pct_skipped"] == pytest.approx(100.0 * m["skipped"].mean())


def test_the_outlier_is_clipped_or_skipped_by_the_z_score_arms(six_arms: Path) -> None:
    z = _metrics(six_arms, "zclip").set_index("update")
    s = _metrics(six_arms, "skip").set_index("update")
    none = _metrics(six_arms, "none").set_index("update")
    # the injected batch spikes the gradient norm in the unclipped arm...
    assert (
        none.loc[OUTLIER, "grad_norm"] > 2 * none.loc[OUTLIER - 5 : OUTLIER - 1, "grad_norm"].max()
    )
    # ...and the z-score arms act on it: ZClip scales it down, skip-update skips it
    assert z.loc[OUTLIER, "clip_coef"] < 1.0
    assert bool(s.loc[OUTLIER, "skipped"]) and not bool(s.loc[OUTLIER, "applied"])


def test_the_report_compares_every_clip_arm(six_arms: Path) -> None:
    html = (six_arms / "report.html").read_text()
    start = html.index("Clip arms compared")
    table = html[start : html.index("</table>", start)]
    for arm in ARMS:
        assert f"<td>{arm}</td>" in table, arm
    assert "clip arms:" in html  # the finding that names the cheapest clean arm (or none)
