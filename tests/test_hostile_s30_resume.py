"""``--resume`` of a run whose table the checkpoint counts is something else now (round 30).

A FIFO, a folder or a dangling link where ``metrics.jsonl`` was read as an empty table: the
line said the file was "shorter (0 bytes) than checkpoint ckpt-… says", sending the user to
look for lost rows. It now says what is there.

python -m pytest -q tests/test_hostile_s30_resume.py
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from andrea_diag.errors import UserError
from andrea_diag.experiments.resume import check_rows

ROWS = b'{"update": 1}\n{"update": 2}\n'


@pytest.mark.parametrize(
    ("plant", "said"),
    [
        (lambda p: os.mkfifo(p), "is not a regular file"),
        (lambda p: p.mkdir(), "is not a regular file"),
        (lambda p: p.symlink_to("gone.jsonl"), "is missing"),
    ],
    ids=["fifo", "folder", "dangling-link"],
)
def test_a_counted_table_that_is_no_file_is_said_as_what_it_is(
    tmp_path: Path, plant: Callable[[Path], None], said: str
) -> None:
    plant(tmp_path / "metrics.jsonl")
    with pytest.raises(UserError) as e:
        check_rows(tmp_path, tmp_path / "ckpt-0000002.pt", {"metrics.jsonl": len(ROWS)})
    assert said in e.value.message and "shorter" not in e.value.message, e.value.message


def test_a_counted_table_that_is_whole_passes_and_an_absent_one_is_empty(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_bytes(ROWS)
    check_rows(tmp_path, tmp_path / "c.pt", {"metrics.jsonl": len(ROWS), "events.jsonl": 0})
    with pytest.raises(UserError, match=r"shorter \(0 bytes\)"):
        check_rows(tmp_path, tmp_path / "c.pt", {"events.jsonl": 5})


def test_a_table_that_cannot_be_cut_back_is_one_line_and_keeps_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that refuses the truncate (read-only remount, EIO) was an OSError traceback."""
    import errno

    from andrea_diag import jsonl

    path = tmp_path / "metrics.jsonl"
    writer = jsonl.JsonlWriter(path)
    writer.write_many([{"update": 1}, {"update": 2}])
    kept = path.read_bytes()

    def refuse(fd: int, size: int) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(jsonl.os, "ftruncate", refuse)
    with pytest.raises(UserError, match=r"cannot cut .*metrics.jsonl back to its checkpoint"):
        writer.rewind(len(kept) // 2)
    monkeypatch.undo()
    writer.close()
    assert path.read_bytes() == kept


def test_an_arm_is_moved_aside_past_a_dangling_link_at_the_first_free_name(
    tmp_path: Path,
) -> None:
    from andrea_diag.experiments.resume import move_aside

    arm = tmp_path / "none"
    arm.mkdir()
    (arm / "metrics.jsonl").write_bytes(ROWS)
    (tmp_path / "none.incomplete-1").symlink_to("nowhere")
    aside = move_aside(arm)
    assert aside == tmp_path / "none.incomplete-2"
    assert (aside / "metrics.jsonl").read_bytes() == ROWS  # kept, not lost
    assert os.path.islink(tmp_path / "none.incomplete-1")  # not ours: left alone
