"""The summary's figures come from the one rule summary_check holds it to, and a window of
boundary_k 0 compares nothing instead of dividing by zero."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from andrea_diag import summary_check
from andrea_diag.train import summary


def test_a_run_of_boundary_k_0_closes_with_no_boundary_delta() -> None:
    out = summary.boundary_loss_delta([3.0, 2.0, 1.0], [False, True, False], k=0)
    assert out == {"after_minus_before_mean": None, "n": 0, "k": 0}  # was ZeroDivisionError


def test_the_trainers_summary_takes_its_figures_from_summary_checks_rule(monkeypatch) -> None:
    # one owner: a change of the rule in summary_check reaches the summary the trainer writes
    seen = {}

    def rule(df: pd.DataFrame) -> dict:
        seen["rows"] = len(df)
        return {"n_updates": 99, "final_loss": 1.5, "min_loss": 1.0, "max_grad_norm": 2.0,
                "median_grad_norm": 1.0}  # fmt: skip

    monkeypatch.setattr(summary, "table_figures", rule)
    df = pd.DataFrame({"update": [1, 2], "loss": [3.0, 2.0], "grad_norm": [1.0, 2.0],
                       "clip_coef": [1.0, 0.5], "boundary": [False, False],
                       "nonfinite": [False, False], "applied": [True, True]})  # fmt: skip

    class Rec:
        run_dir = None

    monkeypatch.setattr(summary, "read_jsonl", lambda path: df)
    monkeypatch.setattr(summary, "clean_table", lambda d, kind, path: d)
    from pathlib import Path

    from andrea_diag.config import RunConfig

    rec = Rec()
    rec.run_dir = Path("/nonexistent")
    out = summary.summarize(rec, RunConfig(size="tiny"), wall_s=1.0)
    assert seen == {"rows": 2} and out["n_updates"] == 99 and out["final_loss"] == 1.5
    assert math.isnan(out["pct_clipped"])  # the rule gave none: the mean of no row


@pytest.mark.parametrize("n", [0, 1, 9, 25])
def test_table_figures_keep_the_trainers_final_loss_window(n: int) -> None:
    losses = [float(10 - i) for i in range(n)]
    df = pd.DataFrame({"update": range(1, n + 1), "loss": losses}, dtype="float64")
    tail = losses[-max(1, min(10, n // 10 or 1)) :] if n else []
    expect = sum(tail) / len(tail) if tail else None
    assert summary_check.table_figures(df)["final_loss"] == expect
