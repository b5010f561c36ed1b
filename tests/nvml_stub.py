"""A stand-in for ``pynvml`` (nvidia-ml-py) on a machine without a GPU: tests put it in
``sys.modules["pynvml"]`` and andrea_diag.telemetry reads it as it would a card.

    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(util=[90, 100, 95]))
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Iterable


def fake_nvml(
    util: Iterable[int] | dict[int, Iterable[int]] | None = None,
    n_gpus: int = 1,
    uuids: list[str] | None = None,
) -> types.ModuleType:
    """A ``pynvml`` whose GPUs read fixed clocks, temperature, power and memory; ``util``: the
    successive ``utilization.gpu`` readings of every GPU (repeated when used up), or of each GPU
    by index; None: a card or driver without the reading (the call raises, as NVML does)."""
    nv = types.ModuleType("pynvml")
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_TEMPERATURE_GPU = 1, 2, 0
    uuids = uuids or [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(n_gpus)]
    per_gpu = util if isinstance(util, dict) else dict.fromkeys(range(n_gpus), util)
    readings = {i: itertools.cycle(list(u)) for i, u in per_gpu.items() if u is not None}

    def handle(i: int) -> int:
        if not 0 <= i < n_gpus:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return i

    def utilization(h: int) -> types.SimpleNamespace:
        if h not in readings:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return types.SimpleNamespace(gpu=next(readings[h]), memory=0)

    nv.nvmlInit = lambda: None
    nv.nvmlDeviceGetCount = lambda: n_gpus
    nv.nvmlDeviceGetHandleByIndex = handle
    nv.nvmlDeviceGetUUID = lambda h: uuids[h]
    nv.nvmlDeviceGetName = lambda h: b"Stub GPU"
    nv.nvmlSystemGetDriverVersion = lambda: "0.0"
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=2**30, total=2**34)
    nv.nvmlDeviceGetClockInfo = lambda h, kind: 1980 if kind == nv.NVML_CLOCK_SM else 3201
    nv.nvmlDeviceGetTemperature = lambda h, sensor: 40
    nv.nvmlDeviceGetPowerUsage = lambda h: 250_000
    nv.nvmlDeviceGetUtilizationRates = utilization
    return nv
