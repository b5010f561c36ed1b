"""Sweeps that run cells side by side (experiments/executor.py): one process per cell, the run
directory the only channel back, a failed cell leaving the others alone, resume unchanged, and
the aggregate updates per second in sweep.json.

python -m pytest -q tests/test_sweep_jobs.py

On CPU, ``--jobs 2`` runs two cells at once on the CPU; submitit's local executor (the test
extra installs submitit) exercises the Slurm path's contract without a cluster.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
from nvml_stub import fake_nvml
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.experiments.executor import ExecutorConfig, device_slots
from andrea_diag.experiments.gpu_busy import busy_line, cell_gpus, gpu_busy
from andrea_diag.telemetry import Telemetry

ARGS = ["sweep", "--size", "tiny", "--lr", "1e-3,1e-2", "--steps", "4", "--clip", "none",
        "--device", "cpu"]  # fmt: skip
CELLS = ("tiny-lr0.001-mn1-s0", "tiny-lr0.01-mn1-s0")


def test_cells_spread_over_every_visible_gpu_jobs_per_gpu() -> None:
    assert device_slots(2, True, "3,5", 8) == ["3", "3", "5", "5"]  # CUDA_VISIBLE_DEVICES kept
    assert device_slots(1, True, None, 2) == ["0", "1"]  # no variable: every GPU counted
    assert device_slots(3, False, None, 0) == [None, None, None]  # the CPU: N cells at once
    assert device_slots(2, True, "", 0) == [None, None]  # an empty list hides every GPU


def test_cells_on_the_cpu_elsewhere_or_merged_have_no_gpu_to_read() -> None:
    assert cell_gpus(ExecutorConfig(jobs=4), "cpu") == []
    assert cell_gpus(ExecutorConfig(kind="slurm", jobs=4), "cuda") == []  # the scheduler's GPUs
    assert cell_gpus(ExecutorConfig(merge_only=True), "cuda") == []  # a merge trains nothing


def test_the_cells_gpus_are_found_in_nvml_by_uuid_whatever_cudas_numbering(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CUDA numbers the visible GPUs (here NVML's 2 and 0, in that order); NVML every GPU of the
    host. One cell at a time reads the process's current GPU; side by side, every visible one."""
    import torch

    uuids = ["GPU-0000-a", "GPU-0000-b", "GPU-0000-c"]
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(util=[50], n_gpus=3, uuids=uuids))
    cuda_sees = ["0000-c", "0000-a"]  # torch gives the UUID without NVML's prefix
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(cuda_sees))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: types.SimpleNamespace(uuid=cuda_sees[i]))  # fmt: skip
    assert cell_gpus(ExecutorConfig(jobs=1), "cuda") == [0]
    assert cell_gpus(ExecutorConfig(jobs=4), "auto") == [2, 0]
    cuda_sees[1] = "MIG-0000-x"  # a GPU NVML does not list by that UUID: not read
    assert cell_gpus(ExecutorConfig(jobs=4), "cuda") == [2]


def _read(per_gpu: dict[int, list[float]]) -> Telemetry:
    """A sampler that has read ``per_gpu`` (NVML index -> utilization readings)."""
    tel = Telemetry(indices=list(per_gpu))
    for index, values in per_gpu.items():
        tel.by_index[index] = [{"gpu_util_pct": v, "temp_c": 40} for v in values]
    return tel


def test_gpu_busy_pools_every_gpus_samples_and_the_least_busy_gpu_decides_the_line() -> None:
    assert gpu_busy(Telemetry(indices=[])) is None  # nothing read: no key
    assert gpu_busy(_read({0: []})) is None
    assert gpu_busy(Telemetry(indices=[0])) is None
    busy = gpu_busy(_read({0: [100, 98, 99, 99], 5: [40, 60]}))
    assert busy is not None
    assert (busy["pct_mean"], busy["pct_min"], busy["pct_max"], busy["n_samples"]) == (
        pytest.approx(82.7), 40, 100, 6)  # fmt: skip
    assert busy["devices"] == {
        "0": {"pct_mean": 99.0, "pct_min": 98, "pct_max": 100, "n_samples": 4},
        "5": {"pct_mean": 50.0, "pct_min": 40, "pct_max": 60, "n_samples": 2},
    }
    line = busy_line(busy)
    assert line.startswith("GPU busy 83% of the sweep (NVML, 6 samples; by GPU: 0 99%, 5 50%)")
    assert "no kernel ran 50% of the time on GPU 5; more cells at once (--jobs) may" in line
    both = busy_line(gpu_busy(_read({0: [95], 1: [91]})) or {})
    assert "a kernel ran nearly all the time" in both


def test_a_card_without_utilization_gives_no_gpu_busy() -> None:
    tel = Telemetry(indices=[0])
    tel.by_index[0] = [{"temp_c": 40, "power_w": 200.0}]  # read, but no utilization
    assert gpu_busy(tel) is None


def _break_cell(cell: Path) -> None:
    """A started cell whose arm's checkpoint is torn: its process fails when it resumes."""
    (cell / "none" / "checkpoints").mkdir(parents=True)
    (cell / "none" / "checkpoints" / "ckpt-0000002.pt").write_bytes(b"torn")
    meta = {"arms": ["none"], "steps": 4, "recipe": "v1", "status": "running"}
    (cell / "cascade.json").write_text(json.dumps(meta))


