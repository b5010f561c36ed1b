"""The "clip+adamw" case of ``andrea-diag bench-kernels``: a whole clipped AdamW step, three ways.

    from andrea_diag.bench.adamw import adamw_summary, bench_adamw_case
    rows = bench_adamw_case("120m", timer, "cuda", copy_gbps)   # or run_bench(cases=(..., "clip+adamw"))

One whole optimizer step, clip included (fp32 parameters and gradients): torch's
``clip_grad_norm_(foreach)`` + torch AdamW(fused=True); our three-kernel clip + torch's fused
AdamW; ``ClippedAdamW`` (norm kernels + ``k_adamw_clipped``, the scale folded into the update).
Each variant's first step from the same state is checked against the float64 reference before
it is timed; every repetition restores params, grads, moments and step counters. Useful bytes:
8 x 4 bytes per parameter (the norm reads g; AdamW reads p, g, m, v and writes p, m, v), the
least any clipped AdamW step can move. Timing method: :mod:`andrea_diag.bench.harness`, the
only module this one builds on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from andrea_diag.bench.harness import (
    ACTIVE,
    CHECK_TOL,
    INACTIVE,
    BenchResult,
    Row,
    Timer,
    capture_graph,
    find,
    grad_shapes,
    make_grads,
    make_row,
)
from andrea_diag.clip import reference

ADAMW_HYPER = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
ADAMW_STEP0 = 10.0  # step counters start here: bias corrections well away from step 1
# rel err vs float64 after one step: params, exp_avg, exp_avg_sq (fp32 arithmetic everywhere)
ADAMW_TOL = {"p": 1e-6, "m": 2e-5, "v": 2e-5}
BASELINE = "torch_clip+torch_fused_adamw"  # the speed-up column divides by this variant
# torch's whole step, eager and graphed: a peer. Our variants are held to ADAMW_TOL and raise on a
# miss; a peer's clip is torch's fp32 norm, which the clip case holds to its gradient bound
# (CHECK_TOL: on the CPU it sums sequentially, ~5e-5 off at 12m, so the params landed 1.1e-6
# off, past ADAMW_TOL, and the run died). A gradient off by d moves each tensor's one-step change
# by about d (m takes it linearly, sqrt(v) to first order; x2 for margin), so a peer may miss the
# truth by ADAMW_TOL + 2 x PEER_GRAD_TOL x ||change|| / ||new|| (_peer_tolerance). A peer past
# even that is flagged (Row.within_tol False), recorded and timed: torch's result is not ours.
PEERS = (BASELINE, BASELINE + "_graph")
PEER_GRAD_TOL = CHECK_TOL[torch.float32][1]


@dataclass
class _AdamwSet:
    """One preset's optimizer state: pristine copies plus the live tensors every variant updates."""

    p_init: list[torch.Tensor]
    g_init: list[torch.Tensor]
    m_init: list[torch.Tensor]
    v_init: list[torch.Tensor]
    params: list[torch.nn.Parameter]
    grads: list[torch.Tensor]
    ms: list[torch.Tensor]
    vs: list[torch.Tensor]
    steps: list[torch.Tensor]

    def restore(self) -> None:
        torch._foreach_copy_([p.detach() for p in self.params], self.p_init)
        torch._foreach_copy_(self.grads, self.g_init)
        torch._foreach_copy_(self.ms, self.m_init)
        torch._foreach_copy_(self.vs, self.v_init)
        torch._foreach_zero_(self.steps)
        torch._foreach_add_(self.steps, ADAMW_STEP0)

    def share_state(self, opt: torch.optim.Optimizer) -> None:
        # Both optimizers update the same tensors, so one restore() resets either.
        for p, m, v, st in zip(self.params, self.ms, self.vs, self.steps, strict=True):
            opt.state[p] = {"step": st, "exp_avg": m, "exp_avg_sq": v}


def _adamw_set(size: str, device: str) -> _AdamwSet:
    """The preset's real shapes; params, grads and moments from fixed seeds."""
    shapes = grad_shapes(size)
    p_init = make_grads(shapes, torch.float32, device, seed=1)
    g_init = make_grads(shapes, torch.float32, device, seed=0)
    m_init = [x.mul_(0.1) for x in make_grads(shapes, torch.float32, device, seed=2)]
    v_init = [x.mul_(x).mul_(0.01) for x in make_grads(shapes, torch.float32, device, seed=3)]
    params = [torch.nn.Parameter(x.clone()) for x in p_init]
    for p, g in zip(params, g_init, strict=True):
        p.grad = g.clone()
    return _AdamwSet(
        p_init,
        g_init,
        m_init,
        v_init,
        params,
        grads=[p.grad for p in params],
        ms=[x.clone() for x in m_init],
        vs=[x.clone() for x in v_init],
        steps=[torch.full((), ADAMW_STEP0, dtype=torch.float32, device=device) for _ in params],
    )


