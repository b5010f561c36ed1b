"""What ``SpikeMonitor.after_clip`` records from what it was given: a :class:`ClipResult`, a
clip's bare total norm, or nothing.

    clip = clip_result(value, params, norm_type)   # a ClipResult in L2 norms, or None

The recorded ``grad_norm`` is the L2 norm whatever norm the user's clip took. ``norm_type``
None means "the clip's own": a ClipResult says which p it was computed with
(``ClipResult.norm_type``), a bare total is taken as torch's default 2. A p given explicitly
must be a ClipResult's own (``clip.from_total.clip_in_l2`` refuses another).

An optimizer that clips inside its ``step()`` (``ClippedAdamW``: ``last_clip``) has no clip to
give before the step: its ``last_clip`` then is the previous update's, and was recorded as this
one's (``grad_norm`` one update late). :class:`StepClips` refuses a ClipResult already seen
(recorded from the gradients instead, with one warning) and reads the clip the step made.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

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


class StepClips:
    """The ClipResults of one run: stale ones refused at ``after_clip``, and the clip an
    optimizer made inside its step (``optimizer.last_clip``) read at ``after_step``.

    Identity, not a counter: ``ClippedAdamW`` makes a new ClipResult every step, so one that
    ``after_clip`` was given before, or that the optimizer held at the last ``after_step`` (or
    when the monitor was made), is an earlier update's. No tensor is read for it."""

    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer
        self.seen: Any = getattr(optimizer, "last_clip", None)  # the optimizer's, at the last step
        self.given: ClipResult | None = None  # the last one after_clip recorded
        self.warned = False

    def fresh(self, value: Any) -> Any:
        """``value``, or None (measured from the gradients) when it is a ClipResult seen before."""
        if not isinstance(value, ClipResult):
            return value
        if value is self.seen or value is self.given:
            if not self.warned:
                self.warned = True
                warnings.warn(
                    "SpikeMonitor.after_clip: this ClipResult is an earlier update's (an "
                    "optimizer's last_clip read before its step(), e.g. ClippedAdamW's); the "
                    "norms are read from the gradients instead, and the clip the step makes "
                    "from optimizer.last_clip after it. Pass None to after_clip to silence this",
                    UserWarning,
                    stacklevel=3,  # the after_clip call
                )
            return None
        self.given = value
        return value

    def after_step(self, row: dict[str, Any], measured: bool) -> bool:
        """Fill ``row``'s post-clip columns from the clip the optimizer's step made, when the
        loop gave none (``measured``: the norms came from the gradients); True when that step
        skipped the update (ClippedAdamW skips a non-finite one)."""
        made = getattr(self.optimizer, "last_clip", None)
        new = isinstance(made, ClipResult) and made is not self.seen
        self.seen = made
        if not (new and measured) or made.scale.dim() != 0:  # per-tensor scales: not a factor
            return False
        total = row["grad_norm"]  # the L2 norm of the gradients the step clipped (unchanged)
        factor = float(made.scale) if math.isfinite(total) else 1.0  # host sync, once
        row["grad_norm_post"] = total * factor
        row["clip_coef"] = factor
        # host sync: two flags the step left on the device, read once per update at after_step
        return bool(made.nonfinite) or (made.skip is not None and bool(made.skip))
