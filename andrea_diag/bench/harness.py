"""The shared timing harness of the kernel benchmarks: gradient sets, the timer, rows, helpers.

    from andrea_diag.bench.harness import Timer, grad_shapes, make_grads, make_row
    timer = Timer("cuda", reps=100, warmup=5)
    grads = make_grads(grad_shapes("120m"), torch.bfloat16, "cuda")
    row = make_row("120m", "bf16", "active", "mine", timer(lambda: step(grads)), nbytes)

Method (llm.c dev/cuda style): every variant is checked against a float64 truth BEFORE it is
timed (each case does its own check); each repetition restores the pristine state, flushes L2
by writing a buffer larger than it, then times one call with CUDA events (perf_counter on CPU);
the median of ``reps`` repetitions after warm-up is reported with the bytes it must move, GB/s,
% of the copy bandwidth measured in the same run, and the speed-up over torch in the same mode.

The cases built on this module: :mod:`andrea_diag.bench.clip` (the clipper alone) and
:mod:`andrea_diag.bench.adamw` (a whole clipped AdamW step). Nothing here imports them.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from andrea_diag.config import MODEL_PRESETS

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ACTIVE, INACTIVE = 1.0, 1e30  # max_norm: far below the ~1e2-1e4 norms of the sets / never hit
L2_FLUSH_BYTES = 256 * 2**20  # > 4x the H200's 60 MB L2
CPU_FLUSH_BYTES = 32 * 2**20  # the CPU timer's flush buffer (recorded in the run metadata)
# The clip case's tolerances (norm, gradients) relative to float64, before timing. torch in bf16
# computes its norm in bf16, hence the loose bf16 norm bound; torch's fp32 norm on the CPU sums
# sequentially (off by ~5e-5 at 12m, ~1e-4 at 120m), and the clip+adamw case allows its peers
# the fp32 gradient bound (bench.adamw). Our own rel errors are recorded and far smaller.
CHECK_TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 1e-2), torch.float16: (2e-3, 2e-3)}


@dataclass
class Row:
    """One timed variant on one gradient set."""

    size: str
    dtype: str
    mode: str  # "active" | "inactive" | "stage" | "copy" | "adamw-active" | "adamw-inactive"
    variant: str
    ms: float  # median
    ms_p10: float
    ms_p90: float
    bytes: int
    gbps: float
    pct_copy: float | None = None
    speedup_vs_torch: float | None = None
    rel_err_norm: float | None = None
    rel_err_grads: float | None = None
    rel_err_params: float | None = None  # clip+adamw: params after one step vs float64
    # the pre-timing check against float64: True passed; False a peer (torch) that missed its
    # tolerance, recorded and timed, not raised (a variant of ours that misses raises: no row);
    # None where no such check was recorded (the copy, the kernel stages, a step without clip)
    within_tol: bool | None = None


@dataclass
class BenchResult:
    """A whole benchmark run: metadata (device, versions, settings, telemetry) and its rows."""

    meta: dict[str, Any]
    rows: list[Row] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"meta": self.meta, "rows": [asdict(r) for r in self.rows]}


def grad_shapes(size: str) -> list[torch.Size]:
    """Parameter shapes of the real preset, built on the meta device (no memory)."""
    from andrea_diag.model import GPT

    with torch.device("meta"):
        model = GPT(MODEL_PRESETS[size])
    return [p.shape for p in model.parameters()]


def make_grads(
    shapes: list[torch.Size], dtype: torch.dtype, device: str, seed: int = 0
) -> list[torch.Tensor]:
    """Random gradients with per-tensor scales spread over 1e-3..1 (real layers differ too)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    out = []
    for i, s in enumerate(shapes):
        g = torch.randn(s, generator=gen, device=device, dtype=torch.float32)
        out.append(g.mul_(10.0 ** (-3 * ((i * 7) % 11) / 10)).to(dtype))
    return out


def spin_cycles_per_us() -> float:
    """How many ``torch.cuda._sleep`` cycles make a microsecond on this GPU (timed once)."""
    torch.cuda._sleep(1000)  # the first call loads the kernel
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(10**7)
    b.record()
    b.synchronize()
    return 10**7 / (a.elapsed_time(b) * 1e3)


