"""A ladder folder someone else made, stated again by ``report`` (round 24): a field or cell of
the wrong type is the run's word, not a reason to refuse the ladder's page. The sweep page next
to it already dropped such a value with a warning; the ladder's reader refused the whole page,
"cannot render ...: unexpected shape (ValueError)". What cannot be stated (a row of a size that
is no rung, an arm twice, a column every statement needs) is one line naming it
(``experiments/ladder.py`` ``read_sweep_outputs``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hostile_dirs import cli, edit, one_line_error

from andrea_diag.errors import UserError
from andrea_diag.experiments.ladder import read_sweep_outputs

SIZES, SEEDS, CLIPS = ["tiny", "tiny2"], [0, 1], ["none", "global"]


@pytest.fixture
def ladder(tmp_path: Path) -> Path:
    """A ladder's own files, no cell folders (none is read to state the thresholds)."""
    out = tmp_path / "ladder"
    out.mkdir()
    rows = [{"cell": f"{size}-s{seed}", "size": size, "lr": 1e-3, "max_norm": 1.0,
             "seed": seed, "precision": "fp32", "clip": clip, "final_loss": 3.0,
             "min_loss": 2.9, "final_eval_loss": 3.0 + 0.01 * seed + (clip == "none") / 50,
             "min_eval_loss": 2.9, "max_grad_norm": 2.0, "pct_clipped": 0.0, "n_spikes": 0,
             "n_grad_spikes": 0, "spike_score_grad": None, "n_cascades": 0,
             "max_m_share": 0.0, "recovery_m": None, "max_v_share": 0.1, "final_v_share": 0.1,
             "lockin": "healthy", "collapse": False, "nonfinite_updates": 0, "status": "done",
             "error": None}
            for size in SIZES for seed in SEEDS for clip in CLIPS]  # fmt: skip
    pd.DataFrame(rows).to_csv(out / "sweep.csv", index=False)
    meta = {"sizes": SIZES[::-1], "lrs": [1e-3], "max_norms": [1.0], "seeds": SEEDS,
            "clips": CLIPS, "steps": 3, "recipe": "v1", "precisions": ["fp32"],
            "plotly": "inline", "command": "andrea-diag ladder", "status": "done"}  # fmt: skip
    (out / "sweep.json").write_text(json.dumps(meta))
    (out / "ladder.json").write_text("{}")
    return out


def _cell(out: Path, col: str, value: object, rows: list[int]) -> None:
    table = pd.read_csv(out / "sweep.csv")
    table[col] = table[col].astype(object)
    table.loc[rows, col] = value
    table.to_csv(out / "sweep.csv", index=False)


def _stated(out: Path) -> str:
    code, said = cli("report", str(out))
    assert code == 0, said
    assert "Traceback" not in said and "error:" not in said, said
    assert (out / "ladder.html").stat().st_size > 0
    return said


@pytest.mark.parametrize(
    ("field", "value"),
    [("steps", "3"), ("steps", [3]), ("lrs", ["1e-3"]), ("lrs", None)],
    ids=repr,
)
def test_a_wrong_type_in_a_ladders_sweep_json_still_states_its_thresholds(
    ladder: Path, field: str, value: object
) -> None:
    edit(ladder / "sweep.json", **{field: value})
    _stated(ladder)
    thresholds = json.loads((ladder / "ladder.json").read_text())["thresholds"]
    assert thresholds and "insufficient seeds" in thresholds[0]["harm_text"]


@pytest.mark.parametrize(
    ("col", "value", "left_out"),
    [("final_eval_loss", "abc", 0), ("final_v_share", "abc", 0), ("lr", "abc", 1),
     ("max_norm", "abc", 1), ("seed", "9" * 400, 1), ("seed", 0.5, 1)],
    ids=lambda v: repr(v)[:12],
)  # fmt: skip
def test_a_wrong_number_in_a_ladders_sweep_csv_is_a_gap_not_a_refused_page(
    ladder: Path, col: str, value: object, left_out: int, caplog: pytest.LogCaptureFixture
) -> None:
    _cell(ladder, col, value, [0])
    _stated(ladder)
    assert ("1 row(s) without a number" in caplog.text) == bool(left_out), caplog.text
    arms = json.loads((ladder / "ladder.json").read_text())["arms_in_table"]
    assert arms == len(SIZES) * len(SEEDS) * len(CLIPS) - left_out


def test_a_row_of_a_size_that_is_no_rung_is_one_line_naming_it(ladder: Path) -> None:
    _cell(ladder, "size", "120m", [0, 1])
    line = one_line_error("report", str(ladder))
    assert "'120m'" in line and "sweep.csv" in line  # was: unexpected shape (KeyError)


def test_a_size_no_model_has_in_sweep_json_is_one_line_naming_the_file(ladder: Path) -> None:
    edit(ladder / "sweep.json", sizes=["tiny", "huge"])
    with pytest.raises(UserError, match=r"sweep\.json lists size 'huge'"):
        read_sweep_outputs(ladder)  # was: "unknown size 'huge'", hint: choose from ...


@pytest.mark.parametrize(
    "change",
    [lambda t: pd.concat([t, t.iloc[[0]]]), lambda t: t.assign(seed=[0] * len(t))],
    ids=["a-row-twice", "a-cell-claiming-another-seed"],
)
def test_an_arm_listed_twice_is_one_line_not_a_traceback(ladder: Path, change) -> None:
    change(pd.read_csv(ladder / "sweep.csv")).to_csv(ladder / "sweep.csv", index=False)
    with pytest.raises(UserError, match="the same arm twice"):
        read_sweep_outputs(ladder)  # was: TypeError / ValueError from the paired test


@pytest.mark.parametrize("col", ["lr", "max_norm", "seed"])
def test_a_ladder_table_without_a_column_every_statement_needs_is_one_line(
    ladder: Path, col: str
) -> None:
    pd.read_csv(ladder / "sweep.csv").drop(columns=[col]).to_csv(ladder / "sweep.csv", index=False)
    with pytest.raises(UserError, match=f"no {col} column"):
        read_sweep_outputs(ladder)  # was: KeyError
