"""``--jobs auto`` (experiments/auto_jobs.py), the default of sweep and ladder: many cells per GPU
by model size and GPU memory, one at a time on the CPU and under submitit.

python -m pytest -q tests/test_auto_jobs.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import RunConfig
from andrea_diag.experiments import auto_jobs as aj
from andrea_diag.experiments import sweep as sweep_mod
from andrea_diag.experiments.executor import ExecutorConfig
from andrea_diag.experiments.sweep import SweepSpec

H200 = 140 * aj.GIB


def _cfg(size: str) -> RunConfig:
    return RunConfig(size=size).resolve()


def test_cells_per_gpu_are_the_measured_plateaus_by_model_size() -> None:
    assert aj.cells_per_gpu([_cfg("12m")], H200)[0] == aj.CELLS_SMALL == 8
    assert aj.cells_per_gpu([_cfg("30m")], H200)[0] == 8  # 34.4M: under the 40M line
    assert aj.cells_per_gpu([_cfg("60m")], H200)[0] == 4
    assert aj.cells_per_gpu([_cfg("120m")], H200)[0] == aj.CELLS_LARGE == 4
    jobs, why = aj.cells_per_gpu([_cfg("120m")], None)  # memory unknown: the size's plateau
    assert jobs == 4 and why == "120m, 99M parameters"


def test_cells_per_gpu_fit_the_smallest_gpus_memory_and_never_drop_to_zero() -> None:
    jobs, why = aj.cells_per_gpu([_cfg("120m")], 24 * aj.GIB)
    assert jobs == 2 and why.endswith("; 24 GiB per GPU")
    assert 2 * aj.cell_bytes(_cfg("120m").model.n_params()) <= 0.9 * 24 * aj.GIB
    assert aj.cells_per_gpu([_cfg("12m")], 16 * aj.GIB)[0] == 3
    assert aj.cells_per_gpu([_cfg("120m")], 4 * aj.GIB)[0] == 1  # too small even for one: 1


def test_a_cells_planned_memory_covers_every_ladder_peak_measured_on_the_h200() -> None:
    # the largest cuda_max_allocated per rung over reports/ladder/*/summary.json (GiB)
    measured = {"12m": 1.88, "30m": 3.02, "60m": 4.70, "120m": 6.96}
    for size, peak in measured.items():
        assert aj.cell_bytes(_cfg(size).model.n_params()) >= peak * aj.GIB + aj.CELL_OVERHEAD


def test_a_ladder_is_sized_for_its_largest_rung() -> None:
    assert aj.cells_per_gpu([_cfg("12m"), _cfg("120m"), _cfg("30m")], H200)[0] == 4


def test_auto_jobs_is_one_cell_at_a_time_on_the_cpu_and_under_submitit() -> None:
    cells = [_cfg("12m")]
    assert aj.auto_jobs("local", False, cells) == (1, "one cell at a time on the CPU")
    assert aj.auto_jobs("slurm", True, cells) == (1, "one job in flight with --executor slurm")


def test_auto_jobs_on_a_gpu_reads_the_smallest_visible_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aj, "smallest_gpu_memory", lambda: 24 * aj.GIB)
    jobs, why = aj.auto_jobs("local", True, [_cfg("120m")])
    assert jobs == 2 and why == "2 cells per GPU (120m, 99M parameters; 24 GiB per GPU)"


def test_a_sweep_on_a_gpu_resolves_auto_to_cells_side_by_side(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sweep_mod, "uses_cuda", lambda device: True)
    monkeypatch.setattr(aj, "smallest_gpu_memory", lambda: H200)
    spec = SweepSpec(sizes=["12m"], executor=ExecutorConfig(auto_jobs=True))
    console = Console(record=True, width=200)
    resolved = sweep_mod._resolve_jobs(spec, sweep_mod.cells(spec), console)
    assert resolved.executor.jobs == 8 and not resolved.executor.in_process
    assert resolved.executor.auto_jobs  # recorded in sweep.json's throughput as jobs_auto
    assert "--jobs auto: 8 cells per GPU (12m, 18M parameters; 140 GiB per GPU)" in (
        console.export_text()
    )
    assert spec.executor.jobs == 1  # the caller's spec is not changed
    given = SweepSpec(sizes=["12m"], executor=ExecutorConfig(jobs=3))
    assert sweep_mod._resolve_jobs(given, sweep_mod.cells(given), console) is given
    merge = SweepSpec(sizes=["12m"], executor=ExecutorConfig(auto_jobs=True, merge_only=True))
    assert sweep_mod._resolve_jobs(merge, sweep_mod.cells(merge), console).executor.jobs == 1


def test_a_default_sweep_on_the_cpu_runs_one_cell_at_a_time_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "s"
    args = ["sweep", "--size", "tiny", "--lr", "1e-3", "--steps", "2", "--clip", "none",
            "--device", "cpu", "--out", str(out)]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "--jobs auto: one cell at a time on the CPU" in res.output
    tp = json.loads((out / "sweep.json").read_text())["throughput"]
    assert tp["jobs"] == 1 and tp["jobs_auto"] is True and tp["executor"] == "local"


def test_jobs_auto_is_case_blind_and_a_number_is_kept() -> None:
    from andrea_diag.commands.executor_options import parse_jobs

    assert parse_jobs("AUTO") is None and parse_jobs(" auto ") is None
    assert parse_jobs("12") == 12
