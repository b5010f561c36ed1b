"""``clip_grad_norm_``: a drop-in for ``torch.nn.utils.clip_grad_norm_``, plus the stats variant.

The drop-in's contract, and each place it still differs from torch's, is in its docstring.

    from andrea_diag import clip_grad_norm_
    total = clip_grad_norm_(model.parameters(), max_norm=1.0)        # impl="auto"

``impl`` chooses the implementation:

- ``"cuda"``: the fused extension (``csrc/clip.cu``); needs CUDA gradients and a compiler;
- ``"reference"``: the pure-torch three-stage mirror in ``reference.py`` (any device);
- ``"torch"``: ``torch.nn.utils.clip_grad_norm_`` itself (for comparison);
- ``"auto"``: ``"cuda"`` when the gradients are on a CUDA device and the extension builds,
  otherwise ``"reference"`` with a one-line notice (once per process).

:func:`clip_grad_norm_with_stats` returns a :class:`ClipResult` with the per-tensor norms from
the same pass (the probes' per-layer gradient norms), and supports ``mode="per-tensor"``.
No function here syncs with the host, except ``error_if_nonfinite=True``, which must read the
norm to decide whether to raise.
"""

from __future__ import annotations

import functools
import logging
import math
import types
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

import torch

from andrea_diag.clip import reference
from andrea_diag.clip.max_norm import MaxNormShapeError as MaxNormShapeError  # its old home
from andrea_diag.clip.max_norm import check_max_norm

log = logging.getLogger("andrea_diag.clip")
_notified: set[str] = set()

IMPLS = ("auto", "cuda", "reference", "torch")


@dataclass
class ClipResult:
    """What one clip call measured; every field is a tensor on the gradients' device."""

    total_norm: torch.Tensor  # 0-dim, pre-clip global norm (what torch's function returns)
    per_tensor_norm: torch.Tensor  # (n_tensors,), pre-clip norm of each gradient
    scale: torch.Tensor  # 0-dim global scale, or (n_tensors,) in per-tensor mode
    nonfinite: torch.Tensor  # 0-dim bool: the total norm is NaN or Inf
    impl: str  # the implementation that ran
    # 0-dim bool on the device: the mode asks that the optimizer step be skipped (``skip``);
    # None for modes that never skip. See ``clip.adaptive.step_unless``.
    skip: torch.Tensor | None = None
    # host bool: the mode reset the optimizer's moments this update (SPAM); the probes that
    # track spike terms in m and v drop them, since the reset erased them.
    moments_reset: bool = False
    # the p of total_norm and per_tensor_norm (torch's clip_grad_norm_ returns its total in the
    # norm it was given): SpikeMonitor.after_clip records L2 norms, and refuses a ClipResult
    # whose p is not the norm_type it was told (clip.from_total.clip_in_l2)
    norm_type: float = 2.0

    @property
    def post_norm(self) -> torch.Tensor:
        """0-dim global norm of the gradients after clipping (what the optimizer receives)."""
        if self.scale.dim() == 0:  # one scale for all (1 when nothing was clipped)
            return self.total_norm * self.scale
        # Nothing clipped: the pre-clip total itself. Re-summing the per-tensor norms rounds
        # differently, and a post norm a step below the total would read as a clipped update.
        return torch.where(
            (self.scale == 1).all(),
            self.total_norm,
            torch.linalg.vector_norm(self.per_tensor_norm * self.scale).to(self.total_norm.dtype),
        )


def _notice_once(key: str, message: str) -> None:
    if key not in _notified:
        _notified.add(key)
        log.warning(message)


class SparseGradientError(TypeError, NotImplementedError):
    """A sparse gradient: a TypeError naming it, and a NotImplementedError as torch's own
    ``clip_grad_norm_`` raises for it (so code written against torch's still catches it)."""


