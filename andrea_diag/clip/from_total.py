"""A :class:`~andrea_diag.clip.api.ClipResult` rebuilt from the total that a user's clipper
returned (``torch.nn.utils.clip_grad_norm_``'s pre-clip norm) and the clipped gradients.

A global clip scales every gradient by one factor ``c``, so the clipped gradients' norm in the
clip's own ``norm_type`` is ``c * total``: ``c`` is read back from them, and the pre-clip L2
norms (what the metrics record, whatever norm the clip used) are the clipped ones over ``c``.

The factor is two reductions apart, so an unclipped update reads ``1 - 1e-7`` in fp32 and up
to ``1 ± 2**-8`` when torch returned a bf16 total. A factor within the given total's rounding
(the epsilon of its dtype or of the gradients', at least 1e-5) is 1: the update was not
clipped, and a clip that moved the gradients by less than that is not told apart from one that
did not run. The gradients' dtype counts too: torch's total of bf16 gradients is a bf16 number,
and read as ``total.item()`` or ``total.float()`` it still carries bf16's rounding, where the
float32 epsilon alone recorded an unclipped update as clipped by up to 0.3%.

    >>> import torch
    >>> g = torch.tensor([3.0, 4.0])
    >>> p = torch.nn.Parameter(torch.zeros(2)); p.grad = g.clone()
    >>> total = torch.nn.utils.clip_grad_norm_([p], 1.0)  # 5 -> 1
    >>> r = clip_from_total(total, [p.grad])
    >>> round(float(r.total_norm), 4), round(float(r.scale), 4)
    (5.0, 0.2)
    >>> clip_from_total(torch.tensor(5.0, dtype=torch.bfloat16), [g]).scale.item()  # unclipped
    1.0
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import Any

import torch

from andrea_diag.clip.api import ClipResult
from andrea_diag.clip.reference import check_norm_type, clip_reference

MIN_TOLERANCE = 1e-5  # two fp32 reductions of one gradient differ by ~1e-7; leave a margin


def tolerance(value: torch.Tensor | float, grads: Sequence[torch.Tensor] = ()) -> float:
    """How far from 1 a factor measured against ``value`` may be and still mean "unclipped":
    the epsilon of ``value``'s dtype or of the gradients' it was taken of (``grads``), the
    coarser, and at least ``MIN_TOLERANCE``."""
    dtypes = {value.dtype if isinstance(value, torch.Tensor) else torch.float32}
    dtypes.update(g.dtype for g in grads)
    eps = [torch.finfo(d).eps for d in dtypes if d.is_floating_point]
    return max([*eps, MIN_TOLERANCE])


def checked_norm_type(norm_type: Any) -> float:
    """A given clip's ``norm_type`` as a float: a real number > 0 or inf, else one error.

    Stricter than :func:`~andrea_diag.clip.reference.check_norm_type` (torch's drop-in takes
    ``"inf"`` as torch does): here it names a clip the user already ran, so a text or a flag
    is a mistake, not a spelling.

    >>> checked_norm_type(2), checked_norm_type(float("inf"))
    (2.0, inf)
    """
    if isinstance(norm_type, (str, bytes, bool)) or not isinstance(norm_type, numbers.Real):
        # float("abc")'s own words were the message; float(True) took a flag for 1
        raise TypeError(f"norm_type must be a number, got {type(norm_type).__name__} "
                        f"{norm_type!r}")  # fmt: skip
    return check_norm_type(norm_type)  # the value's rule: the drop-in's own


def clip_from_total(
    value: torch.Tensor | float, grads: list[torch.Tensor], norm_type: float = 2.0
) -> ClipResult | None:
    """The clip that turned gradients of pre-clip ``norm_type``-norm ``value`` into ``grads``
    (None when there are no gradients). ``total_norm`` is the pre-clip L2 norm: ``value``
    itself when ``norm_type`` is 2, else the clipped gradients' L2 norm over the factor."""
    norm_type = checked_norm_type(norm_type)  # also with no gradients: the call is wrong anyway
    if not grads:
        return None
    post = clip_reference(grads, math.inf, apply=False)[1]  # per-tensor L2, measure only
    total = torch.as_tensor(value, device=post.device).detach().to(torch.float32).reshape(())
    post_l2 = post.square().sum().sqrt()
    post_p = (
        post_l2 if norm_type == 2.0 else clip_reference(grads, math.inf, norm_type, apply=False)[0]
    )
    usable = (total > 0) & torch.isfinite(total)
    factor = torch.where(usable, post_p / torch.where(usable, total, 1.0), 1.0)
    factor = torch.where((factor - 1).abs() <= tolerance(value, grads), 1.0, factor)
    # a factor of 0 (max_norm 0 zeroed every gradient) cannot be undone: the per-tensor norms
    # stay the clipped ones, and a non-L2 total stands in for the L2 norm it hides
    undo = torch.where(factor > 0, factor, 1.0)
    pre_l2 = total if norm_type == 2.0 else torch.where(factor > 0, post_l2 / undo, total)
    return ClipResult(
        total_norm=pre_l2,
        per_tensor_norm=post / undo,
        scale=factor,
        nonfinite=~torch.isfinite(total),
        impl="user",
    )


