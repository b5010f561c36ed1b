"""Findings for runs of a user's own loop, and the rules findings share with training.

- A ``SpikeMonitor`` run (no bandit) gets no findings about phases, phase boundaries or data
  sources, and a run whose updates were clipped is never "the unclipped arm" (issue 24 item 3).
- ``boundary_loss_delta`` and collapse have one owner each (``train/summary.py``,
  ``probes/verdict.py``); per-source losses are the run's own sources, never ``loss_scale`` or
  ``loss_excess`` (issue 23 items 1 and 4).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.monitor import SpikeMonitor
from andrea_diag.probes.verdict import recorded_collapse_reason
from andrea_diag.record import load_run
from andrea_diag.report import findings as F
from andrea_diag.report.arms import Arm
from andrea_diag.train.summary import boundary_loss_delta as summary_delta

BANDIT_WORDS = ("phase boundar", "data sources", "a boundary", "generated (synthetic)")


def _monitor_run(run_dir: Path, max_norm: float | None, steps: int = 30) -> Arm:
    """A plain loop on a small regression MLP; torch clipping at ``max_norm`` (None: none)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(0)
    with SpikeMonitor(model, opt, run_dir, total_steps=steps, shadow=False, lockin=False) as mon:
        for _ in range(steps):
            x = torch.randn(16, 4, generator=gen)
            loss = (model(x).squeeze(1) - 3 * x[:, 0]).square().mean()
            loss.backward()
            mon.after_backward(loss)
            clip = (
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) if max_norm else None
            )
            mon.after_clip(clip)
            opt.step()
            mon.after_step()
            opt.zero_grad()
    return Arm.from_run(load_run(run_dir))


def test_a_clipped_monitor_run_has_no_bandit_findings_and_is_not_the_unclipped_arm(tmp_path):
    arm = _monitor_run(tmp_path / "clipped", max_norm=0.05)  # most updates are clipped
    assert (arm.metrics["clip_coef"] < 1).mean() > 0.5
    assert not F.has_bandit(arm) and F.is_clipped(arm) and not arm.clipped  # no clip mode
    lines = F.all_findings([arm])
    text = "\n".join(lines).lower()
    assert not any(w in text for w in BANDIT_WORDS), lines
    assert "unclipped arm" not in text
    assert any(line.startswith("monitor:") and "spike" in line for line in lines)  # still there

    page = tmp_path / "clipped" / "report.html"
    res = CliRunner().invoke(app, ["report", str(tmp_path / "clipped"), "--out", str(page)])
    assert res.exit_code == 0, res.output
    # the page's text (the charts' scripts are the figures' business, not the findings')
    text = re.sub(r"<script.*?</script>", "", page.read_text(), flags=re.S).lower()
    assert "the unclipped arm" not in text and "phase boundar" not in text
    assert "data sources: unknown" not in text and "monitor: " in text  # the finding's words
    assert "no data.json" not in text and "your own training loop" in text  # data section
    assert "phase boundaries" not in page.read_text()  # nor in the charts' titles


def test_an_unclipped_monitor_run_is_the_unclipped_arm(tmp_path):
    arm = _monitor_run(tmp_path / "plain", max_norm=None, steps=30)
    assert not F.is_clipped(arm)
    assert any("the unclipped arm monitor" in line for line in F.all_findings([arm]))


def test_a_framework_run_with_a_clip_setting_counts_as_clipped():
    """Lightning's gradient_clip_val or HF's max_grad_norm recorded, no clip mode, no coef."""
    metrics = pd.DataFrame({"update": [1, 2], "loss": [2.0, 1.9]})
    for settings, clipped in (
        ({"gradient_clip_val": 0.5}, True),
        ({"max_grad_norm": 1.0}, True),
        ({"max_grad_norm": 0.0, "gradient_clip_val": None}, False),
    ):
        cfg = {"kind": "monitor", "framework": "lightning", "framework_settings": settings}
        arm = Arm("pl", "monitor", "?", cfg, {}, metrics, pd.DataFrame(), pd.DataFrame())
        assert F.is_clipped(arm) is clipped, settings


