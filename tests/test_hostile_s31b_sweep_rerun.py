"""A sweep re-run on a folder someone changed (round 31b):

- A FIFO or a folder where the sweep writes a table (``sweep.csv``, ``arms.csv``, ...) was
  replaced by the rename without a word (a folder: the OS's words, after every cell ran); a
  FIFO at ``sweep.html`` was refused only after the cells trained. Now each is one line before
  any cell trains, and left there: the rule of the pages (``out_place.replaceable``).
- A cell whose cascade.json says done but whose arm lost its ``summary.json`` was kept as done,
  its arm a "not run" row of a sweep said done. Now the arm is continued, as ``cascade
  --resume`` continues an arm without a summary (from its checkpoints), with one line.

python -m pytest -q tests/test_hostile_s31b_sweep_rerun.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from finished_sweep import CELL, SWEEP
from finished_sweep import strict_cli as _run

GROWN = "tiny-lr0.001-mn1-s1"  # the cell a re-run with --seed 0,1 would train


@pytest.fixture
def sweep(finished_sweep: Path, tmp_path: Path) -> Path:
    """A private copy of the finished sweep, to plant things in."""
    return Path(shutil.copytree(finished_sweep, tmp_path / "s", symlinks=True))


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


@pytest.mark.parametrize("name", ["sweep.csv", "arms.csv", "gaps.csv", "sweep.html"])
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_fifo_or_folder_where_a_sweep_file_goes_is_one_line_before_any_cell_and_left_there(
    sweep: Path, name: str, kind: str
) -> None:
    place = sweep / name
    place.unlink()
    if kind == "fifo":
        os.mkfifo(place)
    else:
        place.mkdir()
    before = _files(sweep)
    code, output = _run(*SWEEP, "--seed", "0,1", "--out", str(sweep))
    assert code == 2 and output.count("error:") == 1, output
    assert "not a regular file" in output and name in output
    assert place.is_fifo() if kind == "fifo" else place.is_dir()
    assert _files(sweep) == before and not (sweep / GROWN).exists()  # nothing trained


def test_a_fifo_where_the_ladder_writes_its_table_is_one_line_before_any_cell(
    tmp_path: Path,
) -> None:
    out = tmp_path / "ladder"
    out.mkdir()
    os.mkfifo(out / "ladder.csv")
    code, output = _run("ladder", "--size", "tiny,tiny2", "--seed", "0", "--steps", "2",
                        "--device", "cpu", "--out", str(out))  # fmt: skip
    assert code == 2 and "not a regular file (a FIFO)" in output, output
    assert (out / "ladder.csv").is_fifo() and sorted(os.listdir(out)) == ["ladder.csv"]


def test_a_done_cell_whose_arm_lost_its_summary_is_continued_not_kept(sweep: Path) -> None:
    (sweep / CELL / "global" / "summary.json").unlink()
    kept = (sweep / CELL / "none" / "summary.json").read_bytes()
    code, output = _run(*SWEEP, "--out", str(sweep))
    assert code == 0, output
    assert "no summary.json" in output and "already done" not in output
    assert (sweep / CELL / "global" / "summary.json").is_file()
    assert (sweep / CELL / "none" / "summary.json").read_bytes() == kept  # the other arm kept
    rows = pd.read_csv(sweep / "sweep.csv").set_index("clip")
    assert list(rows["status"]) == ["done", "done"] and pd.notna(rows.loc["global", "final_loss"])


def test_a_merge_counts_a_cell_whose_arm_lost_its_summary_as_not_finished(sweep: Path) -> None:
    """--merge-only trains nothing: the cell is "not run", never a finished cell of one arm."""
    (sweep / CELL / "global" / "summary.json").unlink()
    code, output = _run(*SWEEP, "--seed", "0,1", "--merge-only", "--out", str(sweep))
    assert code == 2 and "nothing to merge" in output, output
    assert not (sweep / CELL / "global" / "summary.json").exists()
