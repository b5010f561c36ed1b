"""A finished arm whose metrics table is gone or unreadable, while its ``summary.json`` counts
updates, was merged as done (``--merge-only`` or a re-run): the summary's figures (a hand-set
``final_loss`` 0.001 among them) entered ``sweep.csv`` with nothing to hold them to. Now it is
one line naming the cell and the arm, and nothing is rewritten.

    pytest tests/test_hostile_s33_merge.py -q
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from finished_sweep import CELL, SWEEP, strict_cli


def _damage(arm: Path, how: str) -> None:
    for name in ("metrics.parquet", "metrics.jsonl"):
        (arm / name).unlink(missing_ok=True)
    if how == "empty":
        (arm / "metrics.jsonl").write_text("")
    elif how == "garbage":
        (arm / "metrics.jsonl").write_text("not json\n" * 40)
    summary = json.loads((arm / "summary.json").read_text())
    summary["final_loss"] = 0.001
    (arm / "summary.json").write_text(json.dumps(summary))


@pytest.mark.parametrize("how", ["missing", "empty", "garbage"])
@pytest.mark.parametrize("merge", [["--merge-only"], []], ids=["merge-only", "re-run"])
def test_a_done_arm_without_a_readable_table_is_refused_not_merged(
    tmp_path: Path, finished_sweep: Path, how: str, merge: list[str]
) -> None:
    sweep = tmp_path / "s"
    shutil.copytree(finished_sweep, sweep, symlinks=True)
    _damage(sweep / CELL / "global", how)
    csv_before = (sweep / "sweep.csv").read_bytes()
    code, output = strict_cli(*SWEEP, *merge, "--out", str(sweep))
    lines = [ln for ln in output.splitlines() if ln.startswith(("error:", "hint:"))]
    assert code != 0, output
    assert lines[0].startswith(f"error: cell {CELL} arm global: its metrics table is missing or "
                               "holds no readable row, while summary.json counts 3 updates"), output  # fmt: skip
    assert lines[1] == (
        "hint: the arm's records are damaged: move its folder aside and train it again"
    ), output
    assert (sweep / "sweep.csv").read_bytes() == csv_before


def test_merge_only_into_a_file_says_it_is_a_file(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    code, output = strict_cli(*SWEEP, "--merge-only", "--out", str(afile))
    assert code == 2, output
    assert output.splitlines()[0] == f"error: --out {afile} is a file, not a directory", output
    assert afile.read_text() == "x"


@pytest.mark.parametrize("merge", [["--merge-only"], []], ids=["merge-only", "re-run"])
def test_cells_of_a_wider_grid_are_said_to_be_left_out_of_the_table(
    tmp_path: Path, finished_sweep: Path, merge: list[str]
) -> None:
    sweep = tmp_path / "s"
    shutil.copytree(finished_sweep, sweep, symlinks=True)
    other = CELL.replace("-s0", "-s1")
    shutil.copytree(sweep / CELL, sweep / other, symlinks=True)  # seed 1 of a wider grid
    code, output = strict_cli(*SWEEP, *merge, "--out", str(sweep))
    assert code == 0, output
    assert (f"1 cell folder(s) under --out are not in this grid and are left out of sweep.csv "
            f"({other})") in " ".join(output.split()), output  # fmt: skip
    assert (sweep / other / "cascade.json").exists()  # left where it is
