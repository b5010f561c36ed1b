"""bench/replication.py applies REPLICATION.md's fixed rule: fewer than 12 finished pairs is
"insufficient seeds" with no test; otherwise the sign-flip p on the protocol's side against 0.05
decides "replicated" or "not replicated" (with the seeds a gap of that size would need), and a
two-sided test whose sign differs from the original seeds' says so."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pandas as pd
import pytest

_SPEC = importlib.util.spec_from_file_location(
    "replication", Path(__file__).parents[1] / "bench" / "replication.py"
)
replication = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(replication)


def _pairs(gaps: list[float]) -> pd.DataFrame:
    n = len(gaps)
    return pd.DataFrame({"seed": range(8, 8 + n), "gap": gaps,
                         "collapsed_none": [False] * n, "collapsed_global": [False] * n,
                         "event_none": [True] * n, "event_global": [False] * n})  # fmt: skip


def test_fewer_than_twelve_pairs_is_insufficient_and_untested() -> None:
    out = replication.verdict(_pairs([0.3] * 11), [])
    assert out["call"].startswith("insufficient seeds") and out["p_primary"] is None


def test_sixteen_positive_gaps_replicate_at_one_in_65536() -> None:
    out = replication.verdict(_pairs([0.1 + 0.01 * i for i in range(16)]), [0.2] * 8)
    assert out["call"].startswith("replicated")
    assert out["p_primary"] == pytest.approx(1 / 2**16)
    assert out["pooled_descriptive"]["pairs"] == 24
    assert out["pooled_descriptive"]["note"].startswith("the 8 original seeds")
    note = replication.verdict(_pairs([0.1] * 12), [0.2] * 16)["pooled_descriptive"]["note"]
    assert note.startswith("the 16 original seeds")  # was "original 8" whatever they were
    assert out["pollution_events"] == {"none": "16/16", "global": "0/16"}


def test_gaps_of_both_signs_do_not_replicate_and_say_what_would() -> None:
    gaps = [0.05, -0.04, 0.03, -0.02, 0.04, -0.05, 0.01, 0.02, -0.03, 0.02, 0.0, 0.01]
    out = replication.verdict(_pairs(gaps), [])
    assert out["call"].startswith("not replicated") and "seeds" in out["call"]
    assert out["p_primary"] >= 0.05 and math.isfinite(out["p_primary"])


def test_a_mean_gap_below_zero_says_clipping_did_not_help_and_names_no_seed_count() -> None:
    gaps = [-0.05, 0.01, -0.03, -0.02, 0.01, -0.04, -0.01, 0.02, -0.03, -0.02, 0.0, -0.01]
    out = replication.verdict(_pairs(gaps), [])
    assert out["call"].startswith("not replicated") and "did not lower" in out["call"]
    assert "would need" not in out["call"]


def test_the_verdict_is_strict_json_and_names_the_seeds_it_dropped() -> None:
    """Two pairs, one with a non-finite gap: every statistic that cannot be computed is null
    (json.dumps wrote a bare NaN, which strict readers refuse), and the dropped seed is named."""
    out = replication.verdict(_pairs([0.2, math.nan]), [])
    text = json.dumps(out, allow_nan=False)  # raises on NaN or Infinity
    back = json.loads(text)
    assert back["dropped_non_finite"] == ["s9"] and back["gaps"] == {"s8": 0.2}
    assert back["sd"] is None and back["bootstrap_95"] == [None, None]
    assert back["call"].startswith("insufficient seeds: 1 finished pairs")


def test_the_one_sided_default_is_named_in_the_verdict() -> None:
    out = replication.verdict(_pairs([0.1 + 0.01 * i for i in range(16)]), [])
    assert out["alternative"] == "greater" and "one-sided" in out["call"]


def test_a_two_sided_test_replicates_a_harm_with_the_originals_sign() -> None:
    """Replication 3's shape: the original 120m seeds said clipping raised held-out loss; 16 new
    negative gaps replicate it, two-sided p = 2 / 2**16, and the call says "raised"."""
    gaps = [-0.01 - 0.001 * i for i in range(16)]
    out = replication.verdict(_pairs(gaps), [-0.01] * 8, alternative="two-sided")
    assert out["call"].startswith("replicated: clipping raised held-out loss by 0.018 nats")
    assert "two-sided" in out["call"] and out["p_primary"] == pytest.approx(2 / 2**16)


def test_a_two_sided_test_whose_sign_flips_says_opposite_sign_not_replicated() -> None:
    gaps = [0.01 + 0.001 * i for i in range(16)]
    out = replication.verdict(_pairs(gaps), [-0.014] * 8, alternative="two-sided")
    assert out["call"].startswith(
        "opposite sign to the original seeds' -0.014 nats: clipping lowered"
    )
    assert not out["call"].startswith("replicated")


def test_a_one_sided_harm_test_with_a_positive_mean_says_clipping_did_not_raise_it() -> None:
    gaps = [0.05, -0.01, 0.03, 0.02, -0.01, 0.04, 0.01, -0.02, 0.03, 0.02, 0.0, 0.01]
    out = replication.verdict(_pairs(gaps), [], alternative="less")
    assert out["call"].startswith("not replicated") and "did not raise" in out["call"]
    assert "would need" not in out["call"]


def test_a_two_sided_miss_names_the_seeds_its_gap_would_need() -> None:
    gaps = [-0.05, 0.04, -0.03, 0.02, -0.04, 0.05, -0.01, -0.02, 0.03, -0.02, 0.01, -0.01]
    out = replication.verdict(_pairs(gaps), [-0.014] * 8, alternative="two-sided")
    assert out["call"].startswith("not replicated") and "would need" in out["call"]
    assert out["p_primary"] >= 0.05


def _sweep_table(train: dict[str, list[float]], held_out: dict[str, list[float]]) -> pd.DataFrame:
    """A sweep.csv of 120m seeds 24.. with the given losses per arm."""
    rows = []
    for clip in ("none", "global"):
        for i, (t, e) in enumerate(zip(train[clip], held_out[clip], strict=True)):
            rows.append({"cell": f"c{i}", "size": "120m", "lr": 3e-4, "max_norm": 1.0,
                         "seed": 24 + i, "precision": "fp32", "clip": clip, "status": "done",
                         "final_loss": t, "final_eval_loss": e, "lockin": "healthy"})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_train_measure_pairs_final_training_loss_and_names_it() -> None:
    """Replication 4: the gap of ``final_loss`` (not the held-out loss beside it), and the call
    says "training loss"."""
    n = 12
    table = _sweep_table({"none": [4.2] * n, "global": [4.0 - 0.001 * i for i in range(n)]},
                         {"none": [5.0] * n, "global": [5.0] * n})  # fmt: skip
    pairs = replication.new_pairs(table, "120m", 3e-4, "fp32", measure="train")
    assert pairs["gap"].tolist() == pytest.approx([0.2 + 0.001 * i for i in range(n)])
    out = replication.verdict(pairs, [0.17] * 16, alternative="two-sided", measure="train")
    assert out["measure"] == "final_loss"
    assert out["call"].startswith("replicated: clipping lowered training loss by 0.20")
    held = replication.new_pairs(table, "120m", 3e-4, "fp32")  # the default: held-out
    assert held["gap"].tolist() == [0.0] * n
