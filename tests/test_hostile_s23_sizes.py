"""A sweep's throughput count of a hostile cell (round 23): the count reads every kept arm's
``metrics.jsonl`` on a re-run or ``--merge-only``. One planted as a 40 GiB sparse file (it costs
its maker nothing) is skipped unread, as a FIFO or a link out of the run is; before, it was read
as one line of 40 GiB of zeros, until the memory ran out.
"""

from __future__ import annotations

from pathlib import Path

from andrea_diag.experiments.throughput import recorded_updates


def test_a_huge_sparse_metrics_table_is_skipped_by_the_throughput_count_unread(
    tmp_path: Path,
) -> None:
    cell = tmp_path / "cell"
    (cell / "none").mkdir(parents=True)
    path = cell / "none" / "metrics.jsonl"
    with open(path, "wb") as f:
        f.truncate(40 << 30)
    assert recorded_updates([cell], ["none"]) == 0
    assert path.stat().st_size == 40 << 30
