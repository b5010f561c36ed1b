"""An old ``sweep.json``'s throughput figures are carried into the new one, and the file is the
run dir's: a planted figure keeps only the fields the sweep writes, each of its type and in
range, so a re-run never passes on a negative speed, a 1e308 count or megabytes of text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from finished_sweep import SWEEP
from finished_sweep import strict_cli as _run

from andrea_diag.experiments.throughput import MAX_EARLIER, earlier_throughputs


@pytest.fixture
def sweep(finished_sweep: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(finished_sweep, tmp_path / "s", symlinks=True))


def test_a_planted_figure_loses_its_out_of_range_and_foreign_fields_on_a_rerun(
    sweep: Path,
) -> None:
    meta = json.loads((sweep / "sweep.json").read_text())
    planted = {**meta["throughput"], "updates_per_s": -5.0, "wall_s": "inf", "jobs": 1e300, "note": "x" * 5_000_000, "payload": {"a": [1] * 1000},
               "gpu_busy": {"pct_mean": 250.0, "n_samples": 3}}  # fmt: skip
    (sweep / "sweep.json").write_text(json.dumps({**meta, "throughput": planted}))
    code, output = _run(*SWEEP, "--seed", "0,1", "--out", str(sweep))
    assert code == 0, output
    kept = json.loads((sweep / "sweep.json").read_text())["throughput_earlier"][-1]
    assert kept == {"updates": meta["throughput"]["updates"],
                    "executor": meta["throughput"]["executor"],
                    "jobs_auto": meta["throughput"]["jobs_auto"]}  # fmt: skip


def test_figures_without_a_count_are_dropped_and_a_long_list_keeps_its_last_entries() -> None:
    good = {"updates": 6, "wall_s": 2.0, "updates_per_s": 3.0, "jobs": 1}
    earlier = [{"updates": -1}, {"note": "no count"}, *[good] * (MAX_EARLIER + 5)]
    kept = earlier_throughputs({"throughput": {"updates": "6"}, "throughput_earlier": earlier})
    assert "throughput" not in kept
    assert kept["throughput_earlier"] == [good] * MAX_EARLIER


def test_a_figures_gpu_busy_keeps_percentages_in_range_and_at_most_64_gpus() -> None:
    devices = {str(i): {"pct_mean": 50.0, "n_samples": 2} for i in range(100)}
    devices["x"] = {"pct_mean": -3.0}
    busy = {"pct_mean": 60.0, "pct_max": 101.0, "n_samples": 4, "source": "nvml",
            "devices": devices}  # fmt: skip
    kept = earlier_throughputs({"throughput": {"updates": 6, "gpu_busy": busy}})
    out = kept["throughput"]["gpu_busy"]
    assert out["pct_mean"] == 60.0 and "pct_max" not in out and out["source"] == "nvml"
    assert len(out["devices"]) == 64 and "x" not in out["devices"]


def test_the_sweeps_own_figure_is_kept_whole(finished_sweep: Path) -> None:
    meta = json.loads((finished_sweep / "sweep.json").read_text())
    assert earlier_throughputs(meta)["throughput"] == meta["throughput"]


@pytest.mark.parametrize("value", [10**400, -(10**400), float("nan"), float("inf"), True, "7"])
def test_a_count_past_any_range_or_of_another_type_is_dropped(value: object) -> None:
    kept = earlier_throughputs({"throughput": {"updates": 6, "updates_per_s": value}})
    assert kept == {"throughput": {"updates": 6}}


def test_a_figure_without_a_wall_time_keeps_its_null_speed() -> None:
    # throughput() writes updates_per_s null when the wall time is 0: the sweep's own, kept
    figure = {"updates": 0, "wall_s": 0.0, "updates_per_s": None, "jobs": 1}
    assert earlier_throughputs({"throughput": figure}) == {"throughput": figure}
