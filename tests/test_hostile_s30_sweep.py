"""A kept cell's summary in a sweep or cascade (round 30): held to its own metrics table.

- A kept cell's ``summary.json`` went into ``sweep.csv`` as it was (only its field types were
  checked): one copied from the sibling arm, or edited, put that run's losses into the table,
  and from there into ``arms.csv``/``gaps.csv``, while the cell's page showed the table's.
  It is now read as the report reads it (``experiments/arm_summary.py``, ``summary_check.py``):
  the table's figures, with one warning line.
- A kept summary that cannot be read (not a JSON object, a damaged metrics table beside it)
  ended the sweep half-way, after ``sweep.json`` was marked running again and ``sweep.csv``
  cut to the cells before it. It is now one line naming the cell and arm, before any write.
- ``cascade --resume`` of a finished cascade printed the copied summary's figures.

python -m pytest -q tests/test_hostile_s30_sweep.py
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pandas as pd
import pytest
from finished_sweep import CELL, SWEEP
from finished_sweep import strict_cli as _run

from andrea_diag.errors import UserError
from andrea_diag.experiments.arm_summary import arm_summary


def _error_line(output: str) -> str:
    lines = [x for x in output.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, output
    return lines[0]


@pytest.fixture
def sweep(finished_sweep: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(finished_sweep, tmp_path / "s", symlinks=True))


def _row(sweep: Path, clip: str) -> pd.Series:
    return pd.read_csv(sweep / "sweep.csv").set_index("clip").loc[clip]


def _snapshot(sweep: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sweep.iterdir() if p.is_file()}


@pytest.mark.parametrize("merge", [[], ["--merge-only"]], ids=["re-run", "merge-only"])
def test_a_kept_summary_copied_from_the_sibling_arm_gives_the_arms_own_figures_in_sweep_csv(
    sweep: Path, merge: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    cell = sweep / CELL
    own = _row(sweep, "none")
    edited = {**json.loads((cell / "global" / "summary.json").read_text()),
              "final_loss": 0.25, "min_loss": 0.125, "max_grad_norm": 99.0}  # fmt: skip
    (cell / "none" / "summary.json").write_text(json.dumps(edited))
    with caplog.at_level(logging.WARNING, "andrea_diag.record"):
        code, output = _run(*SWEEP, *merge, "--out", str(sweep))
    assert code == 0, output
    row = _row(sweep, "none")
    for key in ("final_loss", "min_loss", "max_grad_norm"):
        assert row[key] == pytest.approx(own[key]), key  # was 0.25, 0.125, 99
    said = [
        r.getMessage() for r in caplog.records if "summary.json is another run" in r.getMessage()
    ]
    assert len(said) == 1 and "clip global (config.json: none)" in said[0], said
    arms = pd.read_csv(sweep / "arms.csv")
    assert not (arms.astype(str) == "0.25").any().any()


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_loss_in_a_kept_summary_gives_the_tables_figure(
    sweep: Path, value: str
) -> None:
    path = sweep / CELL / "none" / "summary.json"
    own = _row(sweep, "none")
    text = path.read_text()
    loss = json.dumps(json.loads(text)["final_loss"])
    path.write_text(text.replace(f'"final_loss": {loss}', f'"final_loss": {value}', 1))
    assert value in path.read_text()
    code, output = _run(*SWEEP, "--merge-only", "--out", str(sweep))
    assert code == 0, output
    assert _row(sweep, "none")["final_loss"] == pytest.approx(own["final_loss"])


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda a: (a / "summary.json").write_text("[1, 2]"), "holds a list, not a dict"),
        (lambda a: (a / "summary.json").write_text('{"arm": "none", '), "not valid JSON"),
        (lambda a: (a / "summary.json").write_text("[" * 100_000), "nested too deeply"),
        (lambda a: (a / "metrics.parquet").write_bytes(b"PAR1 not parquet"), "parquet"),
        (lambda a: (a / "summary.json").write_bytes(b'{"arm": "\xff"}'), "not UTF-8"),
    ],
    ids=["list", "torn", "nested", "bad-table", "not-utf8"],
)
@pytest.mark.parametrize("merge", [[], ["--merge-only"]], ids=["re-run", "merge-only"])
def test_a_kept_summary_that_cannot_be_read_is_one_line_naming_the_cell_and_nothing_is_written(
    sweep: Path, merge: list[str], damage, said: str
) -> None:
    damage(sweep / CELL / "none")
    before = _snapshot(sweep)
    code, output = _run(*SWEEP, *merge, "--out", str(sweep))
    assert code != 0
    line = _error_line(output)
    assert f"cell {CELL} arm none" in line and said in line, line
    assert _snapshot(sweep) == before  # sweep.json not marked running, sweep.csv not cut


def test_a_summary_of_wrong_types_and_huge_numbers_is_cleaned_in_the_row(sweep: Path) -> None:
    path = sweep / CELL / "none" / "summary.json"
    summary = json.loads(path.read_text())
    summary.pop("arm")  # not held to the table: the cleaning alone decides
    path.write_text(json.dumps({**summary, "final_loss": 10**400, "nonfinite_updates": 2**70,
                                "spikes": {"n_spikes": 1.5}, "status": ["done"],
                                "lockin": {"verdict": 7, "collapse": "yes"}}))  # fmt: skip
    code, output = _run(*SWEEP, "--merge-only", "--out", str(sweep))
    assert code == 0, output
    row = _row(sweep, "none")
    assert pd.isna(row["final_loss"]) and pd.isna(row["nonfinite_updates"])
    assert pd.isna(row["n_spikes"]) and pd.isna(row["lockin"]) and pd.isna(row["collapse"])
    assert row["status"] == "done"


def test_arm_summary_names_the_cell_of_an_unreadable_summary(tmp_path: Path) -> None:
    arm = tmp_path / "cell" / "none"
    arm.mkdir(parents=True)
    (arm / "summary.json").mkdir()  # a directory in the file's place
    with pytest.raises(UserError, match=r"cell c7 arm none.*not a regular file") as e:
        arm_summary(arm, "c7")
    assert "move the cell aside" in (e.value.hint or "")


def test_cascade_resume_of_a_finished_cascade_prints_the_arms_own_figures(sweep: Path) -> None:
    cell = sweep / CELL
    own = _row(sweep, "none")
    edited = {**json.loads((cell / "none" / "summary.json").read_text()), "final_loss": 0.25}
    (cell / "none" / "summary.json").write_text(json.dumps(edited))
    code, output = _run("cascade", "--resume", str(cell))
    assert code == 0, output
    line = next(x for x in output.splitlines() if x.strip().startswith("none") and "loss" in x)
    assert f"final loss {own['final_loss']:.3f}" in line, line  # was 0.250


def test_a_damaged_table_beside_a_kept_summary_keeps_the_tables_own_way_out(tmp_path: Path) -> None:
    """The summary is fine, the metrics.parquet beside it is not: the line names the cell and
    arm, and its hint is the table's (read metrics.jsonl instead), not to re-run the cell."""
    arm = tmp_path / "cell" / "none"
    arm.mkdir(parents=True)
    (arm / "config.json").write_text(json.dumps({"clip": "none", "size": "tiny"}))
    (arm / "summary.json").write_text(json.dumps({"arm": "none", "final_loss": 1.0}))
    (arm / "metrics.parquet").write_bytes(b"PAR1 not a table PAR1")
    with pytest.raises(
        UserError, match=r"cell c7 arm none: metrics.parquet .* not a readable"
    ) as e:
        arm_summary(arm, "c7")
    assert "metrics.jsonl" in (e.value.hint or "") and "move the cell" not in (e.value.hint or "")


