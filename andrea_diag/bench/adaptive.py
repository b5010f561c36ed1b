"""The "adaptive" case of ``bench-kernels``: each clip mode's cost per update against ``global``.

    from andrea_diag.bench.adaptive import bench_adaptive_case, adaptive_summary

Every mode runs through the registry (``make_clipper``), as a cascade arm calls it: the fused
norm pass on CUDA plus the mode's own work (ZClip's EMA and scale, AGC's unit norms, SPAM's
element clamp against Adam's ``v`` and its post-clip norm pass, skip's window statistics).
Each mode is first warmed past its warm-up (ZClip's 25 norms, half of skip's window, SPAM's
post-reset window) so the timed call is the steady state, and checked against the same mode
with ``impl="reference"`` on the same gradients. The timed call restores the gradients first
(outside the timed region). Bytes are charged as an active clip's (read, read + write), so the
GB/s column compares with the clip case; the ms column is what a training step pays.
"""

from __future__ import annotations

from typing import Any

import torch

from andrea_diag.bench.harness import (
    DTYPES,
    BenchResult,
    Row,
    Timer,
    find,
    grad_shapes,
    make_grads,
    make_row,
)
from andrea_diag.clip import reference
from andrea_diag.clip.modes import Clipper, make_clipper
from andrea_diag.clip_params import ClipParams

MODES = ("none", "global", "zclip", "agc", "spam", "skip")
CHECK_TOL = {torch.float32: 1e-4, torch.bfloat16: 1e-2, torch.float16: 2e-3}


class _Set:
    """Parameters with gradients of one preset, an Adam with state, and pristine gradients."""

    def __init__(self, size: str, dtype: torch.dtype, device: str) -> None:
        shapes = grad_shapes(size)
        self.pristine = make_grads(shapes, dtype, device)
        weights = make_grads(shapes, dtype, device, seed=1)
        self.params = [torch.nn.Parameter(w) for w in weights]
        self.opt = torch.optim.Adam(self.params, lr=1e-4, fused=device.startswith("cuda"))
        self.restore()
        self.opt.step()  # Adam's state exists: SPAM reads v
        self.restore()

    def restore(self) -> None:
        for p, g in zip(self.params, self.pristine, strict=True):
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)

    @property
    def grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self.params]


def _prepared(mode: str, impl: str, s: _Set) -> Clipper:
    """A clipper past its warm-up: the timed call is the steady state."""
    params = ClipParams()
    clipper = make_clipper(mode, 1.0, impl, params, optimizer=s.opt)
    warm = {"zclip": params.zclip_warmup, "skip": params.skip_window // 2}.get(mode, 0)
    for _ in range(warm):
        s.restore()
        clipper(s.params)
    return clipper


def _spam_steady(clipper: Clipper) -> None:
    """Keep SPAM inside its clipping window (never at a reset, never in its warm-up)."""
    if hasattr(clipper, "calls"):
        clipper.calls = clipper.params.spam_warmup  # the next call is warm-up + 1


def bench_adaptive_case(size: str, dt: str, timer: Timer, device: str) -> list[Row]:
    """Every mode on one (preset, dtype): checked against its reference, then timed."""
    dtype = DTYPES[dt]
    s = _Set(size, dtype, device)
    nbytes = sum(g.numel() * g.element_size() for g in s.pristine)
    rows: list[Row] = []
    for mode in MODES:
        ref = _prepared(mode, "reference", s)
        _spam_steady(ref)
        s.restore()
        ref(s.params)
        expect = [g.clone() for g in s.grads]
        clipper = _prepared(mode, "auto", s)
        _spam_steady(clipper)
        s.restore()
        res = clipper(s.params)
        err = reference.rel_err(s.grads, expect)
        if not err <= CHECK_TOL[dtype]:
            raise AssertionError(f"{mode} {size} {dt}: rel err grads {err:.2e} vs the reference")
        del expect

        def setup(c: Clipper = clipper) -> None:
            s.restore()
            _spam_steady(c)

        times = timer(lambda c=clipper: c(s.params), setup)
        rows.append(make_row(size, dt, "adaptive", mode, times, 3 * nbytes, rel_err_grads=err))
        del res
    return rows


def adaptive_summary(result: BenchResult) -> list[str]:
    """'12m fp32: zclip 0.081 ms = global + 0.012 ms (1.17x)' for every measured mode."""
    lines = []
    for size in result.meta.get("adaptive_sizes", []):
        for dt in result.meta.get("dtypes", []):
            g = find(result, size, dt, "adaptive", "global")
            if g is None:
                continue
            for mode in MODES:
                r = find(result, size, dt, "adaptive", mode)
                if r is None or mode == "global":
                    continue
                lines.append(
                    f"{size} {dt}: {mode} {r.ms:.3f} ms = global {g.ms:.3f} ms "
                    f"{r.ms - g.ms:+.3f} ms ({r.ms / g.ms:.2f}x)"
                )
    return lines


def adaptive_meta(sizes: list[str]) -> dict[str, Any]:
    return {"adaptive_sizes": sizes, "adaptive_modes": list(MODES)}
