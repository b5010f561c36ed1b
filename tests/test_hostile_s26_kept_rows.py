"""A resumed run's kept rows are the run directory's word (round 26, from a hostile-dir audit).

A kept ``metrics.jsonl`` row holding an empty object (``"zz": {}``) ended a resumed run, after
its last update, in pyarrow's ``ArrowNotImplementedError`` ("struct type with no child field"):
a traceback, no ``summary.json``, no ``partial_summary.json``. The recorder cleans such a
column as it cleaned an integer past int64, and the run closes.
"""

from __future__ import annotations

import json
from pathlib import Path

from test_hostile_s22_monitor import _run

from andrea_diag.record import load_run


def test_a_kept_row_holding_an_empty_object_is_cleaned_and_the_resumed_run_closes(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path / "run").run_dir
    path = run / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[0]["zz"] = {}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    resumed = _run(run, updates=1, resume=True)
    assert resumed.summary is not None and (run / "metrics.parquet").exists()
    assert load_run(run)["metrics"]["update"].tolist() == [1, 2, 3]
