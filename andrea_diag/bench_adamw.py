"""The "clip+adamw" case of ``andrea-diag bench-kernels``: a whole clipped AdamW step, three ways.

torch's ``clip_grad_norm_(foreach)`` + torch AdamW(fused=True); our three-kernel clip + torch's
fused AdamW; ``ClippedAdamW`` (norm kernels + ``k_adamw_clipped``, the scale folded into the
update). Method and byte accounting: see ``bench.py``'s module docstring; the shared harness
(Timer, rows, gradient sets) lives there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from andrea_diag.bench import (
    ACTIVE,
    INACTIVE,
    BenchResult,
    Row,
    Timer,
    _row,
    capture_graph,
    find,
    grad_shapes,
    make_grads,
)
from andrea_diag.clip import reference

ADAMW_HYPER = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
ADAMW_STEP0 = 10.0  # step counters start here: bias corrections well away from step 1
# rel err vs float64 after one step: params, exp_avg, exp_avg_sq (fp32 arithmetic everywhere)
ADAMW_TOL = {"p": 1e-6, "m": 2e-5, "v": 2e-5}


def bench_adamw_case(size: str, timer: Timer, device: str, copy_gbps: float) -> list[Row]:
    """Case "clip+adamw" on one preset (fp32); raises if any variant's step is wrong."""
    from andrea_diag.clip.fused_adamw import ClippedAdamW, clip_adamw_

    on_gpu = device.startswith("cuda")
    shapes = grad_shapes(size)
    p_init = make_grads(shapes, torch.float32, device, seed=1)
    g_init = make_grads(shapes, torch.float32, device, seed=0)
    m_init = [x.mul_(0.1) for x in make_grads(shapes, torch.float32, device, seed=2)]
    v_init = [x.mul_(x).mul_(0.01) for x in make_grads(shapes, torch.float32, device, seed=3)]
    params = [torch.nn.Parameter(x.clone()) for x in p_init]
    for p, g in zip(params, g_init, strict=True):
        p.grad = g.clone()
    grads = [p.grad for p in params]
    ms = [x.clone() for x in m_init]
    vs = [x.clone() for x in v_init]
    steps = [torch.full((), ADAMW_STEP0, dtype=torch.float32, device=device) for _ in params]
    # fused=True on a GPU (the baseline the issue names); torch >= 2.4 also has a CPU fused path.
    topt = torch.optim.AdamW(params, **ADAMW_HYPER, fused=True)
    nbytes = sum(p.numel() for p in params) * 4
    useful = 8 * nbytes

    def restore() -> None:
        torch._foreach_copy_([p.detach() for p in params], p_init)
        torch._foreach_copy_(grads, g_init)
        torch._foreach_copy_(ms, m_init)
        torch._foreach_copy_(vs, v_init)
        torch._foreach_zero_(steps)
        torch._foreach_add_(steps, ADAMW_STEP0)

    def share_state(opt: torch.optim.Optimizer) -> None:
        # Both optimizers update the same tensors, so one restore() resets either.
        for p, m, v, st in zip(params, ms, vs, steps, strict=True):
            opt.state[p] = {"step": st, "exp_avg": m, "exp_avg_sq": v}

    share_state(topt)
    rows: list[Row] = []
    for mode, max_norm in (("adamw-active", ACTIVE), ("adamw-inactive", INACTIVE)):
        copt = ClippedAdamW(params, **ADAMW_HYPER, max_norm=max_norm)
        share_state(copt)
        # float64 truth of one step from the pristine state
        t_p = [x.double() for x in p_init]
        t_m, t_v = [x.double() for x in m_init], [x.double() for x in v_init]
        t_s = [torch.full((), ADAMW_STEP0, device=device) for _ in p_init]
        b1, b2 = ADAMW_HYPER["betas"]
        clip_adamw_(
            t_p, [g.double() for g in g_init], t_m, t_v, t_s, max_norm=max_norm,
            lr=ADAMW_HYPER["lr"], beta1=b1, beta2=b2, eps=ADAMW_HYPER["eps"],
            weight_decay=ADAMW_HYPER["weight_decay"], impl="reference",
        )  # fmt: skip
        variants: dict[str, Callable[[], Any]] = {
            "torch_clip+torch_fused_adamw": lambda m=max_norm: (
                torch.nn.utils.clip_grad_norm_(params, m, foreach=True),
                topt.step(),
            ),
            "ClippedAdamW": copt.step,
            "torch_fused_adamw(no clip)": topt.step,
        }
        if on_gpu:
            from andrea_diag.clip import cuda

            variants["cuda_clip+torch_fused_adamw"] = lambda m=max_norm: (
                cuda.clip(grads, m, variant="three"),
                topt.step(),
            )
            # torch refuses to capture a step unless the group says capturable (the fused path
            # ignores the flag otherwise); set it only while capturing, so eager rows are as-is.
            topt.param_groups[0]["capturable"] = True
            variants.update(_graph_steps(variants, restore))
            topt.param_groups[0]["capturable"] = False
        mode_rows = []
        for name, fn in variants.items():
            restore()
            fn()
            e_p = reference.rel_err(list(params), t_p)
            e_m, e_v = reference.rel_err(ms, t_m), reference.rel_err(vs, t_v)
            if "no clip" not in name and not (
                e_p <= ADAMW_TOL["p"] and e_m <= ADAMW_TOL["m"] and e_v <= ADAMW_TOL["v"]
            ):
                raise AssertionError(
                    f"{name} {size} {mode}: rel err params {e_p:.2e}, m {e_m:.2e}, v {e_v:.2e}"
                )
            row = _row(size, "fp32", mode, name, timer(fn, restore), useful, rel_err_params=e_p)
            row.rel_err_grads = e_m  # the moments carry the (clipped) gradient
            mode_rows.append(row)
        if on_gpu:
            mode_rows.append(_adamw_kernel_row(size, mode, max_norm, params, ms, vs, steps, timer))
            mode_rows[-1].bytes = 7 * nbytes
        base = next(r.ms for r in mode_rows if r.variant == "torch_clip+torch_fused_adamw")
        for r in mode_rows:
            r.speedup_vs_torch = base / r.ms
            r.gbps = r.bytes / (r.ms * 1e-3) / 1e9
            r.pct_copy = 100.0 * r.gbps / copy_gbps if copy_gbps else None
        rows += mode_rows
        del t_p, t_m, t_v
    return rows


