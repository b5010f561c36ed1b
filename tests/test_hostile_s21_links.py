"""Links in a run directory that go nowhere a reader can follow (round 21): a loop of symbolic
links at a file's or an arm's name is one ``error:`` line for ``report`` and ``export``, never
pathlib's RuntimeError traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile_dirs import (  # noqa: F401 (the *_fixture names are fixtures: run, cascade)
    cascade_fixture,
    one_line_error,
    run_fixture,
)

RUN_FILES = ["env.json", "data.json", "summary.json", "metrics.parquet", "events.jsonl"]


def loop(path: Path) -> None:
    """``path`` replaced by a link to itself (resolving it never ends)."""
    path.unlink(missing_ok=True)
    path.symlink_to(path.name)


def export(path: Path, tmp_path: Path) -> list[str]:
    return ["export", "--tensorboard", str(path), "--out", str(tmp_path / "tb")]


@pytest.mark.parametrize("name", RUN_FILES)
def test_a_file_linked_to_itself_is_one_line_for_report_and_export(
    run: Path, tmp_path: Path, name: str
) -> None:
    loop(run / name)
    for args in (["report", str(run)], export(run, tmp_path)):
        assert "loop of symbolic links" in one_line_error(*args)
    assert not (tmp_path / "tb").exists()


def test_an_arm_linked_to_itself_is_one_line_for_report_and_export(
    cascade: Path, tmp_path: Path
) -> None:
    for arm in ("none", "global"):
        target = cascade / arm
        target.rename(tmp_path / f"moved-{arm}")
        loop(target)
    for args in (["report", str(cascade)], export(cascade, tmp_path)):
        assert "loop of symbolic links" in one_line_error(*args)
