"""JSON nested deeper than any run writes, read from a run directory (round 30).

``json.loads`` parses up to the interpreter's recursion limit (about 1,000 levels); the code
that then walks the value recursively has less stack to spare. A side file nested 500 deep was
read, then ended a command in a RecursionError traceback where it was written back or walked;
a table row nested that deep refused the whole page ("unexpected shape"). A side file nested
past ``rundir.MAX_DEPTH`` is now one line; such a row is skipped as unreadable, as a torn
row is.

python -m pytest -q tests/test_hostile_s30_json.py
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from andrea_diag.errors import UserError
from andrea_diag.jsonl_read import read_jsonl
from andrea_diag.record import write_json
from andrea_diag.rundir import MAX_DEPTH, read_json, shallow


def _nested(depth: int, inner: str = "1") -> str:
    return '{"a": ' * depth + inner + "}" * depth


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 500, 900])
def test_a_side_file_nested_past_any_runs_is_one_line(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "cascade.json"
    path.write_text('{"arms": ["none"], "x": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(UserError, match="nested too deeply to be a run's JSON"):
        read_json(path, "cascade.json", kind=dict)


def test_a_side_file_as_deep_as_the_limit_is_read_and_written_back(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text(_nested(MAX_DEPTH - 1))
    value = read_json(path, "summary.json", kind=dict)
    write_json(tmp_path / "again.json", value)  # a 500-deep one was a RecursionError here
    assert json.loads((tmp_path / "again.json").read_text()) == value


def test_a_table_row_nested_past_any_runs_is_skipped_and_the_others_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "metrics.jsonl"
    rows = [{"update": 1, "loss": 3.0}, {"update": 2, "loss": 2.5}]
    deep = '{"update": 3, "source": ' + "[" * 600 + "]" * 600 + "}"
    path.write_text(json.dumps(rows[0]) + "\n" + deep + "\n" + json.dumps(rows[1]) + "\n")
    with caplog.at_level(logging.WARNING, "andrea_diag.record"):
        df = read_jsonl(path)
    assert df["update"].tolist() == [1, 2]
    assert any("skipped 1 unreadable line" in r.getMessage() for r in caplog.records)


def test_shallow_counts_dicts_and_lists_alike() -> None:
    assert shallow(json.loads(_nested(5)), most=6) == json.loads(_nested(5))
    with pytest.raises(RecursionError):
        shallow(json.loads("[" + _nested(5) + "]"), most=5)