def _grads(parameters: torch.Tensor | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    # torch refuses these too (no sparse vector_norm), but ours failed deep in the chunked
    # stages with "reshape is not implemented for sparse tensors"
    if any(g.layout != torch.strided for g in grads):
        raise SparseGradientError(
            "clip_grad_norm_ does not support sparse gradients (torch's does not either); "
            "densify them first (p.grad = p.grad.to_dense())"
        )
    for g in grads:
        if not (g.dtype in NORM_DTYPES or g.is_complex()):
            _refuse_like_torch(g.dtype, g.device)
    return grads


# The real dtypes torch's vector_norm (and so its clip_grad_norm_) takes on every device
NORM_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _refuse_like_torch(dtype: torch.dtype, device: torch.device) -> NoReturn:
    """torch's own error for a gradient of a dtype it cannot take the norm of: an integer or
    bool ``.grad`` set by hand (RuntimeError "Expected a floating point or complex tensor"),
    or a float8 one (NotImplementedError '"norm_cpu" not implemented for 'Float8_e4m3fn'').
    Ours returned an integer norm and truncated the gradients, or clipped float8 ones and
    returned a float8 norm (e4m3fn has no inf: its largest is 448), so ``error_if_nonfinite``
    could raise on a finite norm. The error is torch's, from its norm of a two-element empty
    tensor on the gradients' device: the dtype check fails before any kernel runs (torch's norm
    of one float8 element is a copy, which it takes; its clip then fails on the add)."""
    on = torch.device("cpu") if device.type == "meta" else device  # meta kernels check no dtype
    torch.linalg.vector_norm(torch.empty(2, dtype=dtype, device=on))  # raises torch's own
    if dtype.is_floating_point:  # a torch whose norm takes it: still refused, nothing scaled
        raise NotImplementedError(
            f"clip_grad_norm_: {dtype} gradients are not supported (torch's norm refused "
            "them); cast them to bfloat16 or float32 first"
        )
    raise RuntimeError(
        f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got {dtype}"
    )


def _promoted_dtype(grads: list[torch.Tensor]) -> torch.dtype:
    """The dtype torch's norm (and the drop-in's return value) has: the grads' promoted one."""
    return functools.reduce(torch.promote_types, (g.dtype for g in grads))


def resolve_impl(impl: str, grads: list[torch.Tensor]) -> str:
    """Pick the implementation that will actually run for these gradients."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    devices = {g.device for g in grads}  # a set of device objects: no string per update
    if len(devices) > 1:  # every stage (and the per-tensor stack) gathers on one device
        raise ValueError(
            f"the gradients must be on one device, got {', '.join(sorted(map(str, devices)))} "
            "(andrea_diag.clip_grad_norm_ hands several devices to torch's own function)"
        )
    on_cuda = bool(grads) and grads[0].is_cuda
    if impl == "cuda":
        if not on_cuda:
            raise ValueError("impl='cuda' needs gradients on a CUDA device")
        from andrea_diag.clip import cuda as cuda_ext

        ok, why = cuda_ext.available()
        if not ok:
            raise RuntimeError(f"impl='cuda' requested but the CUDA clipper is unavailable: {why}")
        return "cuda"
    if impl != "auto":
        return impl
    if not on_cuda:
        return "reference"
    from andrea_diag.clip import cuda as cuda_ext

    ok, why = cuda_ext.available()
    if ok:
        return "cuda"
    _notice_once(
        "auto-fallback",
        f"andrea-diag: CUDA clipper unavailable ({why}); using the pure-torch reference",
    )
    return "reference"


@torch.no_grad()
def clip_grad_norm_with_stats(
    parameters: torch.Tensor | Iterable[torch.Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    *,
    mode: str = "global",
    impl: str = "auto",
    error_if_nonfinite: bool = False,
) -> ClipResult:
    """Clip gradients in place and return what the pass measured.

    ``mode="global"`` scales every gradient by ``min(1, max_norm / (total + 1e-6))``;
    ``mode="per-tensor"`` scales each gradient by its own ``min(1, max_norm / (norm_i + 1e-6))``;
    ``mode="none"`` measures only (no gradient is changed).

    ``error_if_nonfinite`` raises torch's error, before any gradient changes, when the total is
    non-finite in float32/float64 or in the gradients' own dtype, or when one fp16 gradient's
    norm is past 65504 (torch's norm of it is inf, and torch raises, though the float32 total
    here is finite, also beside float32 gradients).
    """
    if mode not in ("global", "per-tensor", "none"):
        raise ValueError(f"mode must be global, per-tensor or none, got {mode!r}")
    max_norm, norm_type = check_max_norm(max_norm), reference.check_norm_type(norm_type)
    grads = _grads(parameters)
    if any(g.is_complex() for g in grads):  # the chunked stages sum real |g|^p only
        raise TypeError(
            "complex gradients are not supported by clip_grad_norm_with_stats; "
            "andrea_diag.clip_grad_norm_ hands them to torch's own function"
        )
    if not grads:
        zero = torch.zeros(())
        return ClipResult(
            zero, torch.zeros(0), torch.ones(()), torch.zeros((), dtype=torch.bool), "none",
            norm_type=norm_type,
        )  # fmt: skip
    which = resolve_impl(impl, grads)
    apply_global = mode == "global"
    # torch raises before touching the gradients; to match, defer the scale stage past the check.
    apply_now = apply_global and not error_if_nonfinite
    if which == "cuda":
        from andrea_diag.clip import cuda as cuda_ext

        total, per, scale, nonfinite = cuda_ext.clip(grads, max_norm, norm_type, apply=apply_now)
    elif which == "torch":
        # torch's own function, for comparison; it only measures when nothing should change.
        per = torch.stack([torch.linalg.vector_norm(g.detach(), norm_type) for g in grads])
        holders = [reference.GradHolder(g) for g in grads]
        total = torch.nn.utils.clip_grad_norm_(
            holders,
            max_norm if apply_global else math.inf,
            norm_type,
            error_if_nonfinite=error_if_nonfinite,
        )
        nonfinite = ~torch.isfinite(total)
        scale = torch.clamp(max_norm / (total + reference.EPS), max=1.0)
        apply_now = apply_global  # torch already applied (or raised)
    else:
        total, per, scale, nonfinite = reference.clip_reference(
            grads, max_norm, norm_type, acc_dtype=reference.acc_dtype(grads), apply=apply_now
        )
    if error_if_nonfinite:
        _raise_if_nonfinite(total, per, nonfinite, grads, norm_type)
    if apply_global and not apply_now:
        _scale_stage(which, grads, scale, norm_type)
    if mode == "per-tensor":
        scale = torch.clamp(max_norm / (per + reference.EPS), max=1.0)
        for g, s in zip(grads, scale.unbind(0), strict=True):
            # half types: scale in fp32 and round once (like grad_scale_), not twice
            g.copy_(g.float() * s) if g.dtype in (torch.float16, torch.bfloat16) else g.mul_(s)
    elif mode == "none":
        scale = torch.ones_like(total)
    return ClipResult(total, per, scale, nonfinite, which, norm_type=norm_type)


def _raise_if_nonfinite(
    total: torch.Tensor,
    per: torch.Tensor,
    nonfinite: torch.Tensor,
    grads: list[torch.Tensor],
    norm_type: float,
) -> None:
    """torch's error where torch's total would be non-finite: ours is, or it is in the
    gradients' promoted dtype, or one fp16 gradient's own norm is in fp16 (past 65504: torch
    takes each norm in its gradient's dtype, so its total is inf beside float32 gradients too,
    where ours, accumulated in float32, is finite). One host sync, as torch's check has."""
    bad = nonfinite | ~torch.isfinite(total.to(_promoted_dtype(grads)))
    half = [i for i, g in enumerate(grads) if g.dtype == torch.float16]
    if half and per.numel() == len(grads):
        bad = bad | ~torch.isfinite(per[half].to(torch.float16)).all()
    if bool(bad):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the "
            "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`"
        )


