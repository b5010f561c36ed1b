"""The pure-torch step of :class:`~andrea_diag.clip.fused_adamw.ClippedAdamW`:
``torch.optim.AdamW``'s single-tensor step, op for op, with the clip's scale folded in.

torch's step (``torch/optim/adam.py``, ``_single_tensor_adam``, decoupled decay) runs one
in-place op after another, each rounding its result to the tensor's dtype, and computes a half
type (bf16, fp16) in float32 inside each op (its "opmath"). This mirror computes in that opmath
dtype and rounds where torch's ops round, so on the CPU it gives torch's bits for float32,
float64 and bf16 parameters (fp16: torch's half ``sqrt`` differs in the last bit on a few
elements). The step it replaced rounded elsewhere: one ulp apart in float32, and in bf16, where
it also rounded the step size, up to 18 ulps apart after one step (lr 0.1, weight decay 0.5).

On CUDA torch's AdamW runs its foreach or fused kernels instead; there the two agree to
rounding. Nothing here reads a value on the host: the step count is a device tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

_HALF = (torch.float16, torch.bfloat16)


def _rounded(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` rounded to ``dtype`` and back: what an in-place op on a ``dtype`` tensor keeps."""
    return x if x.dtype == dtype else x.to(dtype).to(x.dtype)


def adamw_clipped_reference(
    params: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    exp_avgs: Sequence[torch.Tensor],
    exp_avg_sqs: Sequence[torch.Tensor],
    steps: Sequence[torch.Tensor],
    scale: torch.Tensor,
    nonfinite: torch.Tensor,
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
) -> None:
    """One AdamW step with ``g' = g * scale``, in place; a no-op where ``nonfinite`` is set.

    Pure torch, any device, no host sync: the skip is a ``torch.where`` on the device-side
    flag rather than a Python ``if``. The gradients are not modified; ``g * scale`` is rounded
    once to the parameter's dtype, as a clip in place before torch's step leaves it.
    """
    if not params:
        return
    ok = ~nonfinite.reshape(())
    for p, g, m, v, step in zip(params, grads, exp_avgs, exp_avg_sqs, steps, strict=True):
        step.add_(ok.to(step.dtype))  # skipped steps are not counted, as in torch's found_inf path
        dt = p.dtype
        ct = torch.float32 if dt in _HALF else dt  # torch's opmath dtype for dt
        st = step.to(torch.float64)
        # torch takes both as Python floats (float64) and each op reads them in its opmath;
        # torch.div, not lr / tensor: that is lr * reciprocal, a rounding torch does not make
        step_size = torch.div(lr, 1.0 - beta1**st).to(ct)
        bc2_sqrt = (1.0 - beta2**st).sqrt().to(ct)
        gs = _rounded(g.detach().to(ct) * scale.to(ct), dt)
        # torch: param.mul_(1 - lr * wd); exp_avg.lerp_(grad, 1 - beta1);
        # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        p1 = _rounded(p.detach().to(ct) * (1.0 - lr * weight_decay), dt)
        m1 = _rounded(m.to(ct).lerp(gs, 1.0 - beta1), m.dtype)
        v1 = _rounded(torch.addcmul(_rounded(v.to(ct) * beta2, v.dtype), gs, gs,
                                    value=1.0 - beta2), v.dtype)  # fmt: skip
        # torch: denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps), three roundings;
        # param.addcdiv_(exp_avg, denom, value=-step_size): (value * m) / denom, one rounding
        denom = _rounded(_rounded(_rounded(v1.sqrt(), dt) / bc2_sqrt, dt) + eps, dt)
        p_new = (p1 - step_size * m1 / denom).to(dt)
        p.detach().copy_(torch.where(ok, p_new, p.detach()))
        m.copy_(torch.where(ok, m1.to(m.dtype), m))
        v.copy_(torch.where(ok, v1.to(v.dtype), v))
