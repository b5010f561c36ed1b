"""A metrics row wider than report reads back is said when it is logged, once, and kept."""

from __future__ import annotations

import json
import logging

import pytest

from andrea_diag import record
from andrea_diag.record import Recorder


def test_a_row_past_the_column_cap_is_warned_once_when_logged_and_every_row_kept(
    tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(record, "MAX_TABLE_COLUMNS", 6)  # the cap, small: rows of 8 columns
    rec = Recorder(tmp_path / "run", {"x": 1})
    with caplog.at_level(logging.WARNING, logger="andrea_diag.record"):
        rec.log({"update": 1, "loss": 2.0})  # 3 columns with the time: under the cap
        assert not caplog.records
        for u in range(2, 5):
            rec.log({"update": u, **{f"layer_gn/{k}": float(k) for k in range(6)}})
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1, said
    assert "has 9 columns, past the 6" in said[0] and "metrics.jsonl keeps every row" in said[0]
    rec.close({"final": 1})
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["update"] for x in lines] == [1, 2, 3, 4]
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == {"final": 1}


def test_narrow_rows_whose_keys_together_pass_the_cap_are_warned_of(
    tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # the readers count every row's keys together: rows of 4 columns (the time too), 8 in all
    monkeypatch.setattr(record, "MAX_TABLE_COLUMNS", 7)
    rec = Recorder(tmp_path / "run", {"x": 1})
    with caplog.at_level(logging.WARNING, logger="andrea_diag.record"):
        for u in range(1, 4):
            rec.log({"update": u, f"a{u}": 1.0, f"b{u}": 2.0})
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "has 8 columns, past the 7" in said[0], said
    rec.close({"final": 1})