def test_parallel_cells_a_failed_one_leaves_the_others_and_a_rerun_finishes_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "s"
    _break_cell(out / CELLS[1])
    res = CliRunner().invoke(app, [*ARGS, "--jobs", "2", "--out", str(out)])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert f"1 of 2 sweep cells crashed: {CELLS[1]}" in res.output
    assert "cannot be read" in res.output  # the child's error, read back from its directory
    table = pd.read_csv(out / "sweep.csv")
    assert table.set_index("cell")["status"].to_dict() == {CELLS[0]: "done", CELLS[1]: "crashed"}
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["status"] == "crashed" and list(meta["crashed_cells"]) == [CELLS[1]]
    tp = meta["throughput"]
    assert tp["updates"] == 4 and tp["jobs"] == 2 and tp["executor"] == "local"
    assert tp["updates_per_s"] == pytest.approx(tp["updates"] / tp["wall_s"], rel=1e-2)
    assert "updates/s aggregate" in (out / "sweep.html").read_text()
    # the finished cell's page, rendered by the sweep (the command's after_cell) as it ended
    assert "<html" in (out / CELLS[0] / "report.html").read_text()
    assert not (out / CELLS[1] / "report.html").exists()

    # the torn checkpoint removed: the re-run keeps the finished cell and finishes the other
    done = out / CELLS[0] / "none" / "metrics.jsonl"
    before = done.stat().st_mtime_ns
    (out / CELLS[1] / "none" / "checkpoints" / "ckpt-0000002.pt").unlink()
    res = CliRunner().invoke(app, [*ARGS, "--jobs", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert done.stat().st_mtime_ns == before
    table = pd.read_csv(out / "sweep.csv")
    assert (table["status"] == "done").all() and len(table) == 2
    assert json.loads((out / "sweep.json").read_text())["throughput"]["updates"] == 4
    assert (out / CELLS[1] / "report.html").is_file()  # the cell finished now has its page


def test_submitit_local_executor_runs_cells_collects_results_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip("submitit")
    out = tmp_path / "s"
    cmd = [*ARGS, "--executor", "submitit-local", "--jobs", "2", "--out", str(out)]
    res = CliRunner().invoke(app, cmd)
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out / "sweep.csv")
    assert sorted(table["cell"]) == list(CELLS) and (table["status"] == "done").all()
    assert json.loads((out / "sweep.json").read_text())["throughput"]["updates"] == 8

    # one cell's arm stopped before its end: the re-run continues it from its checkpoint
    kept = out / CELLS[0] / "none" / "metrics.jsonl"
    before = kept.stat().st_mtime_ns
    cell = out / CELLS[1]
    meta = json.loads((cell / "cascade.json").read_text())
    (cell / "cascade.json").write_text(json.dumps({**meta, "status": "running"}))
    (cell / "none" / "summary.json").unlink()
    res = CliRunner().invoke(app, cmd)
    assert res.exit_code == 0, res.output
    assert kept.stat().st_mtime_ns == before
    assert len(pd.read_parquet(cell / "none" / "metrics.parquet")) == 4  # no duplicate rows
    assert "continuing from ckpt-0000003.pt" in _newest_stderr(out / "cells").read_text()
    assert len(list((out / "cells").glob("submitit-*"))) == 2  # a fresh folder per invocation


def _newest_stderr(cells: Path) -> Path:
    """The newest submitit job's stderr file, in any invocation's folder under ``cells``."""
    return max(cells.glob("submitit-*/*_log.err"), key=lambda p: p.stat().st_mtime_ns)


def test_unknown_executor_and_zero_jobs_are_one_clear_line(tmp_path: Path) -> None:
    for extra, msg in ((["--executor", "pbs"], "unknown --executor 'pbs'"),
                       (["--jobs", "0"], "--jobs must be from 1 to 256 (or auto), got 0"),
                       (["--jobs", "two"], "--jobs takes a number or auto, got 'two'")):  # fmt: skip
        res = CliRunner().invoke(app, [*ARGS, *extra, "--out", str(tmp_path / "s")])
        assert res.exit_code != 0 and "Traceback" not in res.output
        assert msg in res.output and res.output.count("error:") == 1


@pytest.mark.parametrize("how", [["--jobs", "2"], ["--executor", "submitit-local", "--jobs", "2"]])
def test_merge_only_submits_nothing_whatever_the_executor(tmp_path: Path, how: list[str]) -> None:
    if "submitit-local" in how:
        pytest.importorskip("submitit")
    out = tmp_path / "s"
    one = [a if a != "1e-3,1e-2" else "1e-3" for a in ARGS]  # one finished cell to merge
    first = CliRunner().invoke(app, [*one, "--out", str(out)])
    assert first.exit_code == 0, first.output
    res = CliRunner().invoke(app, [*ARGS, *how, "--merge-only", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert not (out / CELLS[1]).exists()  # the other cell not trained, not even started
    status = pd.read_csv(out / "sweep.csv").set_index("cell")["status"]
    assert status[CELLS[0]] == "done" and status[CELLS[1]] == "not run"
