"""``andrea-diag report RUN_DIR`` judges the run again with today's verdict code (issue 19 C).

The stored ``summary["lockin"]`` is what the code that wrote the run said; the page shows the
verdict of the current probes/verdict.py, from the run's own tables. A run recorded before the
held-out distribution columns gets ``insufficient-data`` naming the missing evidence, not a crash
and not its old sample-based verdict.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import RunConfig
from andrea_diag.record import Recorder, load_run
from andrea_diag.report.arms import Arm

LN_V = math.log(8449)


def _collapsing_run(run_dir: Path, stored: str) -> Path:
    """A run with evaluations every 6 updates that learned to 3.0, then from update 240 lost
    0.4 nats while its held-out argmax share went 0.1 -> 0.7 and entropy 3.0 -> 1.2; its stored
    summary claims ``stored`` (what an older verdict code said)."""
    cfg = RunConfig(size="tiny", clip="none", steps=300).resolve()
    rec = Recorder(run_dir, cfg.to_dict())
    for u in range(1, 301):
        loss = max(3.0, LN_V - (LN_V - 3.0) * u / 150)
        row = {"update": u, "loss": loss, "nonfinite": False}
        if u % 6 == 0:
            late = u >= 240
            row |= {"eval_loss": loss + (0.4 if late else 0.0),
                    "eval_argmax_share": 0.7 if late else 0.1,
                    "eval_entropy": 1.2 if late else loss, "eval_top1_prob": 0.3}  # fmt: skip
        rec.log(row)
    rec.close({"final_loss": 3.0, "lockin": {"verdict": stored, "collapse": False,
                                             "reasons": ["old code"]}})  # fmt: skip
    return run_dir


def test_an_old_run_without_distribution_columns_is_re_judged_insufficient_data(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    run = make_run(tmp_path / "old", clip="none", n_updates=120, lockin="locked-in")
    arm = Arm.from_run(load_run(run))
    lock = arm.summary["lockin"]
    assert lock["verdict"] == "insufficient-data" and lock["collapse"] is False
    assert any("no held-out distribution statistics" in r for r in lock["reasons"])
    assert arm.summary["lockin_recorded"]["verdict"] == "locked-in"  # kept, not shown as the call
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r.html").read_text()
    assert "insufficient-data" in page and "no arm locked in." in page
    assert json.loads((run / "summary.json").read_text())["lockin"]["verdict"] == "locked-in"


def test_a_run_whose_stored_verdict_is_stale_gets_todays_verdict(tmp_path: Path) -> None:
    run = _collapsing_run(tmp_path / "new", stored="healthy")
    lock = Arm.from_run(load_run(run)).summary["lockin"]
    assert lock["verdict"] == "locked-in" and lock["collapse"] is True and lock["rejudged"]
    assert "held-out distribution collapsed" in " ".join(lock["reasons"])
    result = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert "locked in: none." in (tmp_path / "r.html").read_text()


def test_an_unfinished_run_keeps_its_empty_summary(tmp_path: Path) -> None:
    """No summary.json: the page's 'did not finish' box reads the empty summary."""
    cfg = RunConfig(size="tiny", clip="none", steps=300).resolve()
    rec = Recorder(tmp_path / "crashed", cfg.to_dict())
    for u in range(1, 31):
        rec.log({"update": u, "loss": 9.0 - u / 10})
    rec.flush()
    assert Arm.from_run(load_run(tmp_path / "crashed")).summary == {}
