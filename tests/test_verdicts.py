"""The verdict taxonomy on labelled trajectories: every verdict, its precedence, collapse per arm.

Small synthetic lists, no training: a training-loss trajectory (with batch noise and, where the
fixture says so, a hard bandit phase), optional held-out evaluations, and greedy sample rows as
the lock-in probe writes them (three sources per sample event).
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from andrea_diag.config import RunConfig
from andrea_diag.experiments.arm_summary import arm_row as _arm_row
from andrea_diag.probes.verdict import (
    COLLAPSE_VERDICTS,
    THRESHOLDS,
    VERDICTS,
    run_verdict,
)
from andrea_diag.report.arms import Arm
from andrea_diag.report.findings import collapse_reason, expectation_findings
from andrea_diag.report.sweep_page import findings as sweep_findings

V = 8449
LN_V = math.log(V)  # 9.04: the uniform loss
SOURCES = ("repo-docs", "gutenberg", "hermes3-general")


def _curve(n: int, floor: float, *, noise: float = 0.3, seed: int = 0) -> list[float]:
    """ln V down to ``floor`` over the first quarter, then flat; +-``noise`` batch to batch."""
    rng = random.Random(seed)
    quarter = n // 4
    return [
        LN_V - (LN_V - floor) * min(1.0, u / quarter) + rng.uniform(-noise, noise)
        for u in range(1, n + 1)
    ]


def _samples(events: dict[int, tuple[float, float]]) -> list[dict[str, Any]]:
    """Greedy rows (share, distinct-1) for every source at each update, plus temperature-1 rows
    that are always repetitive: the verdict must read the greedy ones only."""
    rows = []
    for u, (share, d1) in events.items():
        for src in SOURCES:
            rows.append({"update": u, "source": src, "mode": "greedy",
                         "top_token_share": share, "distinct_1": d1})  # fmt: skip
            rows.append({"update": u, "source": src, "mode": "temp1",
                         "top_token_share": 1.0, "distinct_1": 0.03})  # fmt: skip
    return rows


DIVERSE = (0.09, 0.7)  # what healthy greedy text measured in the gpu sweep (median of sources)
REPETITIVE = (0.9, 0.06)  # " the the the ..." / "\n\n\n..."
LOOP = (0.25, 0.125)  # a 4-token loop: a low top-token share, but 4 distinct tokens in 32


def _every(n: int, step: int, score: tuple[float, float]) -> dict[int, tuple[float, float]]:
    return {u: score for u in range(step, n + 1, step)}


def _diverged_12m(n: int = 600, seed: int = 1) -> list[float]:
    """12m at lr 1e-2 unclipped: reached 3.90 by update 300, then rose to 5.27 and stayed."""
    rng = random.Random(seed)
    out = []
    for u in range(1, n + 1):
        if u <= 300:
            base = LN_V - (LN_V - 3.90) * u / 300
        else:
            base = 3.90 + (5.27 - 3.90) * min(1.0, (u - 300) / 150)
        out.append(base + rng.uniform(-0.1, 0.1))
    return out


def _hard_phase_at_the_end(n: int = 300) -> list[float]:
    """Healthy, but the last 21 updates are a phase of the hardest source: +1.3 nats."""
    losses = _curve(n, 2.0, noise=0.5)
    return [v + (1.3 if u > n - 21 else 0.0) for u, v in enumerate(losses, start=1)]


def _evals(
    n: int, every: int, loss: Any, share: Any = lambda u: 0.1, entropy: Any = None
) -> dict[str, Any]:
    """Held-out evaluations every ``every`` updates: loss(u), argmax share(u), entropy(u)
    (default: the loss itself, a calibrated model's entropy), as run_verdict keywords."""
    ups = list(range(every, n + 1, every))
    ent = entropy or loss
    return {"eval_updates": ups, "eval_losses": [loss(u) for u in ups],
            "eval_dist": {"eval_argmax_share": [share(u) for u in ups],
                          "eval_entropy": [ent(u) for u in ups],
                          "eval_top1_prob": [0.3] * len(ups)}}  # fmt: skip


def _learned_then_flat(u: int) -> float:
    """Held-out loss: ln V down to 3.0 by update 150, then flat (a finished, healthy run)."""
    return max(3.0, LN_V - (LN_V - 3.0) * u / 150)


def _learned_then_up(u: int) -> float:
    """Down to 3.0 by 150, then +0.4 from update 240: the loss a lock-in costs."""
    return _learned_then_flat(u) + (0.4 if u >= 240 else 0.0)


def _still_falling(u: int) -> float:
    """Still going down at the last evaluation (the issue's 60m arms at 300 updates)."""
    return LN_V - (LN_V - 4.5) * (u / 300) ** 0.5


def _collapsing_share(u: int) -> float:
    return 0.1 if u < 240 else 0.7  # one token predicted at 70% of the held-out positions


def _collapsing_entropy(u: int) -> float:
    return _learned_then_flat(u) if u < 240 else 1.2  # overconfident: below the loss


# name -> (run_verdict keyword arguments, expected verdict)
FIXTURES: dict[str, tuple[dict[str, Any], str]] = {
    "healthy, noisy loss and a hard phase at the end": (
        {"losses": _hard_phase_at_the_end(), "samples": _samples({300: DIVERSE}),
         **_evals(300, 6, _learned_then_flat)},
        "healthy",
    ),
    "never learned: loss near ln V, repetitive text": (
        {"losses": [LN_V - 0.05 + 0.04 * ((u * 7) % 3) for u in range(1, 201)],
         "samples": _samples(_every(200, 40, REPETITIVE))},
        "never-learned",
    ),
    "12m lr 1e-2 unclipped: 3.90 then 5.27, diverse text": (
        {"losses": _diverged_12m(), "samples": _samples(_every(600, 75, DIVERSE))},
        "diverged",
    ),
    "learned, then the held-out distribution collapsed onto one token": (
        {"losses": _curve(300, 2.0), "samples": _samples({300: REPETITIVE}),
         **_evals(300, 6, _learned_then_up, _collapsing_share, _collapsing_entropy)},
        "locked-in",
    ),
    "learned, text repetitive, loss no longer falling, no collapse": (
        {"losses": _curve(300, 2.0), "samples": _samples({300: REPETITIVE}),
         **_evals(300, 6, _learned_then_flat)},
        "repetitive-throughout",
    ),
    "the issue's 60m arm: loss still falling, greedy text repetitive": (
        {"losses": _curve(300, 4.5), "samples": _samples({300: (0.25, 0.125)}),
         **_evals(300, 6, _still_falling, entropy=lambda u: _still_falling(u) + 0.2)},
        "still-learning",
    ),
    "a NaN loss at update 150": (
        {"losses": [math.nan if u == 150 else v for u, v in enumerate(_curve(300, 2.0), 1)],
         "samples": _samples(_every(300, 60, DIVERSE))},
        "non-finite",
    ),
}  # fmt: skip


def _judge(losses: list[float], samples: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return run_verdict(list(range(1, len(losses) + 1)), losses, samples, V, **kw)


@pytest.mark.parametrize("name", list(FIXTURES))
def test_every_labelled_trajectory_gets_its_verdict(name: str) -> None:
    kw, want = FIXTURES[name]
    out = _judge(**kw)
    assert out["verdict"] == want, (name, out["reasons"])
    assert out["collapse"] == (want in COLLAPSE_VERDICTS)
    assert out["reasons"] and all(isinstance(r, str) for r in out["reasons"])


def test_the_fixtures_cover_every_verdict_of_the_taxonomy() -> None:
    covered = {want for _, want in FIXTURES.values()}
    assert covered == set(VERDICTS) - {"insufficient-data"}
    assert set(COLLAPSE_VERDICTS) == {"diverged", "locked-in", "non-finite"}


def test_the_12m_lr_1e2_run_diverged_with_its_numbers_in_the_reason() -> None:
    out = _judge(_diverged_12m(), _samples(_every(600, 75, DIVERSE)))
    assert out["trajectory"] == "train" and out["collapse"]
    assert out["running_min"] == pytest.approx(3.90, abs=0.1)
    assert out["final_smoothed_loss"] == pytest.approx(5.27, abs=0.1)
    assert out["rise_above_min"] >= THRESHOLDS["diverge_nats"]
    why = " ".join(out["reasons"])
    assert "nats above its minimum" in why and "for the last 42 updates" in why
    assert out["final_score"] is None  # diverged is a loss verdict: the text was not needed


def test_repetitive_throughout_is_not_healthy_even_after_diverse_untrained_text() -> None:
    """The known defect: repetitive text with no rise was called healthy. Random-init text
    before the good phase is diverse; it does not make the learned model's text healthy."""
    samples = _samples({5: (0.05, 0.95)} | _every(300, 60, REPETITIVE))
    out = _judge(_curve(300, 2.0), samples, **_evals(300, 6, _learned_then_flat))
    assert out["verdict"] == "repetitive-throughout" and not out["collapse"]
    assert out["judged_sample_updates"] == [60, 120, 180, 240, 300]
    assert "at every one of 5 sample event(s)" in out["reasons"][-1]


def test_the_held_out_loss_is_judged_when_there_is_one() -> None:
    """Training loss mix-confounded either way; the fixed held-out mixture decides."""
    train = _hard_phase_at_the_end(600)  # looks like a rise at the end, but only 21 updates
    ev_ups = list(range(12, 601, 12))
    rising = [max(3.9, LN_V - u / 40) if u < 540 else 4.5 for u in ev_ups]  # +0.6 at the end
    samples = _samples(_every(600, 75, DIVERSE))
    out = _judge(train, samples, eval_updates=ev_ups, eval_losses=rising)
    assert out["trajectory"] == "eval" and out["verdict"] == "diverged"
    assert "held-out loss ended at 4.50, 0.60 nats above its minimum 3.90" in out["reasons"][1]
    flat = [max(3.9, LN_V - u / 40) for u in ev_ups]
    steep = [v + (1.5 if u > 500 else 0.0) for u, v in enumerate(train, 1)]  # a long hard phase
    dist = _evals(600, 12, lambda u: 0.0)["eval_dist"]  # no collapse
    out = _judge(steep, samples, eval_updates=ev_ups, eval_losses=flat, eval_dist=dist)
    assert out["trajectory"] == "eval" and out["verdict"] == "healthy"
    assert _judge(steep, samples)["verdict"] == "diverged"  # training loss alone is fooled
    few = _judge(train, samples, eval_updates=ev_ups[:3], eval_losses=rising[:3])
    assert few["trajectory"] == "train"  # 3 evaluations: too few to hold


def test_precedence() -> None:
    up = _evals(300, 6, lambda u: _learned_then_flat(u) + (0.6 if u >= 240 else 0.0))
    collapsed = _evals(300, 6, lambda u: up["eval_losses"][u // 6 - 1], _collapsing_share,
                       _collapsing_entropy)  # fmt: skip
    samples = _samples({300: REPETITIVE})
    # locked-in beats diverged when the distribution collapsed; a rise alone is diverged
    assert _judge(_curve(300, 2.0), samples, **up)["verdict"] == "diverged"
    out = _judge(_curve(300, 2.0), samples, **collapsed)
    assert out["verdict"] == "locked-in" and out["collapse"]
    # non-finite beats everything: skipped updates counted by the loop, finite losses (more
    # than the few gradient-only skips an fp16 loss scaler makes by design)
    out = _judge(_curve(300, 2.0), samples, nonfinite_updates=100, **collapsed)
    assert out["verdict"] == "non-finite" and out["reasons"] == ["100 non-finite updates (skipped)"]
    # never-learned beats locked-in: 6.1 is the unigram loss, so the model never used context
    stuck = _evals(300, 6, lambda u: 6.1 + (0.4 if u >= 240 else 0.0), _collapsing_share,
                   lambda u: 6.0 if u < 240 else 1.2)  # fmt: skip
    assert _judge(_curve(300, 6.1), samples, **stuck)["verdict"] == "locked-in"
    out = _judge(_curve(300, 6.1), samples, unigram_entropy=6.2, **stuck)
    assert out["verdict"] == "never-learned" and out["learned_level"] == pytest.approx(5.7)


def test_non_finite_final_losses_and_the_tolerance() -> None:
    losses = _curve(300, 2.0)
    samples = _samples(_every(300, 60, DIVERSE))
    out = _judge([*losses[:-1], math.inf], samples)
    assert out["verdict"] == "non-finite" and "final training loss is inf" in out["reasons"]
    ev = _judge(losses, samples, eval_updates=[60, 120, 180, 240, 300],
                eval_losses=[5.0, 3.0, 2.5, 2.4, math.nan])  # fmt: skip
    assert ev["verdict"] == "non-finite" and "final held-out loss is nan" in ev["reasons"]
    lenient = _judge(losses, samples, nonfinite_updates=1, thresholds={"nonfinite_updates": 3},
                     **_evals(300, 6, _learned_then_flat))  # fmt: skip
    assert lenient["verdict"] == "healthy" and lenient["n_nonfinite"] == 1


def test_too_little_to_judge_is_not_a_verdict_on_the_run() -> None:
    out = _judge([9.0, 8.0, math.nan, 7.0], [])  # a NaN still says non-finite
    assert out["verdict"] == "non-finite"
    out = _judge([9.0, 8.0, 7.0], [])
    assert out["verdict"] == "insufficient-data" and not out["collapse"]
    # learned, not diverged, but no held-out distribution: lock-in cannot be judged (old runs)
    out = _judge(_curve(300, 2.0), _samples({300: REPETITIVE}))
    assert out["verdict"] == "insufficient-data" and not out["collapse"]
    assert "no held-out distribution statistics" in out["reasons"][-1]
    ev = _evals(300, 6, _learned_then_flat)
    out = _judge(_curve(300, 2.0), [], eval_updates=ev["eval_updates"],
                 eval_losses=ev["eval_losses"])  # fmt: skip
    assert out["verdict"] == "insufficient-data" and out["trajectory"] == "eval"


def test_the_probe_reads_the_held_out_loss_and_the_skipped_updates_of_its_run(
    tmp_path: Path,
) -> None:
    torch = pytest.importorskip("torch")
    from andrea_diag.probes.lockin import LockInProbe
    from andrea_diag.record import Recorder

    probe = LockInProbe(torch.nn.Linear(2, 2), vocab_size=V)
    train = _hard_phase_at_the_end(600)
    rec = Recorder(tmp_path, {"kind": "test"})
    for u, loss in enumerate(train, 1):
        row: dict[str, Any] = {"update": u, "loss": loss, "nonfinite": False}
        if u % 12 == 0:
            row["eval_loss"] = max(3.9, LN_V - u / 40) if u < 540 else 4.5
        rec.log(row)
    probe.updates, probe.losses = list(range(1, 601)), train
    out = probe.close(tmp_path)["lockin"]
    assert out["trajectory"] == "eval" and out["verdict"] == "diverged" and out["collapse"]
    assert out["reasons"][-1] == "no prompts: verdict from the loss trajectory only"
    rec.log({"update": 601, "loss": float("nan"), "nonfinite": True})  # a non-finite loss
    rec.close()
    probe.updates.append(601)
    probe.losses.append(float("nan"))  # what the probe's own after_step would have recorded
    probe._closed = None
    assert probe.close(tmp_path)["lockin"]["verdict"] == "non-finite"
    # a user's loop (the monitor): no evaluations, only whether each update was applied
    own = Recorder(tmp_path / "own", {"kind": "monitor"})
    for u, loss in enumerate(train, 1):
        own.log({"update": u, "loss": loss, "applied": u % 20 != 0})  # 30 of 600: above 2%
    own.close()
    probe._closed = None
    out = probe.close(tmp_path / "own")["lockin"]
    assert out["verdict"] == "non-finite" and out["n_nonfinite"] == 30


# -- the report and the sweep read the same verdict ----------------------------------------


def _summary(verdict: str, **kw: Any) -> dict[str, Any]:
    lock = {"verdict": verdict, "collapse": verdict in COLLAPSE_VERDICTS, "reasons": ["why"]}
    return {"final_loss": 5.27, "min_loss": 3.9, "lockin": lock, **kw}


def _arm(verdict: str, clip: str = "none") -> Arm:
    return Arm(label=clip, arm=clip, size="12m",
               config={"clip": clip, "lr": 1e-2, "seed": 0, "steps": 600},
               summary=_summary(verdict), metrics=pd.DataFrame(), events=pd.DataFrame(),
               samples=pd.DataFrame())  # fmt: skip


def test_report_sentences_use_the_verdict_names() -> None:
    out = expectation_findings([_arm("diverged"), _arm("repetitive-throughout", "global")])
    assert "the unclipped arm none collapsed (verdict diverged)." in out
    assert "none: verdict: diverged (why)." in out
    assert "global: verdict: repetitive-throughout (why)." in out
    assert "no arm locked in." in out  # diverged is a collapse, not a lock-in
    out = expectation_findings([_arm("repetitive-throughout")])
    assert "the unclipped arm none did not collapse (verdict repetitive-throughout)." in out
    assert collapse_reason(_arm("non-finite")) == "verdict non-finite"
    assert collapse_reason(_arm("healthy")) is None


def test_the_sweep_reports_collapse_per_arm() -> None:
    rows = []
    for lr, verdicts in [(3e-4, ("healthy", "healthy")), (1e-2, ("diverged", "locked-in"))]:
        cfg = RunConfig(size="12m", lr=lr)
        for clip, verdict in zip(("none", "global"), verdicts, strict=True):
            cell = f"12m-lr{lr:g}-mn1-s0"
            rows.append(_arm_row(cfg, clip, _summary(verdict, n_spikes=0), cell))
    table = pd.DataFrame(rows)
    assert table["collapse"].tolist() == [False, False, True, True]
    assert table["lockin"].tolist() == ["healthy", "healthy", "diverged", "locked-in"]
    text = sweep_findings(table)
    assert "collapse: 12m lr 0.01 none (diverged), 12m lr 0.01 global (locked-in)." in text
    assert "locked in: 12m-lr0.01-mn1-s0 global." in text
    # a sweep.csv from before the column: the verdicts decide, by the same definition
    assert "collapse: 12m lr 0.01 none" in " ".join(sweep_findings(table.drop(columns="collapse")))
    assert "no arm collapsed" in " ".join(sweep_findings(table[table["lr"] < 1e-3]))
    assert _arm_row(RunConfig(), "none", {"status": "not run"}, "c")["collapse"] is None


def test_a_few_fp16_scaler_skips_are_not_a_non_finite_run() -> None:
    """GradScaler skips overflowed updates by design (finite loss, non-finite gradient)."""
    from andrea_diag.probes.verdict import run_verdict

    updates = list(range(1, 201))
    losses = [9.0 - 5.0 * u / 200 for u in updates]  # learned steadily, every loss finite
    few = run_verdict(updates, losses, [], 8449, nonfinite_updates=2)
    many = run_verdict(updates, losses, [], 8449, nonfinite_updates=20)
    assert few["verdict"] != "non-finite" and many["verdict"] == "non-finite"
