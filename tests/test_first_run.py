"""The README's first run (issue 24): ``andrea-diag cascade`` on its defaults learns, meets an
injected outlier it attributes and a phase transition (tiny's sharp mixer), and the report's
first findings say so in plain words.

The fast tests pin the preset rule (the tiny run's injection belongs to its own length) and the
headline's sentences on hand-made arms; the slow one trains the default cascade end to end.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import PRESETS, RunConfig
from andrea_diag.record import load_run
from andrea_diag.report import render_report
from andrea_diag.report.arms import Arm
from andrea_diag.report.headline import headline

TINY = PRESETS["tiny"]


def test_tiny_default_run_injects_its_outlier_only_at_its_own_length() -> None:
    cfg = RunConfig().resolve()
    assert (cfg.steps, cfg.lr, cfg.inject) == (TINY.steps, TINY.lr, list(TINY.inject))
    assert cfg.inject and int(cfg.inject[0].split("@")[1]) < cfg.steps  # met before the end
    assert RunConfig(steps=40).resolve().inject == []  # placed for the preset length: not at 40
    assert RunConfig(inject=["nonfinite@5"]).resolve().inject == ["nonfinite@5"]
    assert RunConfig(size="12m").resolve().inject == []
    again = RunConfig(steps=40).resolve()  # a resolved config stays what it was
    assert again.resolve().inject == [] and cfg.resolve().inject == cfg.inject


def test_tiny_defaults_to_a_sharp_mixer_and_an_older_run_reads_as_the_seeds_mixer() -> None:
    assert RunConfig().resolve().mixer_sharpness == TINY.mixer_sharpness > 1.0
    assert RunConfig(steps=40).resolve().mixer_sharpness == TINY.mixer_sharpness  # any length
    assert RunConfig(size="12m").resolve().mixer_sharpness == 1.0  # the seeds' mixer
    assert RunConfig(mixer_sharpness=2.0).resolve().mixer_sharpness == 2.0
    old = RunConfig().resolve().to_dict()
    del old["mixer_sharpness"]  # a config.json written before the option existed
    assert RunConfig.from_dict(old).resolve().mixer_sharpness == 1.0


def _arm(clip: str, *, loss: float, share_m0: float, share_v0: float, rec_v: int) -> Arm:
    updates = list(range(1, 31))
    metrics = pd.DataFrame(
        {
            "update": updates,
            "boundary": [u in (1, 8, 22) for u in updates],
            "injected": ["outlier" if u == 25 else None for u in updates],
            "clip_coef": [0.25 if (u == 25 and clip != "none") else 1.0 for u in updates],
            "w_gutenberg": [0.8 if u < 8 else 0.1 for u in updates],  # the phase of 1..7, then
            "w_repo-docs": [0.2 if u < 8 else 0.9 for u in updates],  # the one from 8 on
        }
    )
    events = pd.DataFrame(
        [
            {"update": 9, "metric": "loss", "value": 7.1, "z": 6.5, "cause": "phase-transition"},
            {"update": 25, "metric": "grad_norm", "value": 4.0, "z": 24.3, "cause": "outlier",
             "outlier_source": "gutenberg", "outlier_example": 3},
        ]
    )  # fmt: skip
    per = {"share_m0": share_m0, "share_v0": share_v0, "recovery_m": 20, "recovery_v": rec_v}
    summary = {
        "final_eval_loss": loss,
        "final_eval_update": 30,
        "lockin": {"verdict": "healthy", "unigram_entropy": 6.79},
        "pollution": {"recovery_share": 0.1, "per_spike": [{"update": 25, **per}]},
    }
    config = {"clip": clip, "size": "tiny", "seed": 3, "lr": 2e-3, "steps": 30, "max_norm": 1.0}
    return Arm(clip, clip, "tiny", config, summary, metrics, events, pd.DataFrame())


def test_headline_names_the_learned_run_the_attributed_outlier_and_its_life_in_m_and_v() -> None:
    none = _arm("none", loss=5.62, share_m0=0.974, share_v0=0.122, rec_v=36)
    glob = _arm("global", loss=5.61, share_m0=0.556, share_v0=0.0123, rec_v=0)
    learned, spike, bounds, caveat = headline([none, glob])
    assert learned.startswith("The model learned (none): held-out loss 5.62 at update 30")
    assert "1.17 nats below the unigram level 6.79 (verdict healthy)" in learned
    assert "The outlier injected at update 25 raised grad_norm to 4 (z 24)" in spike
    assert "attributed it to: outlier (sequence 3, from gutenberg)" in spike
    assert (
        "a term of 97.4% of the norm of Adam's m and 12.2% of v's" in spike
    )  # the unclipped arm's moments
    assert "in v it fell below 10% after 36 updates" in spike
    assert "(global, max_norm 1) scaled that gradient by 0.25" in spike
    assert "55.6% of the norm of Adam's m and 1.23% of v's" in spike and "never above 10%" in spike
    assert (
        "1 spike update(s) followed a bandit phase boundary" in bounds and "(updates 9;" in bounds
    )
    assert bounds.endswith(
        "The strongest: loss rose to 7.1 (z 6.5) at update 9, 1 update(s) after the mix changed "
        "at update 8, from mostly gutenberg (80%) to mostly repo-docs (90%)."
    )
    assert "one seed (3)" in caveat and "-0.010 nats" in caveat
    assert "andrea-diag sweep --size tiny --lr 0.002 --steps 30 --seed 0,1,2,3,4,5,6,7" in caveat


def test_headline_says_the_model_did_not_learn_when_held_out_loss_stays_above_unigram() -> None:
    arm = _arm("none", loss=6.82, share_m0=0.4, share_v0=0.07, rec_v=0)
    arm.summary["lockin"]["verdict"] = "never-learned"
    first = headline([arm])[0]
    assert first.startswith("The model did not learn (none): held-out loss 6.82")
    assert "0.03 nats above the unigram level" in first and "never-learned" in first


def test_headline_is_the_first_finding_on_the_page(make_run, tmp_path: Path) -> None:
    runs = [make_run(tmp_path / c, clip=c) for c in ("none", "global")]
    page = render_report(runs, tmp_path / "report.html").read_text()
    findings = page.split("<ul class='findings'>", 1)[1]
    first = re.search(r"<li>(.*?)</li>", findings).group(1)
    arms = [Arm.from_run(load_run(r)) for r in runs]
    assert first == headline(arms)[0].replace("'", "&#x27;")


@pytest.mark.slow  # trains the README's default cascade: two arms of the tiny preset's updates
def test_default_cascade_learns_attributes_its_outlier_and_a_phase_transition_and_says_so(
    tmp_path: Path,
) -> None:
    out = tmp_path / "c"
    res = CliRunner().invoke(app, ["cascade", "--device", "cpu", "--out", str(out)])
    assert res.exit_code == 0, res.output
    at = int(TINY.inject[0].split("@")[1])
    shares = {}
    for arm in ("none", "global"):
        s = json.loads((out / arm / "summary.json").read_text())
        lock = s["lockin"]
        assert lock["verdict"] not in ("never-learned", "insufficient-data"), lock["reasons"]
        assert s["final_eval_loss"] < lock["unigram_entropy"] - 0.5  # clearly below unigram
        events = load_run(out / arm)["events"]
        hit = events[events["update"] == at]
        assert set(hit["cause"]) == {"outlier"}, events[["update", "cause"]]  # and nothing else
        (spike,) = [p for p in s["pollution"]["per_spike"] if p["update"] == at]
        shares[arm] = spike
    # and a phase transition: the sharp mixer's boundary shocks the unclipped model
    events = load_run(out / "none")["events"]
    pt = events[events["cause"].str.contains("phase-transition")]
    assert len(pt) and (pt["update"] - pt["boundary_update"]).between(0, 3).all(), events
    # the clipped arm lets less of the outlier into v than the unclipped arm
    assert shares["global"]["share_v0"] < shares["none"]["share_v0"]
    page = (out / "report.html").read_text()
    findings = page.split("<ul class='findings'>", 1)[1]
    first, second, third = re.findall(r"<li>(.*?)</li>", findings)[:3]
    assert first.startswith("The model learned (none)")
    assert f"The outlier injected at update {at}" in second
    assert (
        "attributed it to: outlier (sequence" in second and "of the norm of Adam&#x27;s m" in second
    )
    assert "followed a bandit phase boundary and were attributed to the phase transition" in third
    assert "The strongest: " in third and "the mix changed at update" in third
    assert "What this cannot show: this is one seed (0)" in findings


def test_headline_reads_a_damaged_run_dir_without_raising() -> None:
    arm = _arm("none", loss=5.6, share_m0=0.9, share_v0=0.1, rec_v=3)
    arm.summary["lockin"]["unigram_entropy"] = ["not", "a", "number"]
    arm.summary["pollution"]["per_spike"][0].update(share_m0="<b>", recovery_m={"x": 1})
    arm.config["seed"] = "abc"
    arm.events = arm.events.astype({"update": object})
    arm.events.loc[0, "update"] = "nine"
    learned, spike, _, caveat = headline([arm])
    assert "whether the model learned is not known" in learned
    assert "a term of - of the norm of Adam's m" in spike and "its decay in m is not known" in spike
    assert "this is no seed(s)" in caveat


@pytest.mark.parametrize("pollution", [{"per_spike": [1, "x"], "recovery_share": "a lot"}, [3]])
def test_headline_survives_a_damaged_pollution_table(pollution: object) -> None:
    arm = _arm("none", loss=5.6, share_m0=0.9, share_v0=0.1, rec_v=3)
    arm.summary["pollution"] = pollution
    _, spike, _, _ = headline([arm])
    assert "not tracked in m and v" in spike  # no crash, and no number made up


def test_the_boundary_sentence_survives_damaged_weights_and_z_and_makes_no_number_up() -> None:
    arm = _arm("none", loss=5.6, share_m0=0.9, share_v0=0.1, rec_v=3)
    arm.metrics = arm.metrics.astype({"w_gutenberg": object})
    arm.metrics.loc[arm.metrics["update"] == 8, "w_gutenberg"] = "<b>"
    arm.events = arm.events.astype({"z": object})
    arm.events.loc[0, "z"] = "high"
    bounds = headline([arm])[2]
    assert "The strongest: loss rose to 7.1 (z -) at update 9" in bounds
    assert bounds.endswith("at update 8, from mostly gutenberg (80%) to mostly repo-docs (90%).")
    arm.metrics = arm.metrics.drop(columns=["w_gutenberg", "w_repo-docs"])
    assert headline([arm])[2].endswith("1 update(s) after the mix changed at update 8.")
