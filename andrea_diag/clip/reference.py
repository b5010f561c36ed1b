"""Pure-torch reference of the three-kernel clipper, stage for stage.

The CUDA kernels in ``csrc/clip.cu`` implement exactly these stages; keep the two in sync
(chunk size, eps, the scale formula):

1. ``grad_norm_partial``: every (tensor, chunk) pair of ``CHUNK`` elements reduces to one
   partial sum of ``|g|^p`` (a max for p = inf), accumulated in ``acc_dtype``.
2. ``grad_norm_final``: partials -> per-tensor sums (segment sums over each tensor's chunks) and
   the total, in a fixed order (deterministic), then the root, a non-finite flag and
   ``scale = min(1, max_norm / (norm + EPS))``.
3. ``grad_scale_``: multiply every gradient in place by ``scale``, always (even when scale ==
   1: skipping would need a host read; the CUDA kernel reads the scale on the device and
   returns early instead).

Nothing here syncs with the host: every result stays a tensor on the gradients' device.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import torch

# Elements per (tensor, chunk) work item; keep in sync with kChunk in csrc/clip.h. 16384, not
# 65536: the 12m set then has ~1.1k blocks instead of ~300, enough to fill 132 SMs (the 65536
# build reached 58% of copy bandwidth on the 12m norm pass, H200 2026-11-29).
CHUNK = 16384
EPS = 1e-6  # torch.nn.utils.clip_grad_norm_ uses the same epsilon


def acc_dtype(grads: Sequence[torch.Tensor]) -> torch.dtype:
    """The partial sums' dtype: float32 for fp32/bf16/fp16 gradients, float64 when any is
    float64 (the one rule of the drop-in, the kernels' fallback, fused AdamW and sharding)."""
    return torch.float64 if any(g.dtype == torch.float64 for g in grads) else torch.float32


def norm_type_ok(norm_type: float) -> bool:
    """p > 0 or inf. torch also takes 0 and -inf; the three-stage sums cannot (0^0, a minimum)."""
    return norm_type > 0 or norm_type == math.inf


class TooLargeForFloat(ValueError, OverflowError):
    """A ``max_norm`` or ``norm_type`` past the largest float (``10**400``): torch's ``float()``
    of it is a bare ``OverflowError`` ("int too large to convert to float"), still caught as
    one; a ``ValueError`` naming the argument here, as every other bad value is."""


def as_float(value: object, name: str, unbounded: str) -> float:
    """``float(value)`` (what torch's clip does with the argument), or :class:`TooLargeForFloat`
    naming ``name`` where the number has no float. ``unbounded``: what math.inf means for it
    (a huge int is more likely a slip than that, so it is not read as inf)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:
        try:  # an int past 4,300 digits has no repr: its size instead
            sign = "-" if value < 0 else ""  # type: ignore[operator]
            size = f"about {sign}10^{math.log10(abs(value)):.0f}"  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            size = "too large"
        raise TooLargeForFloat(
            f"{name} must be a number a float can hold (at most {sys.float_info.max:.4g}), got "
            f"{type(value).__name__} {size} ({unbounded})"
        ) from None


BOOL_DTYPES = ("bool", "torch.bool")  # a numpy or torch bool scalar's dtype, as str() says it


def norm_type_value(norm_type: object) -> float:
    """``norm_type`` as a float, as torch's ``float()`` reads it (``"inf"``, as torch's docs
    show, or a one-element tensor too), except a bool: torch reads ``True`` as 1 and takes the
    L1 norm without a word, where a bool ``max_norm`` is refused. A ``TypeError`` for a bool,
    :class:`TooLargeForFloat` for a number past the largest float."""
    if isinstance(norm_type, bool) or str(getattr(norm_type, "dtype", "")) in BOOL_DTYPES:
        raise TypeError(f"norm_type must be a number (2.0, 1.0, math.inf or 'inf'), got "
                        f"{type(norm_type).__name__} {norm_type!r}"[:200])  # fmt: skip
    return as_float(norm_type, "norm_type", "math.inf is the max norm")


def check_norm_type(norm_type: float) -> float:
    """``norm_type`` as a float (:func:`norm_type_value`), or the one error that names it."""
    norm_type = norm_type_value(norm_type)
    if not norm_type_ok(norm_type):
        raise ValueError(f"norm_type must be positive or inf, got {norm_type}")
    return norm_type


def chunk_counts(grads: Sequence[torch.Tensor], chunk: int = CHUNK) -> list[int]:
    """Chunks per tensor: ceil(numel / chunk); an empty tensor has none."""
    return [math.ceil(g.numel() / chunk) for g in grads]


def grad_norm_partial(
    grads: Sequence[torch.Tensor],
    norm_type: float = 2.0,
    acc_dtype: torch.dtype = torch.float32,
    chunk: int = CHUNK,
) -> torch.Tensor:
    """Stage 1: one partial per (tensor, chunk), concatenated in tensor order."""
    parts = []
    for g in grads:
        n = g.numel()
        if n == 0:
            continue
        flat = g.detach().reshape(-1).to(acc_dtype)
        pad = (-n) % chunk
        if pad:  # zero padding changes neither a sum of |g|^p nor a max of |g|
            flat = torch.nn.functional.pad(flat, (0, pad))
        blocks = flat.view(-1, chunk).abs()
        if math.isinf(norm_type):
            parts.append(blocks.amax(dim=1))
        elif norm_type == 2.0:
            parts.append((blocks * blocks).sum(dim=1))
        else:
            parts.append(blocks.pow(norm_type).sum(dim=1))
    if not parts:
        device = grads[0].device if grads else torch.device("cpu")
        return torch.zeros(0, dtype=acc_dtype, device=device)
    return torch.cat(parts)


def grad_norm_final(
    partials: torch.Tensor,
    counts: Sequence[int],
    max_norm: float,
    norm_type: float = 2.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage 2: (total_norm, per_tensor_norm, scale, nonfinite), all on ``partials.device``."""
    device, dtype = partials.device, partials.dtype
    n_tensors = len(counts)
    # output_size: the length is known on the host; without it repeat_interleave reads the
    # counts back (a sync on CUDA) and has no meta kernel, so tracing on "meta" crashed.
    seg = torch.repeat_interleave(
        torch.arange(n_tensors, device=device),
        torch.tensor(counts, device=device),
        output_size=sum(counts),
    )
    per = torch.zeros(n_tensors, dtype=dtype, device=device)
    if math.isinf(norm_type):
        if partials.numel():
            per = per.scatter_reduce(0, seg, partials, reduce="amax", include_self=True)
        total = per.amax() if n_tensors else torch.zeros((), dtype=dtype, device=device)
        per_norm = per
    else:
        per = per.index_add(0, seg, partials)
        total_p = per.sum() if n_tensors else torch.zeros((), dtype=dtype, device=device)
        total = total_p.pow(1.0 / norm_type)
        per_norm = per.pow(1.0 / norm_type)
    nonfinite = ~torch.isfinite(total)
    scale = torch.clamp(max_norm / (total + EPS), max=1.0)
    return total, per_norm, scale, nonfinite


