"""The sweep's first line says how many cells run at once, and where: never more than there are
cells (a 4-cell sweep with ``--jobs 8`` said "8 at once" on the H100, 2026-12-07)."""

from andrea_diag.experiments.executor import ExecutorConfig, start_line


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
    assert "1 cells[/], 1 at once (slurm; --jobs 16 in flight)" in slurm
