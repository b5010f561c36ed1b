"""CUDA MPS for sweeps and ladders (experiments/mps.py): a daemon started once and stopped once
per invocation, whatever ends it; a no-op without CUDA or with ``--mps off``; one line when it
cannot start. A stub ``nvidia-cuda-mps-control`` on PATH logs every call, so this runs on CPU.

python -m pytest -q tests/test_mps.py
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.errors import UserError
from andrea_diag.experiments import executor
from andrea_diag.experiments.mps import PIPE_VAR, mps_session

ARGS = ["sweep", "--size", "tiny", "--lr", "1e-3,1e-2", "--steps", "3", "--clip", "none",
        "--device", "cpu", "--jobs", "2"]  # fmt: skip

STUB = """#!/bin/sh
# a stand-in for nvidia-cuda-mps-control: logs each call (its args, its stdin) and succeeds
if [ "$1" = "-d" ]; then
  echo "start $CUDA_MPS_PIPE_DIRECTORY" >> "{log}"
  exit {start_rc}
fi
read cmd
echo "$cmd $CUDA_MPS_PIPE_DIRECTORY" >> "{log}"
"""


@pytest.fixture
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install the stub on PATH; returns a function giving the logged calls."""

    def install(start_rc: int = 0):
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        log = tmp_path / "mps.log"
        exe = bin_dir / "nvidia-cuda-mps-control"
        exe.write_text(STUB.format(log=log, start_rc=start_rc))
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.delenv(PIPE_VAR, raising=False)
        monkeypatch.setattr("andrea_diag.experiments.mps.DEFAULT_PIPE", str(tmp_path / "none"))
        return lambda: (
            [ln.split()[0] for ln in log.read_text().splitlines()] if log.exists() else []
        )

    return install


def _said(res) -> str:
    """The command's output with the console's line wrapping undone."""
    return " ".join(res.output.split())


def _final_losses(out: Path) -> dict[str, float]:
    table = pd.read_csv(out / "sweep.csv")
    return dict(zip(table["cell"], table["final_loss"], strict=True))


@pytest.mark.slow
def test_mps_auto_without_cuda_and_mps_off_are_no_ops_that_change_nothing(stub, tmp_path):
    calls = stub()
    runner = CliRunner()
    auto = runner.invoke(app, [*ARGS, "--out", str(tmp_path / "auto")])
    off = runner.invoke(app, [*ARGS, "--mps", "off", "--out", str(tmp_path / "off")])
    assert auto.exit_code == 0 and off.exit_code == 0, auto.output + off.output
    assert calls() == []  # no CUDA here: the daemon was never asked for
    assert _final_losses(tmp_path / "auto") == _final_losses(tmp_path / "off")


@pytest.mark.slow
def test_on_cuda_the_daemon_is_started_once_and_stopped_once(stub, tmp_path, monkeypatch):
    calls = stub()
    monkeypatch.setattr(executor, "uses_cuda", lambda device: True)  # cells still run on CPU
    res = CliRunner().invoke(app, [*ARGS, "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert calls() == ["start", "quit"]
    assert "CUDA MPS daemon started" in _said(res) and "CUDA MPS daemon stopped" in _said(res)
    assert PIPE_VAR not in os.environ  # the sweep's own environment is restored


@pytest.mark.slow
def test_a_crashed_cell_still_stops_the_daemon(stub, tmp_path, monkeypatch):
    calls = stub()
    monkeypatch.setattr(executor, "uses_cuda", lambda device: True)
    out = tmp_path / "s"
    cell = out / "tiny-lr0.01-mn1-s0"  # a started cell whose checkpoint is torn: it fails
    (cell / "none" / "checkpoints").mkdir(parents=True)
    (cell / "none" / "checkpoints" / "ckpt-0000002.pt").write_bytes(b"torn")
    (cell / "cascade.json").write_text(
        json.dumps({"arms": ["none"], "steps": 3, "recipe": "v1", "status": "running"})
    )
    res = CliRunner().invoke(app, [*ARGS, "--out", str(out)])
    assert res.exit_code != 0 and "1 of 2 sweep cells crashed" in _said(res)
    assert calls() == ["start", "quit"]


def test_an_interrupted_sweep_still_stops_the_daemon(stub, tmp_path, monkeypatch):
    calls = stub()
    monkeypatch.setattr(executor, "uses_cuda", lambda device: True)

    def interrupted(*args, **kwargs):
        assert calls() == ["start"]  # the daemon is up while the cells run
        raise KeyboardInterrupt

    monkeypatch.setattr(executor, "_run_in_slots", interrupted)
    res = CliRunner().invoke(app, [*ARGS, "--out", str(tmp_path / "s")])
    assert res.exit_code == 130
    assert calls() == ["start", "quit"]


@pytest.mark.slow
def test_a_daemon_that_cannot_start_is_one_line_and_the_cells_run_without_it(
    stub, tmp_path, monkeypatch
):
    calls = stub(start_rc=1)
    monkeypatch.setattr(executor, "uses_cuda", lambda device: True)
    res = CliRunner().invoke(app, [*ARGS, "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    said = _said(res)
    assert "CUDA MPS could not start" in said and "cells run without it" in said
    assert calls() == ["start"]  # nothing to stop
    assert len(_final_losses(tmp_path / "s")) == 2


def test_a_running_daemon_is_used_not_started_again(stub, tmp_path, monkeypatch):
    calls = stub()
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    (pipe / "control").touch()
    monkeypatch.setenv(PIPE_VAR, str(pipe))
    with mps_session("auto", cuda=True, jobs=4, console=Console(quiet=True)) as state:
        assert state.active and not state.started
    assert calls() == []


def test_mps_on_without_cuda_or_a_bad_mode_is_one_clear_error(stub, tmp_path):
    stub()
    res = CliRunner().invoke(app, [*ARGS, "--mps", "on", "--out", str(tmp_path / "s")])
    assert res.exit_code != 0 and "--mps on needs cells on a CUDA device" in _said(res)
    res = CliRunner().invoke(app, [*ARGS, "--mps", "sometimes", "--out", str(tmp_path / "t")])
    assert res.exit_code != 0 and "unknown --mps 'sometimes'" in _said(res)
    assert "Traceback" not in res.output
    with pytest.raises(UserError), mps_session("on", cuda=False, jobs=2, console=Console()):
        pass


@pytest.mark.slow
def test_ladder_takes_jobs_and_mps(stub, tmp_path, monkeypatch):
    calls = stub()
    monkeypatch.setattr(executor, "uses_cuda", lambda device: True)
    res = CliRunner().invoke(app, ["ladder", "--size", "tiny,tiny2", "--seed", "0", "--steps",
                                   "2", "--device", "cpu", "--jobs", "2",
                                   "--out", str(tmp_path / "l")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert calls() == ["start", "quit"]
    assert "2 at once" in _said(res)
