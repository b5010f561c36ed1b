"""The hyper-parameter checks of :class:`~andrea_diag.clip.fused_adamw.ClippedAdamW`, in torch's
AdamW order and words, so code (and tests) that match torch's ``ValueError`` messages, such as
``"Invalid learning rate"``, work unchanged when the optimizer is swapped for ours."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def check_adamw_hyper(lr: float, betas: Sequence[float], eps: float, weight_decay: float) -> None:
    """``ValueError`` with torch.optim.AdamW's message for the first value it would refuse
    (NaN included: every check is written so that NaN fails it)."""
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    # Indexed and compared as torch does: a one-element betas is torch's IndexError, and a
    # tensor beta of several elements fails the comparison with torch's own RuntimeError
    # ("Boolean value of Tensor with more than one value is ambiguous"), before torch's
    # "Tensor betas[0] must be 1-element" could be reached.
    for i in (0, 1):
        if not 0.0 <= betas[i] < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {betas[i]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    # torch's type rule: an int beta (0) or a float beside a tensor is refused, not converted
    floats = all(isinstance(b, float) for b in betas[:2])
    if not (floats or all(isinstance(b, torch.Tensor) for b in betas[:2])):
        raise ValueError("betas must be either both floats or both Tensors")


def scalar_betas(betas: Sequence[float | torch.Tensor]) -> tuple[float | torch.Tensor, ...]:
    """``betas`` as torch's AdamW keeps them in its groups: a tuple, and a one-element tensor
    squeezed to 0-dim (``torch.optim.optimizer._to_scalar``), so a state dict holds the same."""
    return tuple(b.squeeze() if isinstance(b, torch.Tensor) and b.dim() else b for b in betas)
