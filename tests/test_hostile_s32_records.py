"""Values in a run's records that are of the right kind but not a run's (round 32's audit).

- A whole number past what any run writes (``"steps": 10**30`` in ``config.json``) was
  warned about as "has the wrong type (int)": int is the right type. It is "out of range" now.
- ``cascade.json``'s settings (``lr``, ``steps``, ``max_norm``, ``recipe``, ``replicas``)
  were not declared: a text ``lr`` or a 401-digit ``steps`` passed every reader without a word,
  and ``--resume`` wrote them back. They are checked as the arms' ``config.json`` is, and a
  resume records the arms' own (checked) settings, keeping the command that started the run.

python -m pytest -q tests/test_hostile_s32_records.py
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hostile_dirs import cli
from stopped_cascade import stopped

from andrea_diag.runread import CONFIG, clean, read_cascade_meta


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (10**30, "is out of range (1000000000000000000000000000000)"),
        (1e300, "is out of range (1e+300)"),
        (2.5, "has the wrong type (float)"),
        ("16", "has the wrong type (str)"),
    ],
)
def test_a_whole_number_past_any_run_is_said_out_of_range_not_the_wrong_type(
    caplog: pytest.LogCaptureFixture, value: object, said: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="andrea_diag.record"):
        assert "steps" not in clean({"steps": value}, CONFIG, "config.json")
    assert f"config.json: field 'steps' {said}; shown as -" in caplog.text


def test_cascade_json_settings_of_no_run_are_warned_and_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "cascade.json").write_text(
        '{"arms": ["none"], "lr": "NaN?", "steps": ' + "9" * 401 + ', "max_norm": [1]}'
    )
    with caplog.at_level(logging.WARNING, logger="andrea_diag.record"):
        meta = read_cascade_meta(tmp_path)
    assert not {"lr", "steps", "max_norm"} & set(meta) and meta["arms"] == ["none"]
    assert "field 'lr' has the wrong type (str)" in caplog.text
    assert "field 'steps' is out of range (an integer of 401 digits)" in caplog.text
    assert "field 'max_norm' has the wrong type (list)" in caplog.text


@pytest.mark.slow
def test_resume_records_the_arms_settings_not_the_damaged_records(
    finished_cascade: Path, tmp_path: Path
) -> None:
    out = stopped(finished_cascade, tmp_path)
    meta = json.loads((out / "cascade.json").read_text())
    started = meta["command"]
    damaged = {**meta, "steps": 10**30, "size": "../../x", "lr": "fast", "replicas": -3}
    (out / "cascade.json").write_text(json.dumps(damaged))
    code, output = cli("cascade", "--resume", str(out))
    assert code == 0, output
    now = json.loads((out / "cascade.json").read_text())
    assert (now["steps"], now["size"], now["lr"], now["replicas"]) == (6, "tiny", 3e-3, 1)
    assert now["command"] == started and now["status"] == "done"
    assert now["resumed_with"] and now["resumed_with"][-1].startswith("andrea-diag")
