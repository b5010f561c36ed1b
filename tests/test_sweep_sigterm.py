"""SIGTERM (what Slurm, Kubernetes and ``timeout`` send) to ``sweep --jobs 2``: the sweep stops its
cells (their process groups get SIGTERM), waits for them, exits 143, leaves no orphan, and a
re-run finishes to the same numbers as a sweep that was never stopped.

python -m pytest -q tests/test_sweep_sigterm.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

ARGS = ["sweep", "--size", "tiny", "--lr", "1e-3,1e-2", "--steps", "40", "--clip", "none",
        "--device", "cpu", "--jobs", "2", "--checkpoint-every", "5", "--flush-every", "1",
        "--plotly", "shared"]  # fmt: skip
CELLS = ("tiny-lr0.001-mn1-s0", "tiny-lr0.01-mn1-s0")


def _cli(out: Path) -> list[str]:
    return [sys.executable, "-m", "andrea_diag.cli", *ARGS, "--out", str(out)]


def _rows(path: Path) -> int:
    return sum(1 for _ in open(path, "rb")) if path.is_file() else 0


def _cell_processes(out: Path) -> list[int]:
    """PIDs of live processes whose command line names this sweep's cell files."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if "andrea_diag.experiments.executor" in cmd and str(out) in cmd and state != "Z":
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow
def test_sigterm_to_a_parallel_sweep_stops_its_cells_and_a_rerun_matches(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "stopped"
    proc = subprocess.Popen(_cli(out), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while any(_rows(out / c / "none" / "metrics.jsonl") < 8 for c in CELLS):
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "the cells never got going"
        time.sleep(0.2)
    assert len(_cell_processes(out)) == 2
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=180)[0].decode()
    assert proc.returncode == 143, output
    assert "Traceback" not in output
    assert _cell_processes(out) == []  # no cell left running as an orphan
    for cell in CELLS:
        assert (out / cell / "none" / "partial_summary.json").is_file()
        assert not (out / cell / "none" / "summary.json").exists()  # it was really cut short
    rerun = subprocess.run(_cli(out), env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    whole = tmp_path / "whole"
    ref = subprocess.run(_cli(whole), env=env, capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    for cell in CELLS:
        a = pd.read_json(out / cell / "none" / "metrics.jsonl", lines=True)
        b = pd.read_json(whole / cell / "none" / "metrics.jsonl", lines=True)
        assert list(a["update"]) == list(range(1, 41))
        pd.testing.assert_series_equal(a["loss"], b["loss"])
        pd.testing.assert_series_equal(a["grad_norm"], b["grad_norm"])
