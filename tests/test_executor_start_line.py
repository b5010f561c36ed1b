"""The sweep's first line says how many cells run at once, and where: never more than there are
cells (a 4-cell sweep with ``--jobs 8`` said "8 at once" on the H100, 2026-12-07)."""

from andrea_diag.experiments.executor import ExecutorConfig, cells_at_once, start_line
from andrea_diag.experiments.gpu_busy import busy_line


def test_fewer_cells_than_slots_run_all_at_once_not_the_slot_count() -> None:
    line = start_line(4, ["0"] * 8, ExecutorConfig(jobs=8))
    assert "4 cells[/], 4 at once on GPU 0 (--jobs 8 per GPU)" in line


def test_more_cells_than_slots_run_the_slot_count_at_once_across_gpus() -> None:
    line = start_line(20, ["0", "0", "3", "3"], ExecutorConfig(jobs=2))
    assert "20 cells[/], 4 at once on GPUs 0, 3 (--jobs 2 per GPU)" in line


def test_cpu_and_scheduler_lines_name_their_place() -> None:
    assert "3 cells[/], 2 at once on the CPU (--jobs 2)" in start_line(
        3, [None, None], ExecutorConfig(jobs=2)
    )
    slurm = start_line(1, [None] * 16, ExecutorConfig(kind="slurm", jobs=16, partition="gpu"))
    assert "1 cell[/], 1 at once (slurm; --jobs 16 in flight)" in slurm


def test_cells_at_once_is_one_in_process_else_one_per_slot() -> None:
    assert cells_at_once(ExecutorConfig(jobs=1), "cpu") == 1  # in the sweep's own process
    assert cells_at_once(ExecutorConfig(jobs=4), "cpu") == 4
    assert cells_at_once(ExecutorConfig(kind="slurm", jobs=3), "cuda") == 3
    assert cells_at_once(ExecutorConfig(jobs=4, merge_only=True), "cpu") == 1  # trains nothing


def test_the_busy_line_advises_more_cells_not_more_jobs_when_all_ran_at_once() -> None:
    busy = {"pct_mean": 40.0, "n_samples": 8}
    assert busy_line(busy).endswith("more cells at once (--jobs) may raise throughput")
    told = busy_line(busy, all_at_once=True)
    assert "--jobs" not in told and "more cells in one sweep (seeds, lrs)" in told
    assert "--jobs" in busy_line({"pct_mean": 95.0, "n_samples": 8}, all_at_once=True)  # bound


def test_one_cell_is_one_cell_and_gpus_are_listed_in_number_order() -> None:
    assert "[bold]1 cell[/], 1 at once on the CPU" in start_line(1, [None], ExecutorConfig())
    line = start_line(4, ["10", "2"], ExecutorConfig(jobs=1))
    assert "on GPUs 2, 10 (--jobs 1 per GPU)" in line
