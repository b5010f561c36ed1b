"""Bad input refused in one line before anything is written: numbers int() reads only by its own
extensions, repeated or meaningless options, empty values, paths that cannot be what was meant
(review of the CLI's bad input, round 20)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app

runner = CliRunner()


def _no_work(monkeypatch: pytest.MonkeyPatch) -> None:
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


def _refused(args: list[str], monkeypatch: pytest.MonkeyPatch, cwd: Path) -> str:
    """The one ``error:`` line (plus at most a hint) of ``args`` run in ``cwd``, which must stay
    empty: nothing written, no --out folder made."""
    _no_work(monkeypatch)
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


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    path = tmp_path / "cwd"
    path.mkdir()
    return path


# ---- 7. a merge with nothing to merge ----


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "--size", "tiny", "--lr", "1e-3"],
        ["ladder", "--size", "tiny,tiny2", "--seed", "0"],
    ],
)
def test_merge_only_with_no_finished_cell_is_refused_with_no_page(
    args: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def no_training(*a: Any, **k: Any) -> None:
        raise AssertionError("a cell trained")

    monkeypatch.setattr("andrea_diag.experiments.sweep.run_cascade", no_training)
    out = tmp_path / "merged"
    res = runner.invoke(
        app, [*args, "--steps", "2", "--device", "cpu", "--merge-only", "--out", str(out)]
    )
    assert res.exit_code != 0, res.output
    assert "nothing to merge" in res.output and "Traceback" not in res.output
    assert not out.exists()
