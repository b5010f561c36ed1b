"""``report`` of a run whose summary says it finished beside a metrics table of no row (round
31): the line said "none: finished at update None of 12", an update number that is no number.
It now says the arm finished with no metric row recorded.

python -m pytest -q tests/test_hostile_s31_report.py
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hostile_dirs import one_line_error

from andrea_diag.report.banner import FINISHED, ArmStatus


def test_a_finished_run_with_an_empty_table_names_no_update(tmp_path: Path, make_run) -> None:
    run = make_run(tmp_path / "none", clip="none", n_updates=12)
    pq.write_table(pa.table({"update": pa.array([], pa.int64())}), run / "metrics.parquet")
    said = one_line_error("report", str(run))
    assert "no metric rows" in said
    assert "update None" not in said and "finished with no metric row recorded" in said


def test_a_finished_arm_with_rows_still_says_its_last_update() -> None:
    line = ArmStatus("none", FINISHED, last_update=12, steps=12).line()
    assert line == "none: finished at update 12 of 12"
