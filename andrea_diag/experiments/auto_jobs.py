"""``--jobs auto``, the default of ``sweep`` and ``ladder``: how many cells share each GPU.

    >>> from andrea_diag.config import RunConfig
    >>> cells = [RunConfig(size="12m").resolve()]
    >>> cells_per_gpu(cells, gpu_memory=141 * GIB)[0]    # an H200
    8
    >>> cells_per_gpu([RunConfig(size="120m").resolve()], gpu_memory=24 * GIB)[0]
    2

Why these numbers (reports/throughput-h200/, one H200, ``--cuda-graph`` cells of 1,500 updates):
8 cells of 12m side by side under MPS gave 1.68x the arm-updates per second of one cell at a
time, and 16 cells 1.67x, so 8 is on the plateau; 4 cells of 120m gave 1.28x, as much as 8 seeds
batched into every kernel. So: :data:`CELLS_SMALL` cells per GPU for models up to
:data:`SMALL_PARAMS` parameters, :data:`CELLS_LARGE` above, and fewer where the smallest
visible GPU's memory would not hold them. A cell's CUDA peak, measured over the whole ladder
(12m 1.9 GiB .. 120m 7.0 GiB, ``summary.json`` ``peaks``), stays under :data:`PEAK_BASE` +
:data:`PEAK_PER_PARAM` bytes per parameter at the presets' 16 x 256 tokens per microbatch; each
process adds a CUDA context and the allocator's slack. A bigger ``--micro-batch`` or
``--seq-len`` needs more: pass ``--jobs N`` then.

One cell at a time (in the sweep's own process) on the CPU, where cells would share its few
cores, and for the submitit executors, whose ``--jobs`` counts jobs in flight (the
scheduler's business).
"""

from __future__ import annotations

from collections.abc import Sequence

from andrea_diag.config import RunConfig

GIB = 2**30
SMALL_PARAMS = 40_000_000  # between the ladder's 30m (34.4M) and 60m (60.7M) rungs
CELLS_SMALL, CELLS_LARGE = 8, 4  # the measured plateaus at 12m and 120m (see above)
PEAK_BASE = 1.2 * GIB  # a cell's CUDA peak: base + per-parameter bytes (fp32 weights, grads,
PEAK_PER_PARAM = 64  # Adam's m and v, the shadow copies, activations at 16 x 256 tokens)
PEAK_MARGIN = 1.2  # on the planned peak: the ladder's own peaks varied by up to 20% per rung
CELL_OVERHEAD = 1.0 * GIB  # a process's CUDA context and the allocator's slack beyond its peak
MEMORY_SHARE = 0.9  # of the smallest GPU's memory for the cells (the rest: other users, drift)


def cell_bytes(n_params: int) -> float:
    """The GPU memory one cell of a model of ``n_params`` parameters is planned to take."""
    return CELL_OVERHEAD + PEAK_MARGIN * (PEAK_BASE + PEAK_PER_PARAM * n_params)


def cells_per_gpu(configs: Sequence[RunConfig], gpu_memory: int | None) -> tuple[int, str]:
    """(cells per GPU, why) for these cells on GPUs of ``gpu_memory`` bytes (None: unknown, so
    no memory cap): sized for the largest model among them, which the ladder runs first."""
    n_params, largest = max(((c.model.n_params(), c) for c in configs), key=lambda p: p[0])
    cap = CELLS_SMALL if n_params <= SMALL_PARAMS else CELLS_LARGE
    why = f"{largest.size}, {n_params / 1e6:.0f}M parameters"
    if gpu_memory is None:
        return cap, why
    fits = int(MEMORY_SHARE * gpu_memory // cell_bytes(n_params))
    jobs = max(1, min(cap, fits))
    return jobs, f"{why}; {gpu_memory / GIB:.0f} GiB per GPU"


def smallest_gpu_memory() -> int | None:
    """The total memory of the smallest GPU this process sees, in bytes; None when unknown.
    A device's properties need no CUDA context (gpu_busy.py reads them the same way)."""
    import torch

    try:
        n = torch.cuda.device_count()
        return (
            min(torch.cuda.get_device_properties(i).total_memory for i in range(n)) if n else None
        )
    except Exception:  # a driver that answers nothing: plan without a memory cap
        return None


def auto_jobs(kind: str, cuda: bool, configs: Sequence[RunConfig]) -> tuple[int, str]:
    """(``--jobs``, a phrase saying why) for ``--jobs auto``: ``kind`` is the executor,
    ``cuda`` whether the cells land on a GPU here (``executor.uses_cuda``)."""
    if kind != "local":
        return 1, f"one job in flight with --executor {kind}"
    if not cuda:
        return 1, "one cell at a time on the CPU"
    jobs, why = cells_per_gpu(configs, smallest_gpu_memory())
    return jobs, f"{jobs} cells per GPU ({why})"
