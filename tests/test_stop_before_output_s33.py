"""A stop while a cascade's data is prepared (Ctrl-C, SIGTERM) said "continue with --resume
DIR" for a folder that was never made (session 33's audit). It says that nothing was written
yet; a stop once the run's folder exists keeps its advice.

    pytest tests/test_stop_before_output_s33.py -q
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.experiments import cascade
from andrea_diag.signals import Terminated

ARGS = ["cascade", "--size", "tiny", "--steps", "2", "--device", "cpu"]


@pytest.mark.parametrize(
    ("stop", "code", "said"),
    [
        (KeyboardInterrupt(), 130, "interrupted"),
        (Terminated(signal.SIGTERM), 143, "stopped by SIGTERM"),
    ],
)
def test_a_stop_while_the_data_is_prepared_advises_no_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: BaseException, code: int, said: str
) -> None:
    def stopped(*args: object, **kwargs: object) -> None:
        raise stop

    monkeypatch.setattr(cascade, "load_data", stopped)
    out = tmp_path / "run"
    res = CliRunner().invoke(app, [*ARGS, "--out", str(out)])
    assert res.exit_code == code, res.output
    assert f"{said}: nothing was written yet" in res.output, res.output
    assert "--resume" not in res.output and not out.exists()


def test_a_stop_once_the_folder_exists_keeps_the_resume_advice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stopped(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cascade, "train_arm", stopped)
    out = tmp_path / "run"
    res = CliRunner().invoke(app, [*ARGS, "--out", str(out)])
    assert res.exit_code == 130, res.output
    assert "interrupted: everything recorded so far is kept; continue with --resume" in " ".join(
        res.output.split()
    ), res.output
    assert out.is_dir()