def test_cascade_resume_of_a_cascade_json_nested_500_deep_is_one_line(sweep: Path) -> None:
    """Read, then written back with the resume's note: a RecursionError traceback."""
    path = sweep / CELL / "cascade.json"
    meta = json.loads(path.read_text())
    text = json.dumps(meta)[:-1] + ', "x": ' + "[" * 500 + "]" * 500 + "}"
    path.write_text(text)
    code, output = _run("cascade", "--resume", str(sweep / CELL))
    assert code != 0
    assert "nested too deeply" in _error_line(output)
    assert path.read_text() == text  # nothing written


def test_a_summary_that_cannot_be_opened_names_the_cell_once_with_the_cells_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OS error on the summary itself ("cannot read …: Permission denied", a message that
    does not start with the cell) is the summary's fault: the cell is named once and the hint
    is to move it aside (the message prefix decided it before, and prefixed the cell twice)."""
    from andrea_diag.experiments import arm_summary as mod

    arm = tmp_path / "none"
    arm.mkdir()
    (arm / "summary.json").write_text("{}")

    def refused(path: Path, what: str, **kw: object) -> object:
        raise UserError(f"cannot read {what} ({path}): Permission denied")

    monkeypatch.setattr(mod, "read_json", refused)
    with pytest.raises(UserError) as caught:
        mod.arm_summary(arm, cell="c7")
    assert caught.value.message.count("cell c7") == 1
    assert caught.value.hint == mod.CELL_HINT
