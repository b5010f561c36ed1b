"""A run's JSONL table is parsed only where the memory free holds what it parses into (round
27, ``jsonl_read.read_jsonl``), by the rule ``rundir.read_json`` keeps for JSON files.

Before, any JSONL table under 2 GiB was parsed: each ``{}`` line is a dict whatever its bytes
(~24x), so 1 GiB of them in a planted ``metrics.jsonl`` held ~24 GiB, past a laptop's memory,
and ``report DIR`` ran until the OOM killer ended it without a word. The tests lower the
"memory free" instead of planting a gigabyte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_dirs import one_line_error, run_fixture  # noqa: F401 (run_fixture: the run)

from andrea_diag import jsonl_read, rundir
from andrea_diag.errors import UserError
from andrea_diag.runread import read_jsonl


def _never(text: str) -> None:
    raise AssertionError("a table past the memory free was parsed")


def test_a_jsonl_table_that_would_parse_past_the_memory_free_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("{}\n" * 100_000)  # 300 kB: ~24x that, parsed
    monkeypatch.setattr(rundir, "available_memory", lambda: 4 << 20)  # 4 MiB "free"
    monkeypatch.setattr(rundir, "JSON_FLOOR", 0)  # no 16 MiB floor: the file stays small
    monkeypatch.setattr(jsonl_read.json, "loads", _never)
    with pytest.raises(UserError, match=r"is 0\.3 MiB, more than 4\.0 MiB of free memory may "
                       r"parse \(0\.125 MiB\)"):  # fmt: skip
        read_jsonl(path)


def test_the_same_table_is_read_where_the_memory_free_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"update": i, "loss": 1.0}) + "\n" for i in range(1, 1001)))
    monkeypatch.setattr(rundir, "available_memory", lambda: 64 << 20)
    monkeypatch.setattr(rundir, "JSON_FLOOR", 0)
    assert read_jsonl(path)["update"].tolist() == list(range(1, 1001))


def test_a_table_under_the_floor_is_read_however_little_memory_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy host still reads a table of a run's size (the floor, as for JSON files)."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"update": i}) + "\n" for i in range(1, 20_001)))
    monkeypatch.setattr(rundir, "available_memory", lambda: 1 << 20)  # 32 kB parsable
    assert len(read_jsonl(path)) == 20_000


def test_report_of_a_run_whose_metrics_parse_past_the_memory_free_is_one_line(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (run / "metrics.parquet").unlink(missing_ok=True)  # the JSONL table is the one read
    (run / "metrics.jsonl").write_text("{}\n" * 100_000)
    monkeypatch.setattr(rundir, "available_memory", lambda: 4 << 20)
    monkeypatch.setattr(rundir, "JSON_FLOOR", 0)
    out = one_line_error("report", str(run))
    assert "metrics.jsonl" in out and "of free memory may parse" in out, out
    assert "free memory, then retry" in out, out
