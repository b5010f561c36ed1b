"""NVML telemetry (nvidia-ml-py): GPU name, clocks, temperature, power, memory and utilization; a
silent no-op without a GPU or NVML.

    from andrea_diag.telemetry import Telemetry
    with Telemetry(interval_s=0.2) as tel:
        run_benchmark()
    summary = tel.summary()        # {} on a machine without NVML
    with Telemetry(interval_s=0.5, indices=[0, 1]) as tel:   # several GPUs, one summary each
        run_sweep()
    per_gpu = tel.summaries()      # {0: {...}, 1: {...}}; {} without NVML

Benchmarks save the summary next to their timings so a throttled card shows up in the record.
``gpu_util_pct`` is NVML's ``utilization.gpu``: the percent of its last sample period (1/6 s to
1 s, by product) in which at least one kernel ran. It says the GPU was seldom idle, not that
its multiprocessors were full. A card or driver that does not report a reading has no key.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

# readings summarised as min / max; the utilization also as its mean over the samples
RANGED = ("sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w", "mem_used_gib", "gpu_util_pct")
MEANS = ("gpu_util_pct",)


def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no library, no driver, no GPU: telemetry is optional by design
        return None


def snapshot(index: int = 0) -> dict[str, Any]:
    """One reading of GPU ``index`` (NVML's numbering); ``{}`` when NVML is unavailable."""
    nv = _nvml()
    return {} if nv is None else _read(nv, index)


def _read(nv: Any, index: int) -> dict[str, Any]:
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
        with contextlib.suppress(Exception):  # MIG instances and some vGPUs do not report it
            out["gpu_util_pct"] = nv.nvmlDeviceGetUtilizationRates(h).gpu
        return out
    except Exception:
        return {}


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def nvml_index(uuid: str) -> int | None:
    """NVML's index of the GPU whose UUID is ``uuid`` (with or without NVML's ``GPU-`` prefix,
    any case); None without NVML or when no GPU has it. NVML numbers every GPU of the host and
    ignores ``CUDA_VISIBLE_DEVICES``, so a CUDA device number is matched to it through this."""
    nv = _nvml()
    if nv is None:
        return None
    want = _bare(uuid)
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            if _bare(_s(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i)))) == want:
                return i
    except Exception:
        return None
    return None


def _bare(uuid: str) -> str:
    u = uuid.strip().lower()
    return u[4:] if u.startswith("gpu-") else u


class Telemetry:
    """Background sampler; context manager. Collects nothing (quietly) without NVML.

    ``indices``: the GPUs to read each interval, by NVML index (default ``[index]``); each has
    its own samples (:attr:`by_index`) and summary, since cells on different GPUs are loaded
    differently and a mean over them would hide an idle one."""

    def __init__(
        self, interval_s: float = 0.25, index: int = 0, indices: Sequence[int] | None = None
    ) -> None:
        self.interval_s = interval_s
        self.indices = [index] if indices is None else list(dict.fromkeys(indices))
        self.index = self.indices[0] if self.indices else index
        self.by_index: dict[int, list[dict[str, Any]]] = {i: [] for i in self.indices}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def samples(self) -> list[dict[str, Any]]:
        """The samples of the first GPU (``index``)."""
        return self.by_index.get(self.index, [])

    def __enter__(self) -> Telemetry:
        if self.indices and _nvml() is not None:
            self.sample()  # the first reading on entry: a span of any length has one
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def sample(self) -> None:
        """Read every GPU once now (the thread does this each interval)."""
        nv = _nvml()
        if nv is None:
            return
        t = time.time()
        for i in self.indices:
            s = _read(nv, i)
            if s:
                s["t"] = t
                self.by_index[i].append(s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def summary(self, index: int | None = None) -> dict[str, Any]:
        """Min / max of the numeric readings of GPU ``index`` (default: the first), the mean of
        ``gpu_util_pct`` too, plus the card's name; {} without samples."""
        samples = self.by_index.get(self.index if index is None else index, [])
        if not samples:
            return {}
        out: dict[str, Any] = {"name": samples[0].get("name"), "n_samples": len(samples)}
        for key in RANGED:
            vals = [s[key] for s in samples if key in s]
            if vals:
                out[f"{key}_min"], out[f"{key}_max"] = min(vals), max(vals)
                if key in MEANS:
                    out[f"{key}_mean"] = sum(vals) / len(vals)
        return out

    def summaries(self) -> dict[int, dict[str, Any]]:
        """:meth:`summary` of every GPU that has samples, by NVML index."""
        return {i: self.summary(i) for i in self.indices if self.by_index[i]}
