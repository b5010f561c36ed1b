"""A run's file swapped for a link out of the run between its check and its open (round 30).

``open_regular`` checked the path (a regular file, no link out of the run), then opened it
again by name, following links: a link to a file outside the run put there in between was
read (into a page, an export, a resumed run). What it opens now is refused if it is a link
(``O_NOFOLLOW``), or, for a link inside the run that passed the check, its checked target.

python -m pytest -q tests/test_hostile_s30_rundir.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from andrea_diag import rundir
from andrea_diag.errors import UserError


def test_a_file_swapped_for_a_link_out_after_its_check_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    secret = tmp_path / "secret.json"
    secret.write_text('{"secret": 1}')
    path = run / "summary.json"
    path.write_text('{"final_loss": 1.0}')
    checked = rundir.regular_file

    def swap_after_check(p: Path, what: str) -> Path:
        out = checked(p, what)
        os.unlink(p)
        os.symlink(secret, p)
        return out

    monkeypatch.setattr(rundir, "regular_file", swap_after_check)
    with pytest.raises(UserError, match=r"link out of its run|cannot read"):
        rundir.read_json(path, "the arm's summary", kind=dict)


def test_a_link_inside_the_run_is_still_read(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "summary.json").write_text('{"final_loss": 2.0}')
    (tmp_path / "summary.json").symlink_to("kept/summary.json")
    assert rundir.read_json(tmp_path / "summary.json", "summary", kind=dict) == {"final_loss": 2.0}
