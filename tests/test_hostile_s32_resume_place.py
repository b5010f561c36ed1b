"""``--resume`` holds a continued cascade to the rules a new one is (round 32).

``cascade --resume C/none/inner`` trained a stopped cascade planted inside the arm ``none`` of
cascade ``C`` and wrote its records, its batch plan and its page there: only a new cascade's
``--out`` was held to ``out_place.refuse_nested``. A folder at the cascade's ``report.html``
failed the command after the training, with the page's hint ("render the page again"). Both
are now one line before the data is read, with nothing trained or written; a sweep's cell is
still continued in place.

python -m pytest -q tests/test_hostile_s32_resume_place.py
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile_dirs import one_line_error
from stopped_cascade import stopped

from andrea_diag.errors import UserError
from andrea_diag.experiments.cascade_place import CASCADE_FILES, check_resumed

pytestmark = pytest.mark.slow  # the stopped cascade is a copy of one trained for the session


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def test_resume_of_a_cascade_inside_another_cascades_arm_is_refused_and_trains_nothing(
    finished_cascade: Path, tmp_path: Path
) -> None:
    outer = tmp_path / "outer"
    shutil.copytree(finished_cascade, outer)
    inner = stopped(finished_cascade, outer / "none")  # outer/none/c: a stopped cascade
    before = _digest(outer)
    said = one_line_error("cascade", "--resume", str(inner))
    assert f"is inside {outer / 'none'}, a run folder" in said
    assert "move the cascade out" in said  # the resume's own hint, not a new --out's
    assert "preparing data" not in said  # refused before the data is read
    said = one_line_error("cascade", "--size", "tiny", "--steps", "2", "--device", "cpu",
                          "--out", str(outer / "none" / "x"))  # fmt: skip
    assert "a run folder" in said and "preparing data" not in said  # a new one's too
    assert _digest(outer) == before  # nothing trained, nothing written
    assert not (inner / "none" / "summary.json").exists()


@pytest.mark.parametrize("name", CASCADE_FILES[1:])  # cascade.json's own reader says its line
@pytest.mark.parametrize(
    ("plant", "said"),
    [(lambda p: p.mkdir(), "(a folder)"), (lambda p: os.mkfifo(p), "(a FIFO)")],
    ids=["folder", "fifo"],
)
def test_resume_refuses_a_non_file_at_the_cascades_own_file_before_training(
    finished_cascade: Path, tmp_path: Path, name: str, plant: Callable[[Path], None], said: str
) -> None:
    out = stopped(finished_cascade, tmp_path)
    (out / name).unlink()
    plant(out / name)
    msg = one_line_error("cascade", "--resume", str(out))
    assert f"{out / name} is not a regular file {said}" in msg
    assert "re-run the same command" in msg and "render the page" not in msg
    assert not (out / "none" / "summary.json").exists()  # refused before the arm went on
    assert json.loads((out / "cascade.json").read_text())["status"] == "running"  # untouched


def test_a_sweeps_stopped_cell_may_still_be_resumed_in_place(
    finished_cascade: Path, tmp_path: Path
) -> None:
    sweep = tmp_path / "s"
    sweep.mkdir()
    cell = stopped(finished_cascade, sweep)  # s/c
    (sweep / "sweep.json").write_text(json.dumps({"cells": ["c"], "status": "running"}))
    check_resumed(cell, main=True)  # no error: the sweep names it as its cell
    (sweep / "sweep.json").write_text(json.dumps({"cells": ["other"], "status": "running"}))
    with pytest.raises(UserError, match=r"a sweep: it holds sweep\.json"):
        check_resumed(cell, main=True)
