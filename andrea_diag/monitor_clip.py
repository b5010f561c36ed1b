"""What ``SpikeMonitor.after_clip`` records from what it was given: a :class:`ClipResult`, a
clip's bare total norm, or nothing.

    clip = clip_result(value, params, norm_type)   # a ClipResult in L2 norms, or None

The recorded ``grad_norm`` is the L2 norm whatever norm the user's clip took. ``norm_type``
None means "the clip's own": a ClipResult says which p it was computed with
(``ClipResult.norm_type``), a bare total is taken as torch's default 2. A p given explicitly
must be a ClipResult's own (``clip.from_total.clip_in_l2`` refuses another).
"""

from __future__ import annotations

import torch

from andrea_diag.clip.api import ClipResult
from andrea_diag.clip.from_total import checked_norm_type, clip_from_total, clip_in_l2
from andrea_diag.monitor_checks import checked_number


def clip_result(
    value: ClipResult | torch.Tensor | float | None,
    params: list[torch.Tensor],
    norm_type: float | None,
) -> ClipResult | None:
    """``value`` as the ClipResult the probes read (``params``: those with a gradient)."""
    if norm_type is not None:
        norm_type = checked_norm_type(norm_type)  # also where it is unused: a wrong call
    if isinstance(value, ClipResult):
        _check_count(value, len(params))
        p = value.norm_type if norm_type is None else norm_type
        # an L2 clip is recorded as it is: no list of the gradients built every update for it
        grads = [g.grad.detach() for g in params] if p != 2.0 else []
        return clip_in_l2(value, grads, p)
    if value is None:
        return None  # probes read the (unclipped) gradients
    if checked_number("after_clip", "total_norm_or_clip", value) < 0:  # NaN passes
        raise ValueError(f"SpikeMonitor.after_clip: a total norm is never negative: {value}")
    grads = [g.grad.detach() for g in params]
    return clip_from_total(value, grads, 2.0 if norm_type is None else norm_type)


def _check_count(clip: ClipResult, n_grads: int) -> None:
    """A ClipResult of another list of gradients than the model's is refused: its total was
    recorded as the model's ``grad_norm`` (a clip of one layer read as the whole model's), and
    the per-layer norms probe failed on the count and was disabled for the rest of the run."""
    n = clip.per_tensor_norm.numel()
    if n != n_grads:
        raise ValueError(
            f"SpikeMonitor.after_clip: the ClipResult has {n} per-tensor norms, but the model "
            f"has {n_grads} trainable parameters with a gradient; clip the parameters the "
            "monitor watches (those of model.parameters() that require grad)"
        )