def _float64_step(s: _AdamwSet, max_norm: float, device: str) -> list[list[torch.Tensor]]:
    """float64 truth of one step from the pristine state: [params, exp_avg, exp_avg_sq]."""
    from andrea_diag.clip.fused_adamw import clip_adamw_

    t_p = [x.double() for x in s.p_init]
    t_m, t_v = [x.double() for x in s.m_init], [x.double() for x in s.v_init]
    t_s = [torch.full((), ADAMW_STEP0, device=device) for _ in s.p_init]
    b1, b2 = ADAMW_HYPER["betas"]
    clip_adamw_(
        t_p, [g.double() for g in s.g_init], t_m, t_v, t_s, max_norm=max_norm,
        lr=ADAMW_HYPER["lr"], beta1=b1, beta2=b2, eps=ADAMW_HYPER["eps"],
        weight_decay=ADAMW_HYPER["weight_decay"], impl="reference",
    )  # fmt: skip
    return [t_p, t_m, t_v]


def _variants(
    s: _AdamwSet,
    topt: torch.optim.Optimizer,
    copt: torch.optim.Optimizer,
    max_norm: float,
    on_gpu: bool,
) -> dict[str, Callable[[], Any]]:
    """Whole steps, name -> fn(); on a GPU also our clip + torch AdamW and the graph replays."""
    variants: dict[str, Callable[[], Any]] = {
        BASELINE: lambda m=max_norm: (
            torch.nn.utils.clip_grad_norm_(s.params, m, foreach=True),
            topt.step(),
        ),
        "ClippedAdamW": copt.step,
        "torch_fused_adamw(no clip)": topt.step,
    }
    if on_gpu:
        from andrea_diag.clip import cuda

        variants["cuda_clip+torch_fused_adamw"] = lambda m=max_norm: (
            cuda.clip(s.grads, m, variant="three"),
            topt.step(),
        )
        # torch refuses to capture a step unless the group says capturable (the fused path
        # ignores the flag otherwise); set it only while capturing, so eager rows are as-is.
        topt.param_groups[0]["capturable"] = True
        variants.update(_graph_steps(variants, s.restore))
        topt.param_groups[0]["capturable"] = False
    return variants


def _peer_tolerance(s: _AdamwSet, truth: list[list[torch.Tensor]]) -> dict[str, float]:
    """A peer's tolerance for params, exp_avg and exp_avg_sq (see :data:`PEERS`): ours plus what
    a clipped gradient off by ``PEER_GRAD_TOL`` moves, from each tensor's one-step change."""
    inits = (s.p_init, s.m_init, s.v_init)
    # rel_err(old, new) is ||old - new|| / ||new|| in float64: the share one step changes
    return {k: ADAMW_TOL[k] + 2 * PEER_GRAD_TOL * reference.rel_err(old, new)
            for k, new, old in zip("pmv", truth, inits, strict=True)}  # fmt: skip


def _within(errs: dict[str, float], tol: dict[str, float]) -> bool:
    return all(errs[k] <= tol[k] for k in ("p", "m", "v"))  # NaN, inf: outside


def _checked_rows(
    size: str,
    mode: str,
    variants: dict[str, Callable[[], Any]],
    s: _AdamwSet,
    truth: list[list[torch.Tensor]],
    timer: Timer,
    useful: int,
) -> list[Row]:
    """Each variant's first step checked against ``truth`` (one of ours raises if wrong; a peer
    is flagged, see :data:`PEERS`), then timed."""
    peer_tol: dict[str, float] = {}  # computed for the first peer past ours: costs 3 norms
    rows = []
    for name, fn in variants.items():
        s.restore()
        fn()
        errs = {k: reference.rel_err(got, want)
                for k, got, want in zip("pmv", (list(s.params), s.ms, s.vs), truth, strict=True)}  # fmt: skip
        ok: bool | None = _within(errs, ADAMW_TOL)
        if "no clip" in name:
            ok = None  # AdamW alone: not the clipped step the truth is, so not checked
        elif not ok and name in PEERS:
            peer_tol = peer_tol or _peer_tolerance(s, truth)
            ok = _within(errs, peer_tol)
        elif not ok:
            raise AssertionError(f"{name} {size} {mode}: rel err params {errs['p']:.2e}, "
                                 f"m {errs['m']:.2e}, v {errs['v']:.2e}")  # fmt: skip
        row = make_row(size, "fp32", mode, name, timer(fn, s.restore), useful,
                       rel_err_params=errs["p"], within_tol=ok)  # fmt: skip
        row.rel_err_grads = errs["m"]  # the moments carry the (clipped) gradient
        rows.append(row)
    return rows


