"""The recorder's promise: a crash loses at most the update in flight, and nothing recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from andrea_diag.config import RunConfig
from andrea_diag.data import BatchPlan, Mixer, prepare_data
from andrea_diag.errors import UserError
from andrea_diag.record import JsonlWriter, Recorder, load_run, read_jsonl
from andrea_diag.train import graphed, loop


def test_a_torn_row_is_skipped_and_appending_after_it_keeps_every_row(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"update": 1}\n{"update": 2}\n{"upda')  # crash mid-write
    w = JsonlWriter(path)  # resume: the torn tail is cut, not merged into the next row
    w.write({"update": 3})
    w.close()
    assert read_jsonl(path)["update"].tolist() == [1, 2, 3]


def test_a_bad_line_in_the_middle_does_not_hide_the_rows_after_it(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"update": 1}\n{"upd\n{"update": 3}\n')
    assert read_jsonl(path)["update"].tolist() == [1, 3]


def test_recorder_refuses_to_overwrite_a_run(tmp_path: Path) -> None:
    Recorder(tmp_path / "run", {"a": 1}).close()
    with pytest.raises(UserError, match="not empty"):
        Recorder(tmp_path / "run", {"a": 2})
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"a": 1}


def test_invalid_config_json_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_run(tmp_path)


def test_a_crash_mid_run_keeps_metrics_events_and_says_it_crashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = RunConfig(size="tiny", steps=30, inject=["nonfinite@3"]).resolve()
    data = prepare_data()
    plan = BatchPlan(data, Mixer(seed=0), seed=0, micro_batch=cfg.micro_batch,
                     accum=cfg.accum, seq_len=cfg.seq_len)  # fmt: skip
    real = graphed.accumulate_with  # one call an update (the trainer's group runner's)
    calls = {"n": 0}

    def dies_at_update_6(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 6:
            raise RuntimeError("simulated crash")
        return real(*args, **kwargs)

    monkeypatch.setattr(graphed, "accumulate_with", dies_at_update_6)
    with pytest.raises(RuntimeError, match="simulated crash"):
        loop.train_arm(cfg, tmp_path / "run", data, plan)
    run = tmp_path / "run"
    assert pd.read_parquet(run / "metrics.parquet")["update"].tolist() == [1, 2, 3, 4, 5]
    events = read_jsonl(run / "events.jsonl")
    assert 3 in events["update"].tolist()  # the non-finite update's event survived the crash
    assert json.loads((run / "partial_summary.json").read_text())["status"] == "crashed"
    assert not (run / "summary.json").exists()  # an unfinished run never looks finished


def test_a_metrics_row_holds_exactly_the_values_the_general_encoder_gives(tmp_path: Path) -> None:
    import math

    import numpy as np
    import torch

    from andrea_diag.jsonl import _jsonable

    # the row writer's fast path (finite floats, ints, strings as they are) against the walk
    # every other JSON value takes: non-finite floats, tensors, numpy scalars, nested values
    row = {"a": 1.5, "nan": math.nan, "inf": math.inf, "-inf": -math.inf, "i": 3, "b": True,
           "none": None, "s": "x", "t": torch.tensor(2.5), "f32": np.float32(1.25),
           "f64": np.float64(math.inf), "i64": np.int64(7), "list": [1.0, math.nan],
           "nested": {"x": -math.inf}, 5: 1.0, "neg0": -0.0}  # fmt: skip
    w = JsonlWriter(tmp_path / "m.jsonl")
    w.write_many([row])
    w.close()
    line = (tmp_path / "m.jsonl").read_text()
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line) == json.loads(json.dumps(_jsonable(row)))  # every float bit for bit
    assert json.loads(line)["nan"] is None and json.loads(line)["f64"] == "inf"


def test_rows_of_finite_floats_and_rows_with_inf_nan_or_numpy_encode_to_the_same_values() -> None:
    import math

    import numpy as np

    from andrea_diag.jsonl import _jsonable, encode_row

    fast = {"update": 1, "loss": 1 / 3, "tiny": 5e-324, "big": 1.7e308, "neg0": -0.0, "s": "a"}
    for row in (fast, {**fast, "big2": 1.7e308}, {**fast, "x": math.inf},  # the sum overflows
                {**fast, "x": np.float64(-math.inf)}, {**fast, "x": np.float32(0.1)}):  # fmt: skip
        assert json.loads(encode_row(row)) == json.loads(json.dumps(_jsonable(row)))


def test_a_batch_of_rows_is_the_walks_lines_with_tensors_nested_infs_and_none_among_them() -> None:
    # encode_rows tries orjson first: a nan or inf it would write as null (nested ones too), or
    # a tensor it refuses, sends that row through the walk; the others keep orjson's line
    import math

    import torch

    from andrea_diag.jsonl import _jsonable, encode_rows

    rows = [
        {"update": 1, "loss": 0.25, "injected": None},
        {"loss": torch.tensor(0.5), "g": torch.tensor(2.0, dtype=torch.bfloat16)},
        {"x": [1.0, math.inf], "y": None},  # nested: orjson alone wrote null for the inf
        {"q": {"r": (2.0, -math.inf)}, "s": "[not a list"},
        {"n": math.nan, "s": "null"},
        {"a": 1e308, "b": 1e308},  # finite, and their sum overflows: the walk, same values
    ]
    lines = encode_rows(rows).decode().splitlines()
    assert [json.loads(x) for x in lines] == [json.loads(json.dumps(_jsonable(r))) for r in rows]
    assert json.loads(lines[2])["x"] == [1.0, "inf"] and json.loads(lines[3])["q"] == {
        "r": [2.0, "-inf"]
    }
    assert json.loads(lines[1]) == {"loss": 0.5, "g": 2.0}


@pytest.mark.parametrize(
    "text",
    ['{"update": 1}\n{"update": 2}', '{"update": 1, "loss": 2.5}'],
    ids=["after-other-rows", "the-only-row"],
)
def test_a_whole_last_row_without_its_newline_is_kept_when_appending(
    tmp_path: Path, text: str
) -> None:
    """It was cut as if torn: a recorded row lost, and a file of that one row went to 0 bytes."""
    path = tmp_path / "m.jsonl"
    path.write_text(text)
    before = read_jsonl(path)["update"].tolist()
    w = JsonlWriter(path)
    w.write({"update": 9})
    w.close()
    assert read_jsonl(path)["update"].tolist() == [*before, 9]


@pytest.mark.parametrize("tail", ['{"update": 2', "[1, 2]", '{"a": ' + "1" * 5000 + "}", "\xff"])
def test_a_last_line_that_is_not_a_whole_row_is_still_cut(tmp_path: Path, tail: str) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"update": 1}\n' + tail.encode("latin-1"))
    w = JsonlWriter(path)
    w.write({"update": 3})
    w.close()
    assert path.read_bytes() == b'{"update": 1}\n{"update":3}\n'


def test_an_int_past_64_bits_is_written_exactly_and_the_batch_is_kept(tmp_path: Path) -> None:
    """orjson writes 64-bit ints only: ``10**30`` in one row raised at the flush and took the
    batch's other rows with it."""
    rec = Recorder(tmp_path / "run", {"a": 1}, flush_every=3)
    rec.log({"update": 1, "x": 2**64 - 1})
    rec.log({"update": 2, "x": 10**30})
    rec.log({"update": 3, "x": -(10**400)})
    rec.close()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["x"] for r in rows] == [2**64 - 1, 10**30, -(10**400)]


def test_a_write_that_fails_on_a_full_disk_loses_no_row_and_doubles_none(tmp_path: Path) -> None:
    """RLIMIT_FSIZE stands in for a full disk: the write fails part-way. The failed batch's
    bytes stay in the file's buffer and go out with the next one; a recorder that also kept
    the rows to send again wrote them twice ([1, 2, 2, 3])."""
    import resource
    import signal

    rec = Recorder(tmp_path / "run", {"a": 1})
    rec.log({"update": 1})
    size = (tmp_path / "run" / "metrics.jsonl").stat().st_size
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a killed process
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, hard))
        with pytest.raises(UserError, match="cannot write"):
            rec.log({"update": 2, "pad": "x" * 100})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    rec.log({"update": 3})
    rec.close()
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert rows["update"].tolist() == [1, 2, 3] and rows["pad"].iloc[1] == "x" * 100
