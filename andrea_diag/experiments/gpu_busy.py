"""How busy the sweep's GPUs were while its cells ran: may more cells at once raise throughput?

    from andrea_diag.experiments.gpu_busy import busy_line, busy_sampler, gpu_busy
    with busy_sampler(spec.executor, cfg.device) as tel:   # the span of throughput's wall time
        run_cells(...)
    busy = gpu_busy(tel)          # None: nothing read (CPU cells, Slurm, no NVML)
    if busy is not None:
        console.print(busy_line(busy))   # "GPU busy 96% of the sweep (NVML, 280 samples): ..."

The reading is NVML's ``utilization.gpu`` (:mod:`andrea_diag.telemetry`), sampled every
``INTERVAL_S``: the percent of each sample period in which at least one kernel ran. A high mean
says a kernel was running nearly all the time, so more cells at once (``--jobs``) have little
idle time to fill and can gain only where their kernels run side by side (MPS); it does not say
how full the multiprocessors were. A low mean says the GPU sat idle between kernels.

Which GPUs: the ones the cells of this host train on (executor.py places them), each read on
its own, because NVML numbers every GPU of the host in its own order and ignores
``CUDA_VISIBLE_DEVICES``: each is found by its UUID. One GPU gives one summary; several give
the pooled one plus one per GPU (``devices``, keyed by NVML index, nvidia-smi's numbering).
"""

from __future__ import annotations

import contextlib
from typing import Any

from andrea_diag.experiments.executor import ExecutorConfig, uses_cuda
from andrea_diag.telemetry import Telemetry, nvml_index

INTERVAL_S = 0.5
BOUND_PCT = 90.0  # a mean at or above it: little idle time left to fill
SOURCE = "NVML utilization.gpu: share of each sample period in which a kernel ran"


def cell_gpus(cfg: ExecutorConfig, device: str) -> list[int]:
    """NVML indices of the GPUs this host's cells train on; ``[]`` where there is none to read:
    cells on the CPU, a merge (it trains nothing), Slurm or submitit jobs (their scheduler
    places them, on other hosts for Slurm), or a GPU NVML does not list."""
    if cfg.kind != "local" or cfg.merge_only or not uses_cuda(device):
        return []
    import torch

    found: list[int] = []
    with contextlib.suppress(Exception):  # the reading is optional: a GPU not named is not read
        # one cell at a time trains in this process, on its current device; side by side, every
        # GPU this process sees gets cells (executor.device_slots), numbered here as in it.
        # A device's properties need no CUDA context (one is made at a first allocation).
        n = torch.cuda.device_count()
        for ordinal in [torch.cuda.current_device()] if cfg.in_process else range(n):
            index = nvml_index(str(torch.cuda.get_device_properties(ordinal).uuid))
            if index is not None:
                found.append(index)
    return found


def busy_sampler(cfg: ExecutorConfig, device: str) -> Telemetry:
    """The sampler of the cells' GPUs (none: it reads nothing); enter it for the cells' span."""
    return Telemetry(interval_s=INTERVAL_S, indices=cell_gpus(cfg, device))


def _stats(values: list[float]) -> dict[str, Any]:
    return {"pct_mean": round(sum(values) / len(values), 1), "pct_min": min(values),
            "pct_max": max(values), "n_samples": len(values)}  # fmt: skip


def gpu_busy(tel: Telemetry) -> dict[str, Any] | None:
    """sweep.json's ``throughput.gpu_busy`` from the samples; None when there are none."""
    per = {}
    for index, samples in tel.by_index.items():
        values = [s["gpu_util_pct"] for s in samples if "gpu_util_pct" in s]
        if values:
            per[index] = values
    if not per:
        return None
    out = {**_stats([v for values in per.values() for v in values]), "source": SOURCE}
    if len(per) > 1:
        out["devices"] = {str(i): _stats(values) for i, values in per.items()}
    return out


def busy_line(busy: dict[str, Any], *, all_at_once: bool = False) -> str:
    """One line for the sweep's console: how busy, and what that says about ``--jobs``. With
    several GPUs, the least busy one decides: ``--jobs`` adds cells to every GPU.
    ``all_at_once``: every cell of the sweep already ran side by side, so a larger ``--jobs``
    would start none more; only more cells (seeds, lrs) in one sweep could fill the idle time.

    >>> busy_line({"pct_mean": 40.0, "n_samples": 8}).split("; ")[-1]
    'more cells at once (--jobs) may raise throughput'
    >>> busy_line({"pct_mean": 40.0, "n_samples": 8}, all_at_once=True).split("; ")[-1]
    'every cell already ran at once, so more cells in one sweep (seeds, lrs) may raise throughput'
    """
    devices = busy.get("devices") or {}
    means = {i: d["pct_mean"] for i, d in devices.items()} or {"": busy["pct_mean"]}
    low_at = min(means, key=means.__getitem__)
    low = means[low_at]
    by = "; by GPU: " + ", ".join(f"{i} {m:.0f}%" for i, m in means.items()) if devices else ""
    head = f"GPU busy {busy['pct_mean']:.0f}% of the sweep (NVML, {busy['n_samples']} samples{by})"
    if low >= BOUND_PCT:
        return (f"{head}: a kernel ran nearly all the time, so more cells at once (--jobs) have "
                "little idle time to fill; they can gain only where their kernels run side by "
                "side (MPS)")  # fmt: skip
    on = f" on GPU {low_at}" if devices else ""
    more = ("every cell already ran at once, so more cells in one sweep (seeds, lrs)"
            if all_at_once else "more cells at once (--jobs)")  # fmt: skip
    return f"{head}: no kernel ran {100 - low:.0f}% of the time{on}; {more} may raise throughput"
