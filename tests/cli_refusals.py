"""One refusal at the command line, checked the same way everywhere: the command's work never
starts, the output is one ``error:`` line (and at most a ``hint:``), and the folder it ran in
stays empty. Shared by the CLI bad-input test modules (``empty`` is a fixture: import it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app

runner = CliRunner()


def no_work_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command's work raises: a test passes only where the refusal came first."""

    def no_work(*a: Any, **k: Any) -> None:
        raise AssertionError("the work started")

    for target in (
        "andrea_diag.commands.run.run_cascade",
        "andrea_diag.experiments.sweep.run_sweep",
        "andrea_diag.experiments.ladder.run_ladder",
        "andrea_diag.bench.run_bench",
        "andrea_diag.bench.train.bench_train",
        "andrea_diag.experiments.accum_check.run_accum_check",
    ):
        monkeypatch.setattr(target, no_work)


def refused(args: list[str], monkeypatch: pytest.MonkeyPatch, cwd: Path) -> str:
    """The one ``error:`` line (plus at most a hint) of ``args`` run in ``cwd``, which must stay
    empty: nothing written, no --out folder made."""
    no_work_started(monkeypatch)
    monkeypatch.chdir(cwd)
    res = runner.invoke(app, args)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code != 0, res.output
    assert "Traceback" not in res.output and not isinstance(res.exception, AssertionError), (
        res.output
    )
    assert lines and lines[0].startswith("error:"), res.output
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint:")), res.output
    assert sorted(os.listdir(cwd)) == [], f"written before the refusal: {os.listdir(cwd)}"
    return lines[0]


@pytest.fixture(name="empty")
def empty_fixture(tmp_path: Path) -> Path:
    path = tmp_path / "cwd"
    path.mkdir()
    return path
