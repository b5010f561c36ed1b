"""The tiny finished sweep the hostile sweep tests plant things in (tests/test_hostile_sweep.py,
test_hostile_s30_sweep.py, test_hostile_s31b_sweep_rerun.py): its arguments, and the strict
CLI call those tests (and the ladder's) make. The sweep itself is the session fixture
``finished_sweep`` (conftest.py): trained once for every module, never changed (each test
plants things in a copy: ``shutil.copytree(..., symlinks=True)``)."""

from __future__ import annotations

from typer.testing import CliRunner

from andrea_diag.cli import app

CELL = "tiny-lr0.001-mn1-s0"  # the one cell of SWEEP: arms none and global, 3 updates
SWEEP = ["sweep", "--size", "tiny", "--lr", "1e-3", "--steps", "3", "--device", "cpu"]


def strict_cli(*args: str) -> tuple[int, str]:
    """(exit code, output) of one CLI call that must end without a traceback or an exception
    other than the CLI's own exit."""
    res = CliRunner().invoke(app, list(args))
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.output
