"""NVML telemetry (nvidia-ml-py): GPU name, clocks, temperature, power, memory; a silent no-op
without a GPU or NVML.

    from andrea_diag.telemetry import Telemetry
    with Telemetry(interval_s=0.2) as tel:
        run_benchmark()
    summary = tel.summary()        # {} on a machine without NVML

Benchmarks save the summary next to their timings so a throttled card shows up in the record.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any


def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no library, no driver, no GPU: telemetry is optional by design
        return None


def snapshot(index: int = 0) -> dict[str, Any]:
    """One reading of GPU ``index``; ``{}`` when NVML is unavailable."""
    nv = _nvml()
    if nv is None:
        return {}
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        name = nv.nvmlDeviceGetName(h)
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        out: dict[str, Any] = {
            "name": name.decode() if isinstance(name, bytes) else str(name),
            "driver": _s(nv.nvmlSystemGetDriverVersion()),
            "sm_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            "mem_used_gib": mem.used / 2**30,
            "mem_total_gib": mem.total / 2**30,
        }
        with contextlib.suppress(Exception):
            out["power_w"] = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
        return out
    except Exception:
        return {}


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class Telemetry:
    """Background sampler; context manager. Collects nothing (quietly) without NVML."""

    def __init__(self, interval_s: float = 0.25, index: int = 0) -> None:
        self.interval_s = interval_s
        self.index = index
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Telemetry:
        if _nvml() is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            s = snapshot(self.index)
            if s:
                s["t"] = time.time()
                self.samples.append(s)
            self._stop.wait(self.interval_s)

    def summary(self) -> dict[str, Any]:
        """Min / max of the numeric readings, plus the card's name; {} without samples."""
        if not self.samples:
            return {}
        out: dict[str, Any] = {"name": self.samples[0].get("name"), "n_samples": len(self.samples)}
        for key in ("sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w", "mem_used_gib"):
            vals = [s[key] for s in self.samples if key in s]
            if vals:
                out[f"{key}_min"], out[f"{key}_max"] = min(vals), max(vals)
        return out