def bench_adamw_case(size: str, timer: Timer, device: str, copy_gbps: float) -> list[Row]:
    """Case "clip+adamw" on one preset (fp32); raises if a step of ours is wrong (a peer's
    miss is flagged in its row, :data:`PEERS`)."""
    from andrea_diag.clip.fused_adamw import ClippedAdamW

    on_gpu = device.startswith("cuda")
    s = _adamw_set(size, device)
    # fused=True on a GPU (the baseline the issue names); torch >= 2.4 also has a CPU fused path.
    topt = torch.optim.AdamW(s.params, **ADAMW_HYPER, fused=True)
    nbytes = sum(p.numel() for p in s.params) * 4
    useful = 8 * nbytes
    s.share_state(topt)
    rows: list[Row] = []
    for mode, max_norm in (("adamw-active", ACTIVE), ("adamw-inactive", INACTIVE)):
        copt = ClippedAdamW(s.params, **ADAMW_HYPER, max_norm=max_norm)
        s.share_state(copt)
        truth = _float64_step(s, max_norm, device)
        variants = _variants(s, topt, copt, max_norm, on_gpu)
        mode_rows = _checked_rows(size, mode, variants, s, truth, timer, useful)
        if on_gpu:
            mode_rows.append(_adamw_kernel_row(size, mode, max_norm, s, timer))
            mode_rows[-1].bytes = 7 * nbytes
        base = next(r.ms for r in mode_rows if r.variant == BASELINE)
        for r in mode_rows:
            r.speedup_vs_torch = base / r.ms
            r.gbps = r.bytes / (r.ms * 1e-3) / 1e9
            r.pct_copy = 100.0 * r.gbps / copy_gbps if copy_gbps else None
        rows += mode_rows
        del truth
    return rows


def _adamw_kernel_row(size: str, mode: str, max_norm: float, s: _AdamwSet, timer: Timer) -> Row:
    """k_adamw_clipped alone (scale and flag precomputed): the update's own cost, 7 x bytes."""
    from andrea_diag.clip import cuda

    ext = cuda.load_dev()
    grads = [p.grad for p in s.params]
    # the scale and flag come from the production clipper (csrc/clip.cu); dev holds only
    # the AdamW kernels
    _, _, scale, nonfinite = cuda.load().clip(grads, max_norm, 2.0, False)
    b1, b2 = ADAMW_HYPER["betas"]
    hyper = dict(
        lr=ADAMW_HYPER["lr"],
        beta1=b1,
        beta2=b2,
        eps=ADAMW_HYPER["eps"],
        weight_decay=ADAMW_HYPER["weight_decay"],
    )
    args = ([p.detach() for p in s.params], grads, s.ms, s.vs, s.steps, scale, nonfinite)
    times = timer(lambda: ext.adamw_clipped(*args, **hyper))
    return make_row(size, "fp32", mode, "k_adamw_clipped(alone)", times, 0)


def _graph_steps(
    variants: dict[str, Callable[[], Any]], restore: Callable[[], None]
) -> dict[str, Callable[[], Any]]:
    """Each whole step captured in a CUDA graph and replayed: device time without host gaps."""
    out = {}
    for name in (BASELINE, "cuda_clip+torch_fused_adamw", "ClippedAdamW"):
        captured = capture_graph(name, variants[name], restore)
        if captured is not None:
            out[name + "_graph"] = captured[0].replay
    return out


def adamw_summary(result: BenchResult) -> list[str]:
    """Sentences: the fused step vs torch, and what an active clip costs on top of AdamW."""
    lines = []
    for size in result.meta.get("adamw_sizes", []):
        for sfx in ("", "_graph"):

            def ms(mode: str, variant: str, sfx: str = sfx, size: str = size) -> float | None:
                r = find(result, size, "fp32", mode, variant + sfx)
                return r.ms * 1e3 if r else None  # microseconds

            t_a = ms("adamw-active", BASELINE)
            o_a = ms("adamw-active", "ClippedAdamW")
            if t_a is None or o_a is None:
                continue
            h_a = ms("adamw-active", "cuda_clip+torch_fused_adamw")
            o_i = ms("adamw-inactive", "ClippedAdamW")
            alone = ms("adamw-active", "torch_fused_adamw(no clip)", "")
            kern = ms("adamw-active", "k_adamw_clipped(alone)", "")
            parts = [
                f"{size} fp32, clip active{' (CUDA graph)' if sfx else ''}: torch {t_a:.0f} us"
            ]
            if h_a is not None:
                parts.append(f"our clip + torch fused AdamW {h_a:.0f} us")
            parts.append(f"ClippedAdamW {o_a:.0f} us = {t_a / o_a:.2f}x faster than torch")
            if o_i is not None:
                parts.append(f"ClippedAdamW with the clip inactive {o_i:.0f} us")
            if not sfx and alone is not None:
                parts.append(f"torch fused AdamW alone {alone:.0f} us")
            if not sfx and kern is not None:
                parts.append(
                    f"k_adamw_clipped alone {kern:.0f} us (active clip adds {o_a - kern:.0f} us)"
                )
            lines.append("; ".join(parts))
    return lines
