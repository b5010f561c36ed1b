"""The hyper-parameter checks of :class:`~andrea_diag.clip.fused_adamw.ClippedAdamW`, in torch's
AdamW order and words, so code (and tests) that match torch's ``ValueError`` messages, such as
``"Invalid learning rate"``, work unchanged when the optimizer is swapped for ours."""

from __future__ import annotations

from collections.abc import Sequence


def check_adamw_hyper(lr: float, betas: Sequence[float], eps: float, weight_decay: float) -> None:
    """``ValueError`` with torch.optim.AdamW's message for the first value it would refuse
    (NaN included: every check is written so that NaN fails it)."""
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    for i in (0, 1):  # indexed as torch does: a one-element betas is torch's IndexError
        if not 0.0 <= betas[i] < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {betas[i]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