def clip_in_l2(clip: ClipResult, grads: list[torch.Tensor], norm_type: float = 2.0) -> ClipResult:
    """``clip`` with L2 norms, as ``SpikeMonitor.after_clip`` records them; ``grads``: the
    gradients the optimizer will receive (clipped in place), ``norm_type``: the norm the caller
    says the clip used, as for a bare total (:func:`clip_from_total`).

    A ClipResult knows its own p (``clip.norm_type``). One that differs from ``norm_type`` is
    refused (``ValueError``) rather than either being believed: a default 2 cannot be told from
    a 2 given on purpose, and a p-norm recorded as the L2 ``grad_norm`` was the silent result.
    A non-L2 clip's pre-clip L2 norms are the clipped gradients' L2 norms over its own scale
    (global or per tensor); a scale of 0 (max_norm 0) cannot be undone, and there the clip's
    own norms stand in, as in :func:`clip_from_total`.

    >>> g = torch.tensor([3.0, -4.0])
    >>> from andrea_diag.clip.api import clip_grad_norm_with_stats
    >>> p = torch.nn.Parameter(torch.zeros(2)); p.grad = g.clone()
    >>> r = clip_grad_norm_with_stats([p], 2.0, norm_type=math.inf)  # inf-norm 4 -> 2
    >>> round(float(clip_in_l2(r, [p.grad], math.inf).total_norm), 4)  # the L2 norm, 5
    5.0
    """
    norm_type = checked_norm_type(norm_type)
    if float(clip.norm_type) != norm_type:
        raise ValueError(
            f"the ClipResult was computed with norm_type={clip.norm_type:g} but norm_type="
            f"{norm_type:g} was given; pass the norm_type the clip used"
        )
    if norm_type == 2.0 or not grads:
        return clip
    post = clip_reference(grads, math.inf, apply=False)[1]  # per-tensor L2, measure only
    scale = clip.scale.to(post)
    if scale.dim() and scale.numel() != post.numel():  # per-tensor scales of another list
        raise ValueError(
            f"the ClipResult has {scale.numel()} per-tensor scales for {post.numel()} gradients"
        )
    undo = torch.where(scale > 0, scale, 1.0)
    per = post / undo
    total = per.square().sum().sqrt()
    if scale.dim() == 0:  # one factor: 0 zeroed everything, the clip's p-norm stands in
        total = torch.where(scale > 0, total, clip.total_norm.to(total))
    return dataclasses.replace(clip, total_norm=total.to(clip.total_norm.dtype),
                               per_tensor_norm=per, norm_type=2.0)  # fmt: skip