def grad_scale_(grads: Sequence[torch.Tensor], scale: torch.Tensor) -> None:
    """Stage 3: in place ``g *= scale`` for every gradient (scale is a 0-dim device tensor)."""
    grads = [g for g in grads if g.numel()]
    if not grads:
        return
    # Like torch's clip_grad_norm_, always multiply: skipping on scale == 1 would need a host
    # read here. (The CUDA kernel reads the scale on the device and returns early instead.)
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(g)
    for dtype, group in by_dtype.items():
        if dtype in (torch.float32, torch.float64):
            torch._foreach_mul_(group, scale.to(dtype))
        else:
            # Half types: multiply in fp32 and round once, as k_grad_scale does (casting the
            # scale to bf16 first would add a second rounding of up to 2^-9).
            for g in group:
                g.copy_(g.float() * scale.float())


def clip_reference(
    grads: Sequence[torch.Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    acc_dtype: torch.dtype = torch.float32,
    apply: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """All three stages; returns (total_norm, per_tensor_norm, scale, nonfinite)."""
    partials = grad_norm_partial(grads, norm_type, acc_dtype)
    total, per, scale, nonfinite = grad_norm_final(
        partials, chunk_counts(grads), max_norm, norm_type
    )
    if apply:
        grad_scale_(grads, scale)
    return total, per, scale, nonfinite


class GradHolder:
    """A parameter stand-in: torch's clip_grad_norm_ (and ours) only read ``.grad``, so bare
    gradient tensors can go through them wrapped in this."""

    def __init__(self, grad: torch.Tensor) -> None:
        self.grad = grad


def float64_truth(
    grads: Sequence[torch.Tensor], max_norm: float, norm_type: float = 2.0
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """torch's own clip_grad_norm_ on float64 copies: (total, per_tensor, clipped grads).

    The ground truth that tests and benchmarks check every implementation against; the inputs
    are left untouched. An empty tensor has norm 0 and adds nothing to the total, for every p
    (0 is the identity of sums and of maxes of |g|), as in the kernels and clip_reference; torch
    refuses the inf norm of an empty tensor, so empty tensors are left out of its call.
    """
    copies = [g.detach().to(torch.float64).clone() for g in grads]
    # on the gradients' device: a CPU zero beside CUDA norms would not stack
    device = copies[0].device if copies else torch.device("cpu")
    zero = torch.zeros((), dtype=torch.float64, device=device)
    per = torch.stack(
        [torch.linalg.vector_norm(c, norm_type) if c.numel() else zero for c in copies] or [zero]
    )[: len(copies)]
    filled = [GradHolder(c) for c in copies if c.numel()]
    total = torch.nn.utils.clip_grad_norm_(filled, max_norm, norm_type) if filled else zero
    return total, per, copies


def rel_err(
    out: Sequence[torch.Tensor] | torch.Tensor, ref: Sequence[torch.Tensor] | torch.Tensor
) -> float:
    """||out - ref|| / ||ref|| over all elements in float64 (0 when both are 0; NaN-aware)."""
    if isinstance(out, torch.Tensor):
        out, ref = [out], [ref]
    num = den = 0.0
    for o, r in zip(out, ref, strict=True):
        o64, r64 = o.detach().double().cpu().reshape(-1), r.detach().double().cpu().reshape(-1)
        bad = ~torch.isfinite(r64)  # non-finite truth must be matched exactly (NaN <-> NaN)
        o_bad, r_bad = o64[bad], r64[bad]
        if bool((o_bad.isnan() != r_bad.isnan()).any()) or bool(
            ((o_bad != r_bad) & ~r_bad.isnan()).any()
        ):
            return math.inf
        if not bool(torch.isfinite(o64[~bad]).all()):
            return math.inf  # a non-finite value where the truth is finite
        fin = torch.isfinite(r64)
        num += float(((o64 - r64)[fin] ** 2).sum())
        den += float((r64[fin] ** 2).sum())
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return math.sqrt(num / den)
