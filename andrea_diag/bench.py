"""Kernel timing harness behind ``andrea-diag bench-kernels`` (and the bench/ pytest suite).

    from andrea_diag.bench import run_bench
    result = run_bench(sizes=["12m", "120m"], dtypes=["fp32", "bf16"], reps=100, device="cuda")

Method (llm.c dev/cuda style): every variant is checked against a float64 truth (torch's own
clip_grad_norm_ on float64 copies) BEFORE it is timed; each repetition restores the pristine
gradients, flushes L2 by writing a buffer larger than it, then times one call with CUDA events
(perf_counter on CPU); the median of ``reps`` repetitions after warm-up is reported with the
bytes it must move, GB/s, % of the copy bandwidth measured in the same run, and the speed-up
over torch's foreach clip_grad_norm_ in the same mode.

Bytes: a clip with active clipping must read the gradients (norm) and read + write them (scale):
3 x bytes; a step whose norm stays below max_norm needs only the read: 1 x bytes. torch's
functions always do the 3 x, but are charged the same useful bytes so the columns compare.

Case "clip+adamw" (fp32 parameters and gradients; :func:`bench_adamw_case`): one whole
optimizer step, clip included, three ways: torch's clip_grad_norm_(foreach) + torch AdamW
(fused=True); our three-kernel clip + torch's fused AdamW; ClippedAdamW (norm kernels +
k_adamw_clipped, the scale folded into the update). Each variant's first step from the same
state is checked against the float64 reference before it is timed; every repetition restores
params, grads, moments and step counters. Useful bytes: 8 x 4 bytes per parameter (the norm
reads g; AdamW reads p, g, m, v and writes p, m, v), the least any clipped AdamW step can move.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from andrea_diag.clip import reference
from andrea_diag.config import MODEL_PRESETS

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CASES = ("clip", "clip+adamw")
ACTIVE, INACTIVE = 1.0, 1e30  # max_norm: far below the ~1e2-1e4 norms of the sets / never hit
L2_FLUSH_BYTES = 256 * 2**20  # > 4x the H200's 60 MB L2
# Tolerances of the pre-timing check (relative to float64). torch in bf16 computes its norm in
# bf16, hence the loose bf16 norm bound; our own rel errors are recorded and far smaller.
CHECK_TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 1e-2), torch.float16: (2e-3, 2e-3)}


@dataclass
class Row:
    """One timed variant on one gradient set."""

    size: str
    dtype: str
    mode: str  # "active" | "inactive" | "stage" | "copy"
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


@dataclass
class BenchResult:
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


class Timer:
    """Median-of-reps timer: CUDA events on a GPU, perf_counter on the CPU; flushes L2 each rep."""

    def __init__(self, device: str, reps: int, warmup: int) -> None:
        self.device, self.reps, self.warmup = device, reps, warmup
        self.cuda = device.startswith("cuda")
        flush = L2_FLUSH_BYTES if self.cuda else 32 * 2**20
        self._flush = torch.empty(flush // 4, dtype=torch.float32, device=device)

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
                self._flush.zero_()
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
                self._flush.zero_()
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return times


def _row(
    size: str, dt: str, mode: str, variant: str, times: list[float], nbytes: int, **kw: Any
) -> Row:
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


def _clip_variants(device: str) -> dict[str, Callable[[list[torch.Tensor], float], torch.Tensor]]:
    """Whole clip steps: fn(grads, max_norm) -> total norm (grads clipped in place)."""
    import andrea_diag

    v: dict[str, Callable[[list[torch.Tensor], float], torch.Tensor]] = {
        "torch_foreach": lambda g, m: torch.nn.utils.clip_grad_norm_(
            [reference.GradHolder(x) for x in g], m, foreach=True
        ),
        "torch_loop": lambda g, m: torch.nn.utils.clip_grad_norm_(
            [reference.GradHolder(x) for x in g], m, foreach=False
        ),
        "reference": lambda g, m: reference.clip_reference(g, m)[0],
    }
    if device.startswith("cuda"):
        from andrea_diag.clip import cuda

        v["cuda_three"] = lambda g, m: cuda.clip(g, m, variant="three")[0]
        v["cuda_single"] = lambda g, m: cuda.clip(g, m, variant="single")[0]
        # the public drop-in, Python dispatch included (what a training loop pays)
        v["cuda_dropin"] = lambda g, m: andrea_diag.clip_grad_norm_(
            [reference.GradHolder(x) for x in g], m, impl="cuda"
        )
    return v


def bench_case(size: str, dt: str, timer: Timer, device: str, copy_gbps: float) -> list[Row]:
    """All variants on one (preset, dtype) gradient set; raises if any variant is wrong."""
    dtype = DTYPES[dt]
    pristine = make_grads(grad_shapes(size), dtype, device)
    grads = [g.clone() for g in pristine]
    nbytes = sum(g.numel() * g.element_size() for g in grads)

    def restore() -> None:
        torch._foreach_copy_(grads, pristine)

    rows: list[Row] = []
    tol_norm, tol_grad = CHECK_TOL[dtype]
    for mode, max_norm in (("active", ACTIVE), ("inactive", INACTIVE)):
        total64, _, truth = reference.float64_truth(pristine, max_norm)
        useful = 3 * nbytes if mode == "active" else nbytes
        mode_rows = []
        variants = dict(_clip_variants(device))
        if device.startswith("cuda"):
            variants.update(_graph_variants(grads, max_norm, restore))
        for name, fn in variants.items():
            restore()
            total = fn(grads, max_norm)
            e_norm, e_grad = reference.rel_err(total, total64), reference.rel_err(grads, truth)
            if not (e_norm <= tol_norm and e_grad <= tol_grad):
                raise AssertionError(
                    f"{name} {size} {dt} {mode}: rel err norm {e_norm:.2e}, grads {e_grad:.2e}"
                )
            times = timer(lambda fn=fn, m=max_norm: fn(grads, m), restore)
            mode_rows.append(
                _row(size, dt, mode, name, times, useful, rel_err_norm=e_norm, rel_err_grads=e_grad)
            )
        base = next(r.ms for r in mode_rows if r.variant == "torch_foreach")
        for r in mode_rows:
            r.speedup_vs_torch = base / r.ms
        rows += mode_rows
        del truth
    if device.startswith("cuda"):
        rows += _stage_rows(size, dt, grads, pristine, restore, timer, nbytes)
    for r in rows:
        r.pct_copy = 100.0 * r.gbps / copy_gbps if copy_gbps else None
    return rows


def _graph_variants(
    grads: list[torch.Tensor], max_norm: float, restore: Callable[[], None]
) -> dict[str, Callable[[list[torch.Tensor], float], torch.Tensor]]:
    """The same steps captured in a CUDA graph and replayed: device time without host latency
    (what a graph-captured training step pays). Also proves the path survives capture."""
    from andrea_diag.clip import cuda

    steps = {
        "torch_foreach_graph": lambda: torch.nn.utils.clip_grad_norm_(
            [reference.GradHolder(x) for x in grads], max_norm, foreach=True
        ),
        "cuda_three_graph": lambda: cuda.clip(grads, max_norm, variant="three")[0],
    }
    out = {}
    for name, step in steps.items():
        captured = capture_graph(name, step, restore)
        if captured is not None:
            graph, total = captured
            out[name] = lambda g, m, graph=graph, total=total: (graph.replay(), total)[1]
    return out


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


def _stage_rows(size, dt, grads, pristine, restore, timer, nbytes) -> list[Row]:
    """Each kernel alone, checked first: partial (1x read), final (tiny), scale (r+w or skip)."""
    from andrea_diag.clip import cuda

    restore()
    parts = cuda.norm_partial(grads)
    ref_parts = reference.grad_norm_partial(pristine, acc_dtype=torch.float64)
    e_parts = reference.rel_err(parts, ref_parts)
    offs = cuda.chunk_offsets(grads)
    total, _, scale, _ = cuda.norm_final(parts, offs, ACTIVE)
    e_final = reference.rel_err(total, reference.float64_truth(pristine, ACTIVE)[0])
    cuda.scale_(grads, scale)
    expect = [(g.double() * scale.double()) for g in pristine]
    e_scale = reference.rel_err(grads, expect)
    tol_grad = CHECK_TOL[DTYPES[dt]][1]
    if not (e_parts <= 1e-5 and e_final <= 1e-5 and e_scale <= tol_grad):
        raise AssertionError(
            f"stages {size} {dt}: partial {e_parts:.2e} final {e_final:.2e} scale {e_scale:.2e}"
        )
    one = torch.ones((), device=grads[0].device)
    return [
        _row(
            size,
            dt,
            "stage",
            "k_grad_norm_partial",
            timer(lambda: cuda.norm_partial(grads)),
            nbytes,
            rel_err_norm=e_parts,
        ),
        _row(
            size,
            dt,
            "stage",
            "k_grad_norm_final",
            timer(lambda: cuda.norm_final(parts, offs, ACTIVE)),
            parts.numel() * 4,
            rel_err_norm=e_final,
        ),
        _row(
            size,
            dt,
            "stage",
            "k_grad_scale",
            timer(lambda: cuda.scale_(grads, scale), restore),
            2 * nbytes,
            rel_err_grads=e_scale,
        ),
        _row(size, dt, "stage", "k_grad_scale(skip)", timer(lambda: cuda.scale_(grads, one)), 0),
    ]


def adamw_summary(result: BenchResult) -> list[str]:
    """See :func:`andrea_diag.bench_adamw.adamw_summary` (kept here: recorded commands call it)."""
    from andrea_diag.bench_adamw import adamw_summary as summary

    return summary(result)


def copy_bandwidth(device: str, timer: Timer, nbytes: int = 2**30) -> Row:
    """Device-to-device copy of ``nbytes``; GB/s counts bytes read + written (DEVICE.md's way)."""
    src = torch.randn(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    if not torch.equal(dst, src):
        raise AssertionError("copy check failed")
    return _row(
        "-", "fp32", "copy", "copy", timer(lambda: dst.copy_(src)), 2 * nbytes, pct_copy=100.0
    )


def resolve_device(device: str) -> str:
    """ "auto" -> "cuda" when a GPU is visible, else "cpu"."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def run_bench(
    sizes: list[str],
    dtypes: list[str],
    reps: int,
    device: str = "auto",
    warmup: int = 5,
    progress: Callable[[str], None] | None = None,
    cases: tuple[str, ...] = CASES,
    adamw_sizes: list[str] | None = None,
) -> BenchResult:
    """Time every variant on every (size, dtype) set; see the module docstring for the method.

    ``cases``: "clip" (every size x dtype) and/or "clip+adamw" (fp32, on ``adamw_sizes``,
    default ``sizes``).
    """
    # imported here: bench_adamw builds on this module's harness
    from andrea_diag.bench_adamw import ADAMW_HYPER, ADAMW_STEP0, bench_adamw_case

    bad = [c for c in cases if c not in CASES]
    if bad:
        raise ValueError(f"unknown cases {bad}; choose from {CASES}")
    adamw_sizes = list(adamw_sizes if adamw_sizes is not None else sizes)
    if "clip+adamw" not in cases:
        adamw_sizes = []
    if "clip" not in cases:
        sizes = []
    from andrea_diag import telemetry

    device = resolve_device(device)
    meta: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "reps": reps,
        "warmup": warmup,
        "sizes": sizes,
        "dtypes": dtypes,
        "cases": list(cases),
        "adamw_sizes": adamw_sizes,
        "adamw_hyper": {**ADAMW_HYPER, "step0": ADAMW_STEP0},  # from bench_adamw
        "active_max_norm": ACTIVE,
        "inactive_max_norm": INACTIVE,
        "l2_flush_bytes": L2_FLUSH_BYTES if device != "cpu" else 32 * 2**20,
    }
    if device.startswith("cuda"):
        from andrea_diag.clip import cuda

        ok, why = cuda.available()
        if not ok:
            raise RuntimeError(f"CUDA clipper unavailable: {why}")
        meta["gpu"] = torch.cuda.get_device_name(device)
    else:
        meta["gpu"] = None
        meta["note"] = "no GPU: CPU paths only (reference vs torch)"
    timer = Timer(device, reps, warmup)
    result = BenchResult(meta)
    with telemetry.Telemetry() as tel:
        copy_row = copy_bandwidth(device, timer, 2**30 if device != "cpu" else 2**26)
        result.rows.append(copy_row)
        meta["copy_gbps"] = copy_row.gbps
        for size in sizes:
            for dt in dtypes:
                if progress:
                    progress(f"{size} {dt}")
                result.rows += bench_case(size, dt, timer, device, copy_row.gbps)
                if device.startswith("cuda"):
                    torch.cuda.empty_cache()
        for size in adamw_sizes:
            if progress:
                progress(f"{size} fp32 clip+adamw")
            result.rows += bench_adamw_case(size, timer, device, copy_row.gbps)
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    meta["telemetry"] = tel.summary()
    return result


def find(result: BenchResult, size: str, dt: str, mode: str, variant: str) -> Row | None:
    """The row for one (size, dtype, mode, variant), if it was measured."""
    for r in result.rows:
        if (r.size, r.dtype, r.mode, r.variant) == (size, dt, mode, variant):
            return r
    return None


def three_vs_one(result: BenchResult) -> list[str]:
    """Sentences answering "why three kernels, not one?" from this run's numbers."""
    lines = []
    for size in result.meta["sizes"]:
        for dt in result.meta["dtypes"]:
            for mode in ("active", "inactive"):
                a = find(result, size, dt, mode, "cuda_three")
                b = find(result, size, dt, mode, "cuda_single")
                if a and b:
                    lines.append(
                        f"{size} {dt} {mode}: three kernels {a.ms * 1e3:.1f} us "
                        f"({a.pct_copy or 0:.0f}% of copy BW) vs one cooperative launch "
                        f"{b.ms * 1e3:.1f} us ({b.pct_copy or 0:.0f}%): {b.ms / a.ms:.2f}x"
                    )
    return lines


def targets(result: BenchResult) -> list[tuple[str, float | None, float, bool]]:
    """The issue's H200 targets: (what, measured, wanted, met)."""

    def sp(size, dt, mode):
        r = find(result, size, dt, mode, "cuda_three")
        return r.speedup_vs_torch if r else None

    r = find(result, "120m", "fp32", "active", "cuda_three")
    checks = [
        ("120m fp32 active speed-up", sp("120m", "fp32", "active"), 2.5),
        ("120m fp32 active % copy BW", r.pct_copy if r else None, 85.0),
        ("120m fp32 inactive speed-up", sp("120m", "fp32", "inactive"), 6.0),
        ("120m bf16 active speed-up", sp("120m", "bf16", "active"), 2.5),
        ("12m fp32 active speed-up", sp("12m", "fp32", "active"), 5.0),
    ]
    return [(w, m, want, m is not None and m >= want) for w, m, want in checks]


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)
