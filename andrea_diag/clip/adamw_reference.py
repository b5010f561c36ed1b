"""The pure-torch step of :class:`~andrea_diag.clip.fused_adamw.ClippedAdamW`:
``torch.optim.AdamW``'s single-tensor step, op for op, with the clip's scale folded in.

torch's step (``torch/optim/adam.py``, ``_single_tensor_adam``, decoupled decay) runs one
in-place op after another, each rounding its result to the tensor's dtype, and computes a half
type (bf16, fp16) in float32 inside each op (its "opmath"). This mirror computes in that opmath
dtype and rounds where torch's ops round, so on the CPU it gives torch's bits for float32,
float64 and bf16 parameters (fp16: torch's half ``sqrt`` differs in the last bit on a few
elements). The step it replaced rounded elsewhere: one ulp apart in float32, and in bf16, where
it also rounded the step size, up to 18 ulps apart after one step (lr 0.1, weight decay 0.5).

Tensor hyper-parameters (torch takes tensor betas and a tensor weight decay) stay tensors in
torch's step, so ``1 - beta**t``, ``lr / (1 - beta1**t)`` and ``1 - lr * weight_decay`` round in
their dtype: float32 for ``torch.tensor(0.9)``, where ``1 - 0.999**t`` loses digits to
cancellation; and a tensor beta1 is cast to the parameter's dtype before ``1 - beta1`` (bf16:
``1 - bf16(0.9)``). This mirror did all of it in float64 before, 1.5e-7 apart from torch after
five float64 steps at lr 1e-2. It follows torch per beta (a group may hold one of each).

torch's CPU ``foreach=True`` step gives the same bits in float32 and float64 (it takes only
float betas); in bf16/fp16 its multi-tensor ops round some products elsewhere (a few ulps on
some elements after one step). Its ``fused=True`` CPU kernel computes each element's update in
one pass (float32 for half types, no rounding in between) and reads tensor betas as float64,
so it differs from its own default step, and from this one, by a few ulps in float32/float64
with float betas, by up to ~1e-5 of ``lr`` a step with float32 tensor betas (float64
parameters too), and by several ulps in bf16/fp16 (tests/test_parity_s31_adamw.py pins the
float32/float64 bounds). On CUDA torch's AdamW runs its foreach or fused kernels; there the two
agree to rounding. Nothing here reads a value on the host but a step count that lives on the
CPU (torch's CPU step reads it too) and CPU scalars derived from tensor betas.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

_HALF = (torch.float16, torch.bfloat16)


def _rounded(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` rounded to ``dtype`` and back: what an in-place op on a ``dtype`` tensor keeps."""
    return x if x.dtype == dtype else x.to(dtype).to(x.dtype)


def _one_minus_pow(beta: float | torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """``1 - beta**t`` as torch's single-tensor step computes it. A float beta: in Python floats
    (float64), as this does in float64 tensors. A tensor beta: torch keeps it a tensor, so the
    power and the difference round in the beta's dtype (float32 for ``torch.tensor(0.9)``),
    with ``t`` read as a Python float (torch's ``_get_value``; free on the CPU, where torch
    reads it too). Off the CPU ``t`` stays a device tensor (no sync): torch runs other kernels
    there, and the two agree to rounding."""
    if isinstance(beta, torch.Tensor):
        t: float | torch.Tensor = step.item() if step.device.type == "cpu" else step
        return 1 - beta**t
    return 1.0 - beta ** step.to(torch.float64)


def _bias_terms(
    lr: float, beta1: float | torch.Tensor, beta2: float | torch.Tensor, step: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lr / (1 - beta1**t), sqrt(1 - beta2**t))`` as torch's single-tensor step computes
    them, each beta on its own (a param group may hold one tensor and one float beta)."""
    bc1, bc2 = _one_minus_pow(beta1, step), _one_minus_pow(beta2, step)
    # a tensor bc1: torch's ``lr / bc1`` is Tensor.__rtruediv__, reciprocal() * lr, two
    # roundings; a float one is Python's division, which torch.div in float64 is
    step_size = lr / bc1 if isinstance(beta1, torch.Tensor) else torch.div(lr, bc1)
    return step_size, bc2**0.5 if isinstance(beta2, torch.Tensor) else bc2.sqrt()


def _moment_weights(
    beta1: float | torch.Tensor, beta2: float | torch.Tensor, dt: torch.dtype
) -> tuple[float, float]:
    """The weights of torch's ``exp_avg.lerp_(grad, 1 - beta1)`` and
    ``addcmul_(grad, grad, value=1 - beta2)``. A tensor beta1 is first cast to the parameter's
    dtype (torch's ``device_beta1``): in bf16 ``1 - beta1`` is then ``1 - bf16(beta1)``; a
    tensor ``1 - beta2`` is computed in beta2's dtype. Both are CPU scalars here (betas on a
    device are refused), so reading them is no sync."""
    w1 = float(1 - beta1.to(dt)) if isinstance(beta1, torch.Tensor) else 1.0 - beta1
    return w1, float(1 - beta2)


def _decayed(
    p: torch.Tensor, lr: float, weight_decay: float | torch.Tensor, ct: torch.dtype
) -> torch.Tensor:
    """torch's ``param.mul_(1 - lr * weight_decay)`` in ``ct``, rounded to the parameter's
    dtype. A tensor weight decay (torch takes one) makes the factor a tensor of its dtype,
    rounded there (float32 for ``torch.tensor(0.1)``), then cast to the parameter's; a float
    one is a Python float. No host read either way. torch skips the op where the decay is 0,
    so an infinite lr (``1 - inf * 0`` is NaN) does not turn every weight into NaN there."""
    factor = 1 - lr * weight_decay
    if isinstance(factor, torch.Tensor):  # a CPU scalar multiplies a tensor on any device
        factor = torch.where(weight_decay != 0, factor, 1.0).to(ct)
    elif weight_decay == 0:
        factor = 1.0
    return _rounded(p.detach().to(ct) * factor, p.dtype)


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
    beta1: float | torch.Tensor,
    beta2: float | torch.Tensor,
    eps: float,
    weight_decay: float | torch.Tensor,
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
        step_size, bc2_sqrt = _bias_terms(lr, beta1, beta2, step)
        step_size, bc2_sqrt = step_size.to(ct), bc2_sqrt.to(ct)
        w1, w2 = _moment_weights(beta1, beta2, dt)
        gs = _rounded(g.detach().to(ct) * scale.to(ct), dt)
        # torch: param.mul_(1 - lr * wd); exp_avg.lerp_(grad, 1 - beta1);
        # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        p1 = _decayed(p, lr, weight_decay, ct)
        m1 = _rounded(m.to(ct).lerp(gs, w1), m.dtype)
        v1 = _rounded(torch.addcmul(_rounded(v.to(ct) * float(beta2), v.dtype), gs, gs,
                                    value=w2), v.dtype)  # fmt: skip
        # torch: denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps), three roundings;
        # param.addcdiv_(exp_avg, denom, value=-step_size): (value * m) / denom, one rounding
        denom = _rounded(_rounded(_rounded(v1.sqrt(), dt) / bc2_sqrt, dt) + eps, dt)
        p_new = (p1 - step_size * m1 / denom).to(dt)
        p.detach().copy_(torch.where(ok, p_new, p.detach()))
        m.copy_(torch.where(ok, m1.to(m.dtype), m))
        v.copy_(torch.where(ok, v1.to(v.dtype), v))
