"""NVML telemetry (andrea_diag/telemetry.py) read through a stand-in pynvml (tests/nvml_stub.py):
the readings, the utilization's mean / min / max, several GPUs each on its own, and the silent
no-op without NVML. No GPU and no timing: samples are taken by hand (``Telemetry.sample``).
"""

from __future__ import annotations

import sys
import types

import pytest
from nvml_stub import fake_nvml

from andrea_diag.telemetry import Telemetry, nvml_index, snapshot


def _with(monkeypatch: pytest.MonkeyPatch, nv: types.ModuleType) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", nv)


def test_utilization_samples_give_their_mean_min_and_max(monkeypatch: pytest.MonkeyPatch) -> None:
    _with(monkeypatch, fake_nvml(util=[90, 100, 95, 75]))
    tel = Telemetry(indices=[0])
    for _ in range(4):
        tel.sample()
    assert [s["gpu_util_pct"] for s in tel.samples] == [90, 100, 95, 75]
    summary = tel.summary()
    assert summary["gpu_util_pct_mean"] == pytest.approx(90.0)
    assert (summary["gpu_util_pct_min"], summary["gpu_util_pct_max"]) == (75, 100)
    assert summary["n_samples"] == 4 and summary["name"] == "Stub GPU"
    assert summary["power_w_max"] == 250.0 and summary["sm_clock_mhz_min"] == 1980


def test_a_card_without_utilization_has_no_util_keys_and_keeps_the_other_readings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _with(monkeypatch, fake_nvml(util=None))
    assert "gpu_util_pct" not in snapshot(0) and snapshot(0)["temp_c"] == 40
    tel = Telemetry()
    tel.sample()
    tel.sample()
    summary = tel.summary()
    assert not any(k.startswith("gpu_util_pct") for k in summary)
    assert summary["temp_c_max"] == 40 and summary["mem_used_gib_max"] == 1.0
    assert summary["power_w_min"] == 250.0 and summary["n_samples"] == 2


def test_several_gpus_are_sampled_and_summarised_each_on_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _with(monkeypatch, fake_nvml(util={0: [100, 98], 3: [10, 30]}, n_gpus=4))
    tel = Telemetry(indices=[3, 0])
    for _ in range(2):
        tel.sample()
    per = tel.summaries()
    assert set(per) == {0, 3}
    assert per[0]["gpu_util_pct_mean"] == pytest.approx(99.0)
    assert per[3]["gpu_util_pct_mean"] == pytest.approx(20.0)
    assert tel.summary() == per[3]  # the first index given, as with ``index``


def test_the_context_manager_reads_on_entry_and_stops_its_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _with(monkeypatch, fake_nvml(util=[60]))
    with Telemetry(interval_s=60.0) as tel:  # the thread waits a minute: only the entry's read
        pass
    assert tel._thread is not None and not tel._thread.is_alive()
    assert tel.summary()["gpu_util_pct_mean"] == 60 and tel.summary()["n_samples"] >= 1


def test_without_nvml_telemetry_is_a_silent_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = types.ModuleType("pynvml")

    def no_driver() -> None:
        raise RuntimeError("NVML_ERROR_LIBRARY_NOT_FOUND")

    broken.nvmlInit = no_driver
    _with(monkeypatch, broken)
    with Telemetry(indices=[0, 1]) as tel:
        tel.sample()
    assert tel._thread is None and tel.summary() == {} and tel.summaries() == {}
    assert snapshot() == {} and nvml_index("GPU-anything") is None


def test_a_cuda_uuid_finds_its_nvml_index_with_or_without_the_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    uuids = ["GPU-aaaa-1", "GPU-BBBB-2", "GPU-cccc-3"]
    _with(monkeypatch, fake_nvml(util=[1], n_gpus=3, uuids=uuids))
    assert nvml_index("bbbb-2") == 1  # torch gives the UUID without NVML's prefix
    assert nvml_index("GPU-cccc-3") == 2 and nvml_index("dddd-4") is None
