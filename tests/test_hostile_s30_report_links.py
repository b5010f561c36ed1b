"""``report`` on a cascade folder whose ``cascade.json`` is a broken link: one line naming that
file, where the folder used to read as a plain run with no config.json."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app


def _report(folder: Path) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["report", str(folder)])
    return res.exit_code, res.output + (repr(res.exception) if res.exit_code == 1 else "")


@pytest.mark.parametrize(
    ("target", "said"),
    [("/nonexistent/cascade.json", "link out of its run"), ("cascade.json", "loop")],
)
def test_a_cascade_json_that_is_a_broken_link_is_named_not_read_as_a_plain_run(
    tmp_path: Path, target: str, said: str
) -> None:
    (tmp_path / "cascade.json").symlink_to(target)
    code, out = _report(tmp_path)
    assert code == 2
    assert "cascade.json" in out and said in out
    assert "no config.json" not in out and "Traceback" not in out
