"""``max_norm``, checked once for the drop-in ``clip_grad_norm_``, the stats variant and
``ClippedAdamW``: what torch's ``float()`` reads as a number is taken, what would poison or
flip every gradient (NaN, a negative bound) or is no number at all (a bool, ``"1"``) refused.

    from andrea_diag.clip.max_norm import check_max_norm
    max_norm = check_max_norm(max_norm)                  # a float, or one line naming why not
"""

from __future__ import annotations

import contextlib
import decimal
import math
import numbers

import torch

from andrea_diag.clip import reference


def _float_like(value: object) -> bool:
    """A number type of the caller's own (a units library's quantity, a config's scalar) that
    ``float()`` reads through ``__float__`` or ``__index__``, as torch's clip reads it; text,
    bytes and bools are no numbers here, whatever ``float()`` makes of them."""
    kind = type(value)
    number = hasattr(kind, "__float__") or hasattr(kind, "__index__")
    # an array (numpy's, with a dtype) is checked as the tensor it makes, not here: a text or
    # bool array has a __float__ too (np.array("1") read as 1.0)
    array = hasattr(value, "dtype") or hasattr(value, "ndim")
    return number and not array and not isinstance(value, (str, bytes, bytearray, bool))


def check_max_norm(max_norm: object, *, allow_zero: bool = True) -> float:
    """``max_norm`` as a float: a real number (a one-element real tensor, a 0-dim numpy array
    and a ``Decimal`` too, as torch's ``float()`` reads them), not a bool, not NaN, not
    negative; ``inf`` measures and never clips. The one check of the drop-in, the stats
    variant and :class:`~andrea_diag.clip.fused_adamw.ClippedAdamW` (``allow_zero=False``: an
    optimizer whose every update is zero trains nothing).

    torch's ``clip_grad_norm_`` takes anything ``float()`` reads ("1", True) and clips with it:
    NaN makes every gradient NaN, a negative bound flips every gradient's sign. Here each is
    refused at the call: ``TypeError`` for what is not a number, ``ValueError`` for the rest.
    A tensor of other than one element is torch's ``ValueError`` (:class:`MaxNormShapeError`,
    also a ``TypeError``).
    """
    probe = max_norm
    if isinstance(max_norm, torch.Tensor) and max_norm.numel() != 1:
        # torch's float() of it: ValueError; a TypeError too, as ours raised before
        raise MaxNormShapeError(
            f"max_norm must be a single number, got Tensor of {max_norm.numel()} elements "
            "(torch: only one element tensors can be converted to Python scalars)"
        )
    if getattr(max_norm, "ndim", None) == 0 and not isinstance(max_norm, torch.Tensor):
        # np.array(1.0) (a config read through numpy): torch's float() reads it and ours refused
        # it as "not a real number"; checked as the 0-dim tensor it is (np.array(True) is not)
        with contextlib.suppress(TypeError, ValueError, RuntimeError):
            probe = torch.as_tensor(max_norm)
    if isinstance(probe, torch.Tensor) and probe.numel() == 1:
        ok = not (probe.dtype == torch.bool or probe.is_complex())
    else:  # Decimal is no numbers.Real, but float() reads it exactly as torch does
        ok = isinstance(probe, (numbers.Real, decimal.Decimal)) or _float_like(probe)
        ok = ok and not isinstance(probe, bool)
    if not ok:
        raise TypeError(f"max_norm must be a real number, got {type(max_norm).__name__} "
                        f"{max_norm!r}"[:200])  # fmt: skip
    # a one-element tensor: a host read; 10**400: torch's bare OverflowError, named here
    value = reference.as_float(probe, "max_norm", "math.inf never clips")
    if math.isnan(value):
        raise ValueError("max_norm must be a number, got NaN (it would make every gradient NaN)")
    if value < 0 or (value == 0 and not allow_zero):
        least = "0 or more" if allow_zero else "> 0"
        raise ValueError(f"max_norm must be {least} (inf: never clip), got {value}")
    return value


class MaxNormShapeError(ValueError, TypeError):
    """A ``max_norm`` tensor of other than one element: torch's ``float()`` of it raises
    ValueError ("only one element tensors can be converted to Python scalars"); ours raised
    TypeError, and code written against either still catches this."""