def test_the_toolkit_arm_is_judged_by_its_clip_mode_alone():
    """The bandit's unclipped arm stays unclipped whatever its clip_coef column reads."""
    metrics = pd.DataFrame({"update": [1, 2], "loss": [2.0, 1.9], "clip_coef": [0.5, 1.0]})
    arm = Arm("none", "none", "tiny", {"clip": "none"}, {}, metrics, pd.DataFrame(),
              pd.DataFrame())  # fmt: skip
    assert F.has_bandit(arm) and not F.is_clipped(arm)


def _bandit_table(n: int = 40) -> pd.DataFrame:
    loss = [3.0 - 0.01 * i for i in range(n)]
    for i in range(20, 26):
        loss[i] += 0.5  # the phase at update 21 is harder
    boundary = [u in (11, 21, 31) for u in range(1, n + 1)]
    return pd.DataFrame({"update": range(1, n + 1), "loss": loss, "boundary": boundary})


def test_findings_boundary_loss_delta_is_the_training_summarys_rule():
    m = _bandit_table()
    m.loc[m["update"] == 14, "loss"] = math.inf  # a skipped non-finite update: its window goes
    m = m[m["update"] != 27]  # a row missing (a torn write): the summary counts rows, not ids
    for k in (2, 3, 5):
        want = summary_delta(m["loss"].tolist(), m["boundary"].tolist(), k=k)
        delta, n = F.boundary_loss_delta(m, k=k)
        assert n == want["n"], k
        assert delta == pytest.approx(want["after_minus_before_mean"]), k


def test_collapse_has_one_owner_the_verdict_module():
    n = 120
    m = pd.DataFrame({"update": range(1, n + 1), "loss": [2.0] * 60 + [4.0] * 60})
    cases = [
        ({}, {"final_loss": 4.0}),  # no verdict: the fallback on the smoothed loss
        ({"verdict": "healthy", "collapse": False}, {"final_loss": 4.0}),
        ({"verdict": "diverged", "collapse": True}, {"final_loss": 4.0}),
        ({"verdict": "insufficient-data", "collapse": False}, {"final_loss": math.inf}),
        ({"verdict": "locked-in"}, {"final_loss": 2.0}),
    ]
    for lock, summary in cases:
        arm = Arm("a", "none", "tiny", {"clip": "none"}, {**summary, "lockin": lock}, m,
                  pd.DataFrame(), pd.DataFrame())  # fmt: skip
        want = recorded_collapse_reason(lock, summary["final_loss"], {"loss": m["loss"].tolist()})
        assert F.collapse_reason(arm) == want, lock
    assert "nats above" in (recorded_collapse_reason({}, 4.0, {"loss": m["loss"].tolist()}) or "")


def test_an_fp16_table_with_loss_scale_gives_no_per_source_finding_about_scale():
    """No w_ columns, no data.json: the sources are the run's config; loss_scale (256 rising to
    16384) and loss_excess are not sources, so a steady run is not collapsed and no finding
    names 'scale'; a source that rose is named."""
    n = 120
    metrics = pd.DataFrame({
        "update": range(1, n + 1), "loss": [2.0] * n, "loss_web": [2.0] * n,
        "loss_code": [2.5] * n, "loss_scale": [256.0] * 60 + [16384.0] * 60,
        "loss_excess": [0.0] * 60 + [5.0] * 60, "nonfinite": False,
    })  # fmt: skip
    cfg = {"clip": "none", "precision": "fp16", "sources": {"web": "/d/web", "code": "/d/code"}}
    arm = Arm("fp16", "none", "tiny", cfg, {"final_loss": 2.0}, metrics, pd.DataFrame(),
              pd.DataFrame())  # fmt: skip
    assert F.source_loss_columns(arm) == ["loss_web", "loss_code"]
    assert F.collapse_reason(arm) is None
    assert not any("scale" in line or "excess" in line for line in F.expectation_findings([arm]))
    arm.metrics["loss_web"] = [2.0] * 60 + [6.0] * 60
    why = F.collapse_reason(arm) or ""
    assert "(web, code)" in why and "scale" not in why


def test_a_monitor_run_assumes_no_default_sources():
    metrics = pd.DataFrame({"update": [1, 2], "loss": [2.0, 1.9], "loss_gutenberg": [1.0, 1.0],
                            "loss_scale": [1.0, 2.0]})  # fmt: skip
    arm = Arm("m", "monitor", "?", {"kind": "monitor"}, {}, metrics, pd.DataFrame(),
              pd.DataFrame())  # fmt: skip
    assert F.source_loss_columns(arm) == []