def _adamw_kernel_row(size, mode, max_norm, params, ms, vs, steps, timer) -> Row:
    """k_adamw_clipped alone (scale and flag precomputed): the update's own cost, 7 x bytes."""
    from andrea_diag.clip import cuda

    ext = cuda.load()
    grads = [p.grad for p in params]
    _, _, scale, nonfinite = ext.clip(grads, max_norm, 2.0, False)
    b1, b2 = ADAMW_HYPER["betas"]
    hyper = dict(
        lr=ADAMW_HYPER["lr"],
        beta1=b1,
        beta2=b2,
        eps=ADAMW_HYPER["eps"],
        weight_decay=ADAMW_HYPER["weight_decay"],
    )
    args = ([p.detach() for p in params], grads, ms, vs, steps, scale, nonfinite)
    times = timer(lambda: ext.adamw_clipped(*args, **hyper))
    return _row(size, "fp32", mode, "k_adamw_clipped(alone)", times, 0)


def _graph_steps(
    variants: dict[str, Callable[[], Any]], restore: Callable[[], None]
) -> dict[str, Callable[[], Any]]:
    """Each whole step captured in a CUDA graph and replayed: device time without host gaps."""
    out = {}
    for name in ("torch_clip+torch_fused_adamw", "cuda_clip+torch_fused_adamw", "ClippedAdamW"):
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

            t_a = ms("adamw-active", "torch_clip+torch_fused_adamw")
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
