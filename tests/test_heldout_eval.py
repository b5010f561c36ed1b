"""Held-out evaluation: the same fixed sequences for every arm, never trained on, and a number
that does not move with the bandit's phase (issue 12)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from andrea_diag.config import SOURCE_NAMES, RunConfig
from andrea_diag.data import BatchPlan, Mixer, PreparedData, prepare_data
from andrea_diag.data.heldout import eval_set, split_point
from andrea_diag.experiments.cascade import CascadeSpec, run_cascade
from andrea_diag.model import GPT
from andrea_diag.train.accumulation import accumulate_group
from andrea_diag.train.components import Precision
from andrea_diag.train.evaluation import HeldOutEvaluator

STEPS = 30


@pytest.fixture(scope="module")
def data() -> PreparedData:
    return prepare_data({}, seed=0)


@pytest.fixture(scope="module")
def cascade(tmp_path_factory: pytest.TempPathFactory, data: PreparedData) -> Path:
    out = tmp_path_factory.mktemp("eval") / "c"
    cfg = RunConfig(size="tiny", steps=STEPS, device="cpu", eval_every=5)
    run_cascade(CascadeSpec(base=cfg, clips=["none", "global"], out=out), data=data)
    return out


def test_eval_sequences_are_the_same_for_every_arm_and_never_trained_on(
    cascade: Path, data: PreparedData
) -> None:
    sets = [json.loads((cascade / a / "eval_set.json").read_text()) for a in ("none", "global")]
    assert sets[0] == sets[1]
    plan = json.loads((cascade / "batch_plan.json").read_text())
    t = plan["seq_len"]
    for s, name in enumerate(SOURCE_NAMES):
        start = split_point(data.streams[name].numel())
        assert sets[0]["heldout_from"][name] == start
        trained = [o for r in plan["records"] for o, src in zip(r["offsets"], r["source_idx"],
                   strict=True) if src == s]  # fmt: skip
        assert trained, name  # every source was trained on in 30 updates
        assert max(trained) + t < start  # the last trained token sits before the tail
        assert min(sets[0]["offsets"][name]) >= start  # every eval token is in the tail


def test_every_arm_records_eval_loss_per_source_and_the_uniform_mixture(cascade: Path) -> None:
    for arm in ("none", "global"):
        m = pd.read_parquet(cascade / arm / "metrics.parquet")
        ev = m[m["eval_loss"].notna()]
        assert ev["update"].tolist() == [5, 10, 15, 20, 25, 30]
        per = ev[[f"eval_loss_{n}" for n in SOURCE_NAMES]].mean(axis=1)
        assert (ev["eval_loss"] - per).abs().max() < 1e-12
        summary = json.loads((cascade / arm / "summary.json").read_text())
        assert summary["final_eval_loss"] == ev["eval_loss"].iloc[-1]
        assert summary["eval"]["n_evals"] == 6


def test_every_arm_writes_its_evaluations_alone_to_eval_csv(cascade: Path) -> None:
    """eval.csv is the publishable eval table: the eval rows and columns of metrics, nothing else."""
    for arm in ("none", "global"):
        m = pd.read_parquet(cascade / arm / "metrics.parquet")
        table = pd.read_csv(cascade / arm / "eval.csv")
        cols = ["update", *[c for c in m.columns if c.startswith("eval_")]]
        assert list(table.columns) == cols and "loss" not in table
        want = m.loc[m["eval_loss"].notna(), cols].reset_index(drop=True)
        pd.testing.assert_frame_equal(table, want, check_dtype=False, rtol=0, atol=1e-12)


def test_same_weights_at_two_bandit_phases_give_one_eval_loss_but_two_training_losses(
    data: PreparedData,
) -> None:
    torch.manual_seed(0)
    model = GPT(RunConfig(size="tiny").model)
    plan = BatchPlan(data, Mixer(seed=0), seed=0, micro_batch=8, accum=2, seq_len=64)
    phases = {}
    for u in range(1, 200):  # two updates in different phases with different source weights
        b = plan.batch(u)
        phases.setdefault(b.phase, b)
        if len(phases) == 2:
            break
    b1, b2 = phases.values()
    ev = HeldOutEvaluator(eval_set(data.streams, 64, 0), 1, 1, torch.device("cpu"),
                          Precision().autocast)  # fmt: skip
    train_loss, eval_loss = [], []
    for b in (b1, b2):  # the same weights both times: nothing is stepped
        micro = [(b.tokens[a, :, :-1], b.tokens[a, :, 1:]) for a in range(b.tokens.size(0))]
        train_loss.append(float(accumulate_group(model, micro).loss))
        model.zero_grad(set_to_none=True)
        eval_loss.append(ev.evaluate(model)["eval_loss"])
    assert eval_loss[0] == eval_loss[1]
    assert b1.weights != b2.weights and train_loss[0] != train_loss[1]


def test_every_evaluation_records_the_distribution_shape_per_source_and_overall(
    cascade: Path,
) -> None:
    """eval_argmax_share / eval_entropy / eval_top1_prob (the lock-in evidence) come with every
    eval_loss, from the same forward pass: present exactly on the evaluation updates."""
    m = pd.read_parquet(cascade / "none" / "metrics.parquet")
    ev = m[m["eval_loss"].notna()]
    for stat in ("argmax_share", "entropy", "top1_prob"):
        cols = [f"eval_{stat}"] + [f"eval_{stat}_{n}" for n in SOURCE_NAMES]
        assert (
            ev[cols].notna().all().all() and m.loc[m["eval_loss"].isna(), cols].isna().all().all()
        )
    per = [f"eval_argmax_share_{n}" for n in SOURCE_NAMES]
    assert ((ev[per] > 0) & (ev[per] <= 1)).all().all()
    # one token's count over all positions is at most the sum of its per-source counts
    assert (ev["eval_argmax_share"] <= ev[per].mean(axis=1) + 1e-6).all()
    ent = ev[[f"eval_entropy_{n}" for n in SOURCE_NAMES]].mean(axis=1)
    assert (ev["eval_entropy"] - ent).abs().max() < 1e-5  # equal positions per source
    assert ((ev["eval_top1_prob"] > 0) & (ev["eval_top1_prob"] <= 1)).all()
    assert (ev["eval_entropy"] > 0).all() and (ev["eval_entropy"] <= math.log(8449) + 1e-4).all()