class Timer:
    """Median-of-reps timer: CUDA events on a GPU, perf_counter on the CPU; flushes L2 each rep."""

    def __init__(
        self, device: str, reps: int, warmup: int, clean_l2: bool = False, hold_us: float = 0.0
    ) -> None:
        self.device, self.reps, self.warmup = device, reps, warmup
        self.cuda = device.startswith("cuda")
        flush = L2_FLUSH_BYTES if self.cuda else CPU_FLUSH_BYTES
        self._flush = torch.empty(flush // 4, dtype=torch.float32, device=device)
        # clean_l2: after the write flush, read a second buffer as large, so that L2 holds clean
        # lines and the timed call is not charged the write-back of the flush's dirty lines.
        self._clean = torch.zeros_like(self._flush) if clean_l2 else None
        # hold_us: a GPU spin of this long after the flush (NVBench's blocking kernel), so the
        # start event and the timed call are queued while the GPU is busy: a host slower than
        # the flush would otherwise put its launch gap between the event and the first kernel.
        self._hold = round(hold_us * spin_cycles_per_us()) if hold_us and self.cuda else 0

    def _flush_l2(self) -> None:
        self._flush.zero_()
        if self._clean is not None:
            self._clean.sum()
        if self._hold:
            torch.cuda._sleep(self._hold)  # outside the timed region: before the start event

    def __call__(
        self, fn: Callable[[], Any], setup: Callable[[], Any] | None = None
    ) -> list[float]:
        for _ in range(self.warmup):
            if setup:
                setup()
            fn()
        times = []
        if self.cuda:
            pairs = []
            for _ in range(self.reps):
                if setup:
                    setup()
                self._flush_l2()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                pairs.append((a, b))
            torch.cuda.synchronize()  # host sync: reading the timings (outside the timed region)
            times = [a.elapsed_time(b) for a, b in pairs]
        else:
            for _ in range(self.reps):
                if setup:
                    setup()
                self._flush_l2()
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return times


def make_row(
    size: str, dt: str, mode: str, variant: str, times: list[float], nbytes: int, **kw: Any
) -> Row:
    """A :class:`Row` from one variant's timings: median, p10, p90 and GB/s over ``nbytes``."""
    ms = statistics.median(times)
    q = sorted(times)
    return Row(
        size,
        dt,
        mode,
        variant,
        ms,
        q[len(q) // 10],
        q[(len(q) * 9) // 10],
        nbytes,
        nbytes / (ms * 1e-3) / 1e9,
        **kw,
    )


def check_run_args(sizes: list[str], dtypes: list[str], reps: int, warmup: int) -> None:
    """A :class:`~andrea_diag.errors.BadArgument` (a ``ValueError``) for what ``run_bench``
    cannot time, before it times anything: an unknown preset or dtype was a ``KeyError`` after
    the copy bandwidth was measured, ``reps=0`` a ``StatisticsError`` (no median) after the
    first case's set-up."""
    from andrea_diag.errors import BadArgument

    for what, given, known in (("size", sizes, MODEL_PRESETS), ("dtype", dtypes, DTYPES)):
        bad = [x for x in given if not isinstance(x, str) or x not in known]
        if bad:
            raise BadArgument(f"unknown {what} {bad[0]!r}", hint=f"choose from {', '.join(known)}")
    for name, value, least in (("reps", reps, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise BadArgument(f"{name} must be a whole number of at least {least}, got {value!r}")


def copy_bandwidth(device: str, timer: Timer, nbytes: int = 2**30) -> Row:
    """Device-to-device copy of ``nbytes``; GB/s counts bytes read + written (DEVICE.md's way)."""
    src = torch.randn(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    if not torch.equal(dst, src):
        raise AssertionError("copy check failed")
    return make_row(
        "-", "fp32", "copy", "copy", timer(lambda: dst.copy_(src)), 2 * nbytes, pct_copy=100.0
    )


def capture_graph(
    name: str, step: Callable[[], Any], restore: Callable[[], None]
) -> tuple[torch.cuda.CUDAGraph, Any] | None:
    """Warm ``step`` up off the capture stream, then capture it: (graph, step's output), or
    None when capture fails (printed: a capture failure is a finding, not a crash of the run)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as torch recommends
        for _ in range(2):
            restore()
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            result = step()
    except RuntimeError as exc:
        print(f"bench: {name} could not be captured: {str(exc).splitlines()[0]}")
        return None
    return graph, result


def graph_replay(
    name: str,
    step: Callable[[], Any],
    restore: Callable[[], None],
    setting: tuple[Callable[[Any], Any], Any] | None = None,
) -> Callable[[], Any] | None:
    """``step`` captured (:func:`capture_graph`) as a replay that returns the step's output;
    None when capture failed. ``setting``: (setter, value) of a kernel setting read at launch,
    so fixed at capture: set for the capture alone (the setter returns the one it replaces)."""
    before = setting[0](setting[1]) if setting else None
    try:
        captured = capture_graph(name, step, restore)
    finally:
        if setting:
            setting[0](before)
    if captured is None:
        return None
    graph, total = captured
    return lambda: (graph.replay(), total)[1]


def find(result: BenchResult, size: str, dt: str, mode: str, variant: str) -> Row | None:
    """The row for one (size, dtype, mode, variant), if it was measured."""
    for r in result.rows:
        if (r.size, r.dtype, r.mode, r.variant) == (size, dt, mode, variant):
            return r
    return None


def peer_misses(result: BenchResult) -> list[str]:
    """One sentence per peer row whose float64 check missed (``within_tol`` False): its errors
    are recorded and its time stands, but its result is not what ours is checked against."""
    lines = []
    for r in result.rows:
        if r.within_tol is False:
            errs = [f"{what} {fmt(x, '.1e')}" for what, x in (("norm", r.rel_err_norm),
                    ("grads", r.rel_err_grads), ("params", r.rel_err_params)) if x is not None]  # fmt: skip
            lines.append(
                f"{r.variant} ({r.size} {r.dtype} {r.mode}) is outside its tolerance against "
                f"float64 (rel err {', '.join(errs)}): torch's rounding, not a kernel of ours; "
                "timed and recorded all the same"
            )
    return lines


def fmt(x: float | None, spec: str = ".3f") -> str:
    """``x`` formatted with ``spec``; "-" for a missing or NaN value (tables and pages)."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)
