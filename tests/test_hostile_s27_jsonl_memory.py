"""A run's JSONL table is parsed only where the memory free holds what its rows will hold
(round 27, ``jsonl_read.read_jsonl``): each line's cost is estimated from its text before it is
parsed (``parsed_bytes``), and the running total must stay under half the memory free.

Before, any JSONL table under 2 GiB was parsed: each ``{}`` line is a dict whatever its bytes
(~24x), so 1 GiB of them in a planted ``metrics.jsonl`` held ~24 GiB, past a laptop's memory,
and ``report DIR`` ran until the OOM killer ended it without a word. A rule by bytes strict
enough for that (read_json's 32x) refused the writer's own long table at close, losing the
run's summary (found by review): real rows hold ~3x their bytes. The tests lower the "memory
free" instead of planting a gigabyte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_dirs import one_line_error, run_fixture  # noqa: F401 (run_fixture: the run)

from andrea_diag import jsonl_read, rundir
from andrea_diag.errors import UserError
from andrea_diag.runread import read_jsonl

METRICS_ROW = {**{f"layer_gn/h{i:02d}.attn": 0.123456789 for i in range(150)}, "loss": 3.5}


def _never(text: str) -> None:
    raise AssertionError("a row past the memory budget was parsed")


def _free(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    monkeypatch.setattr(rundir, "available_memory", lambda: free)
    monkeypatch.setattr(rundir, "JSON_FLOOR", 0)  # no 16 MiB floor: the files stay small


def test_a_table_of_empty_rows_past_half_the_memory_free_is_refused_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("{}\n" * 100_000)  # 300 kB of text, ~7 MB of dicts
    _free(monkeypatch, 4 << 20)  # 2 MiB budget: the first ~9,000 rows fit
    seen = []
    monkeypatch.setattr(jsonl_read.json, "loads", lambda text: seen.append(text) or {})
    with pytest.raises(UserError, match=r"rows would hold more than 2\.0 MiB of memory, past "
                       r"half the memory free \(2\.0 MiB\)"):  # fmt: skip
        read_jsonl(path)
    assert 0 < len(seen) < 10_000  # stopped at the budget, not after the whole file


def test_a_real_metrics_table_of_the_same_bytes_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule is by what rows hold, not by bytes: 2.9 MB of real metrics rows (~3x that,
    parsed) read with 64 MiB free, where read_json's bytes rule (free / 32 = 2 MiB) refused
    them."""
    path = tmp_path / "metrics.jsonl"
    line = json.dumps(METRICS_ROW)
    path.write_text("".join(json.dumps({"update": i, **METRICS_ROW}) + "\n" for i in range(1, 701)))
    assert path.stat().st_size > 2 << 20 and len(line) > 4000
    _free(monkeypatch, 64 << 20)
    assert read_jsonl(path)["update"].tolist() == list(range(1, 701))


def test_a_single_line_bomb_is_refused_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One row of nested empty lists: ~21x its bytes, counted from its text."""
    path = tmp_path / "events.jsonl"
    path.write_text('{"a": [' + ",".join(["[]"] * 100_000) + "]}\n")
    _free(monkeypatch, 4 << 20)
    monkeypatch.setattr(jsonl_read.json, "loads", _never)
    with pytest.raises(UserError, match="past half the memory free"):
        read_jsonl(path)


def test_a_table_under_the_floor_is_read_however_little_memory_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy host still reads a table of a run's size (the floor, as for JSON files)."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"update": i}) + "\n" for i in range(1, 20_001)))
    monkeypatch.setattr(rundir, "available_memory", lambda: 1 << 20)
    assert len(read_jsonl(path)) == 20_000


def test_the_recorder_closes_a_long_run_whose_table_is_past_the_bytes_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review's case: 7,000 rows of 150 columns (~20 MiB) closed with 512 MiB free lost
    the run's metrics.parquet and summary.json under a bytes rule (free / 32 = 16 MiB)."""
    from andrea_diag.record import Recorder

    rec = Recorder(tmp_path / "run", config={"arm": "none"})
    for i in range(1, 7001):
        rec.log({"update": i, **METRICS_ROW})
    _free(monkeypatch, 512 << 20)
    rec.close({"status": "done"})
    assert (tmp_path / "run" / "metrics.parquet").exists()
    assert (tmp_path / "run" / "summary.json").exists()


def test_report_of_a_run_whose_metrics_would_hold_past_the_memory_free_is_one_line(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (run / "metrics.parquet").unlink(missing_ok=True)  # the JSONL table is the one read
    (run / "metrics.jsonl").write_text("{}\n" * 100_000)
    _free(monkeypatch, 4 << 20)
    out = one_line_error("report", str(run))
    assert "metrics.jsonl" in out and "past half the memory free" in out, out
    assert "free memory, then retry" in out, out


def test_a_table_the_host_will_not_read_back_keeps_its_rows_and_the_run_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by review: a refusal of the writer's own table at close (past the column cap
    here; past the memory free likewise) left no summary.json. The parquet is a copy: it is
    skipped with a warning, the JSONL keeps every row and the summary is written."""
    from andrea_diag import table_width
    from andrea_diag.record import Recorder

    rec = Recorder(tmp_path / "run", config={"arm": "none"})
    for i in range(1, 11):
        rec.log({"update": i, **METRICS_ROW})
    monkeypatch.setattr(table_width, "MAX_TABLE_COLUMNS", 100)  # the rows have 153
    rec.close({"status": "done"})
    run = tmp_path / "run"
    assert json.loads((run / "summary.json").read_text())["status"] == "done"
    assert not (run / "metrics.parquet").exists()
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 10
    assert "metrics.parquet not written" in caplog.text and "more than 100 columns" in caplog.text