def _scale_stage(which: str, grads: list[torch.Tensor], scale: torch.Tensor, p: float) -> None:
    """Stage 3 alone: every gradient times the 0-dim device ``scale`` (no host sync); the
    fused kernel on CUDA, a multi-tensor multiply elsewhere. Used after an error_if_nonfinite
    check passed, and by the adaptive modes (``adaptive.py``) once they chose their scale."""
    if which == "cuda":
        from andrea_diag.clip import cuda as cuda_ext

        if cuda_ext.supports(grads, p):
            cuda_ext.scale_(grads, scale.float())
            return
    reference.grad_scale_(grads, scale)


@torch.no_grad()
def clip_grad_norm_(
    parameters: torch.Tensor | Iterable[torch.Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    *,
    impl: str = "auto",
) -> torch.Tensor:
    """Drop-in for ``torch.nn.utils.clip_grad_norm_``: clip in place, return the pre-clip norm.

    Same contract as torch 2.13's function (checked side by side in
    tests/test_clip_torch_contract.py): the return value is a 0-dim tensor on the gradients'
    device in their dtype (promoted across dtypes, as torch stacks its per-tensor norms), an
    empty generator warns, no gradient returns ``tensor(0.)``, ``error_if_nonfinite`` raises
    torch's message before any gradient changes, and so does a gradient whose dtype torch's
    norm refuses (integer, bool, float8: torch's own error). Like torch's, it runs under
    ``torch.no_grad()``: gradients that require grad (``backward(create_graph=True)``) are
    scaled in place without recording autograd history. ``norm_type`` <= 0 (0 counts
    nonzeros, -inf is a minimum: neither is a sum the chunked stages can split), complex
    gradients and gradients on several devices run torch's own function, so they match exactly.

    Remaining differences, all deliberate:

    - ``max_norm`` is checked (:func:`check_max_norm`): NaN (torch makes every gradient NaN) and
      a negative bound (torch flips every gradient's sign) are a ``ValueError``; a bool or a
      string such as ``"1"`` (torch reads it with ``float()``) a ``TypeError``. ``0`` zeroes
      the gradients and ``inf`` never clips, as in torch. A NaN ``norm_type`` is a
      ``ValueError`` too (torch makes every gradient NaN), before any gradient changes, and a
      bool one a ``TypeError`` (torch takes ``True`` as the L1 norm). Either past the largest
      float (``10**400``) is :class:`~andrea_diag.clip.reference.TooLargeForFloat`, a
      ``ValueError`` naming it and the ``OverflowError`` torch's ``float()`` raises;
    - the norm is accumulated in float32 (float64 for all when any gradient is float64) over
      fixed chunks and rounded to the gradients' dtype at the end; torch takes each gradient's
      norm in its own dtype, so a bf16/fp16 one (alone, or in a float32 total: ~1e-3 relative
      for bf16) and a float32 one beside float64 ones differ in their last bits. An fp16 norm
      past 65504 is returned as inf, as torch's, and ``error_if_nonfinite`` raises for it, but
      otherwise the gradients are scaled by the finite float32 coefficient, where torch's inf
      norm zeroes them (also beside float32 ones, where ours is finite and still raises);
    - bf16/fp16 gradients are scaled in float32 by the float32 coefficient and rounded once;
      torch multiplies by the coefficient rounded to the gradients' dtype;
    - ``foreach`` is accepted and ignored (every implementation here is multi-tensor; torch
      raises for ``foreach=True`` where it has no foreach kernels);
    - gradients on several devices run torch's own function (it groups them by device);
    - with nothing to clip (scale exactly 1) the CUDA kernel leaves the gradients unwritten,
      where torch (and ours on CPU) multiplies them by 1: the same values, one pass less;
    - an empty (zero-size) gradient has norm 0 for every ``norm_type``, where torch refuses
      the inf norm of an empty tensor;
    - :func:`clip_grad_norm_with_stats` (the stats variant) returns float32/float64 norms and
      refuses ``norm_type`` <= 0, and ``clip.sharded`` refuses it.
    """
    del foreach
    max_norm = check_max_norm(max_norm)  # also where torch's own function runs, below
    is_generator = isinstance(parameters, types.GeneratorType)
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    if is_generator and not params:
        # torch's own words, so filters written for torch's warning match; stacklevel 3 (the
        # no_grad wrapper is a frame): the caller's line, as torch's warning names it
        warnings.warn(
            "`parameters` is an empty generator, no gradient clipping will occur.", stacklevel=3
        )
    norm_type = reference.norm_type_value(norm_type)  # a bool refused, as max_norm's is
    if math.isnan(norm_type):  # torch's own function would make every gradient NaN
        raise ValueError("norm_type must be a number, got nan (it would make every gradient NaN)")
    grads = _grads(params)
    complex_grads = any(g.is_complex() for g in grads)
    # several devices (CPU-offloaded and CUDA parameters): torch groups them by device, the
    # three stages cannot (ours failed in torch.cat with "not on the expected device")
    several = len({g.device for g in grads}) > 1
    if not reference.norm_type_ok(norm_type) or complex_grads or several:
        return torch.nn.utils.clip_grad_norm_(
            params, max_norm, norm_type, error_if_nonfinite=error_if_nonfinite
        )
    total = clip_grad_norm_with_stats(
        params, max_norm, norm_type, impl=impl, error_if_nonfinite=error_if_nonfinite
    ).total_norm
    if not grads:
        return total
    dtype = _promoted_dtype(grads)
    return total if total.dtype == dtype else total.to(dtype)
