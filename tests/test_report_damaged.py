"""`report` and `export` on damaged and odd run-directory files (issue 18): one clear line and a
non-zero exit, never a traceback or a hang; a field of the wrong type is shown as "-".

The runs are synthetic (conftest's ``make_run``) and then damaged (tests/hostile_dirs.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile_dirs import (  # noqa: F401 (the *_fixture names are fixtures: run, cascade)
    N,
    assert_safe,
    cascade_fixture,
    cli,
    edit,
    jsonl_metrics,
    make_sweep,
    one_line_error,
    run_fixture,
)

# ---- damaged and odd files: one line, never a traceback ----


def _truncate(p: Path) -> None:
    p.write_text(p.read_text()[: len(p.read_text()) // 2])


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated summary.json": lambda r: _truncate(r / "summary.json"),
    "config.json a list": lambda r: (r / "config.json").write_text("[1, 2]"),
    "config.json not utf-8": lambda r: (r / "config.json").write_bytes(b"\xff\xfe{"),
    "corrupt metrics.parquet": lambda r: (r / "metrics.parquet").write_bytes(b"PAR1 garbage"),
    "empty metrics.parquet": lambda r: (r / "metrics.parquet").write_bytes(b""),
    "metrics.parquet a folder": lambda r: (
        (r / "metrics.parquet").unlink(),
        (r / "metrics.parquet").mkdir(),
    ),
    "summary.json a FIFO": lambda r: (
        (r / "summary.json").unlink(),
        os.mkfifo(r / "summary.json"),
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_file_is_one_line_for_report_and_export(
    tmp_path: Path, run: Path, damage: str
) -> None:
    DAMAGE[damage](run)
    one_line_error("report", str(run))
    one_line_error("export", "--tensorboard", str(run), "--out", str(tmp_path / "tb"))


def test_metrics_row_with_null_update_is_one_line(tmp_path: Path, run: Path) -> None:
    rows = jsonl_metrics(run)
    rows[3]["update"] = None
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "update" in one_line_error("report", str(run))
    one_line_error("export", "--tensorboard", str(run), "--out", str(tmp_path / "tb"))


def test_fifo_metrics_jsonl_does_not_hang(tmp_path: Path, run: Path) -> None:
    jsonl_metrics(run)
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    assert "not a regular file" in one_line_error("report", str(run))
    one_line_error("export", "--tensorboard", str(run), "--out", str(tmp_path / "tb"))


@pytest.mark.parametrize("value", ["16", [16], {"n": 16}, True, 1.5, -3, None])
def test_wrong_types_in_config_and_summary_render_as_dash(run: Path, value: object) -> None:
    edit(run / "config.json", steps=value, lr=value, seed=value, max_norm=value,
          probes__boundary_k=value)  # fmt: skip
    edit(run / "summary.json", final_loss=value, pct_clipped=value, spikes=value,
          pollution__recovery_v=value, nonfinite_updates=value, probe_failures=value)  # fmt: skip
    code, out = cli("report", str(run))
    assert code == 0 and "Traceback" not in out, out


def test_wrong_cell_types_in_metrics_are_gaps(tmp_path: Path, run: Path) -> None:
    rows = jsonl_metrics(run)
    rows[2].update({"loss": "x", "grad_norm": {"a": 1}, "boundary": "yes", "clip_coef": [1]})
    rows[5].update({"update": "6"})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli("report", str(run))[0] == 0
    assert cli("export", "--tensorboard", str(run), "--out", str(tmp_path / "tb"))[0] == 0


@pytest.mark.parametrize(
    "text", ["{", "[1]", '{"arms": "none"}', '{"arms": [1]}', '{"arms": []}', '{"arms": null}']
)
def test_corrupt_cascade_json_is_one_line(cascade: Path, text: str) -> None:
    (cascade / "cascade.json").write_text(text)
    one_line_error("report", str(cascade))


@pytest.mark.parametrize("text", ["{", "[]", '"x"'])
def test_corrupt_sweep_json_is_one_line(tmp_path: Path, cascade: Path, text: str) -> None:
    sweep = make_sweep(tmp_path, cascade, "c1")
    (sweep / "sweep.json").write_text(text)
    one_line_error("report", str(sweep))


@pytest.mark.parametrize("value", ["96", [[96]], "<b>x</b>" * 10000, True, 96])
def test_a_gpu_busy_that_is_not_an_object_is_dropped_when_sweep_json_is_read(
    tmp_path: Path, cascade: Path, value: object
) -> None:
    from andrea_diag.report.sweep_dir import read_sweep_meta

    sweep = make_sweep(tmp_path, cascade, "c1")
    edit(sweep / "sweep.json", throughput__gpu_busy=value)
    tp = read_sweep_meta(sweep)["throughput"]
    assert "gpu_busy" not in tp and tp["updates_per_s"] == 2.0  # the rest of the line stays


def test_gpu_busy_fields_of_the_wrong_type_are_dropped_and_the_right_ones_kept(
    tmp_path: Path, cascade: Path
) -> None:
    from andrea_diag.report.sweep_dir import read_sweep_meta

    sweep = make_sweep(tmp_path, cascade, "c1")
    busy = {"pct_mean": 96.5, "pct_min": "0", "pct_max": [100], "n_samples": 2.5, "source": 3,
            "devices": "0", "extra": "kept: undeclared fields pass"}  # fmt: skip
    edit(sweep / "sweep.json", throughput__gpu_busy=busy)
    assert read_sweep_meta(sweep)["throughput"]["gpu_busy"] == {
        "pct_mean": 96.5, "extra": "kept: undeclared fields pass"}  # fmt: skip


def test_numbers_past_the_float_range_are_dropped_not_a_crash(
    tmp_path: Path, cascade: Path
) -> None:
    """JSON integers are unbounded: 10**400 in a number field overflowed a reader's float
    conversion (math.isfinite) and stopped the report; the schema drops it like a wrong type."""
    from andrea_diag.report.sweep_dir import read_sweep_meta

    sweep = make_sweep(tmp_path, cascade, "c1")
    huge = 10**400
    busy = {"pct_mean": huge, "n_samples": huge, "devices": {"0": {"pct_mean": huge}}}
    edit(sweep / "sweep.json", throughput__gpu_busy=busy, throughput__updates_per_s=huge,
         throughput__updates=2**63)  # fmt: skip
    tp = read_sweep_meta(sweep)["throughput"]
    assert "updates_per_s" not in tp and "updates" not in tp
    assert "pct_mean" not in tp["gpu_busy"] and "n_samples" not in tp["gpu_busy"]
    # the per-GPU entries are keyed by whatever the file says: the page checks each value
    code, out = cli("report", str(sweep))
    assert code == 0 and "Traceback" not in out, out
    assert "a kernel ran" not in (sweep / "sweep.html").read_text()


def test_corrupt_sweep_csv_and_cell_cascade_json_are_one_line(
    tmp_path: Path, cascade: Path
) -> None:
    sweep = make_sweep(tmp_path, cascade, "c1")
    (sweep / "c0" / "cascade.json").write_text('{"arms": ')
    one_line_error("report", str(sweep))
    (sweep / "sweep.csv").write_bytes(b"\xff\xfe\x00garbage\n\x00")
    one_line_error("report", str(sweep))


def test_path_component_longer_than_255_is_one_line(tmp_path: Path) -> None:
    long = str(tmp_path / ("x" * 300))
    assert "255" in one_line_error("report", long)
    assert "255" in one_line_error("export", "--tensorboard", long)
    assert "255" in one_line_error("report", str(tmp_path), "--out", long)


def test_probe_failure_at_close_without_update_is_kept(run: Path) -> None:
    """Events rows without an update are dropped, except a probe failure at close."""
    from andrea_diag.record import load_run

    with open(run / "events.jsonl", "a") as f:
        f.write(json.dumps({"update": None, "kind": "probe_failure", "probe": "lockin",
                            "hook": "close", "error": "ValueError: x"}) + "\n")  # fmt: skip
        f.write(json.dumps({"update": None, "metric": "grad_norm", "value": 1.0}) + "\n")
    loaded = load_run(run)
    assert [f["probe"] for f in loaded["probe_failures"]] == ["lockin"]
    assert "update" not in loaded["probe_failures"][0]
    assert loaded["events"]["update"].notna().all()


def test_deeply_nested_json_is_one_line(run: Path) -> None:
    (run / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    assert "nested" in one_line_error("report", str(run))


@pytest.mark.parametrize("update", [1e400, 10**30, -(2**60), 2.5, "x"])
def test_metrics_update_out_of_range_is_one_line(run: Path, update: object) -> None:
    rows = jsonl_metrics(run)
    rows[3]["update"] = update
    text = "".join(json.dumps(r) + "\n" for r in rows).replace("Infinity", "1e400")
    (run / "metrics.jsonl").write_text(text)
    assert "update" in one_line_error("report", str(run))


def test_events_with_odd_causes_render(run: Path) -> None:
    with open(run / "events.jsonl", "a") as f:
        for causes in ([{"a": 1}], "boundary", [[1, 2], None], 7):
            f.write(json.dumps({"update": 5, "metric": "grad_norm", "value": 2.0,
                                "cause": causes, "causes": causes}) + "\n")  # fmt: skip
    code, out = cli("report", str(run))
    assert code == 0, out
    assert_safe((run / "report.html").read_text())
