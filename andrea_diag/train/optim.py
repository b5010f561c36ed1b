"""Optimizer recipes from the seeds and the per-update LR schedule.

- ``v1``: Adam, no weight decay, no warmup (the recipe whose 120M run collapsed);
- ``v2``: AdamW with weight decay 0.1 and linear warmup (the fix; clipping is a separate knob).

The scheduler is a ``LambdaLR`` stepped once per **optimizer update** (never per microbatch:
stepping it per microbatch would shift the schedule by a factor of A).
"""

from __future__ import annotations

import torch

from andrea_diag.config import Recipe


def build_optimizer(
    model: torch.nn.Module, recipe: Recipe, lr: float, device: torch.device
) -> torch.optim.Optimizer:
    """Adam (v1) or AdamW (v2). Biases and LayerNorm weights are not decayed (GPT-2 practice)."""
    decay, no_decay = [], []
    for p in model.parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    # fused kernels on CUDA: one launch per step instead of one per tensor
    kw = {"lr": lr, "betas": recipe.betas, "eps": recipe.eps, "fused": device.type == "cuda"}
    if recipe.optimizer == "adam":
        for g in groups:
            g["weight_decay"] = 0.0  # v1 had none; Adam's L2-style decay would change m/v
        return torch.optim.Adam(groups, **kw)
    return torch.optim.AdamW(groups, **kw)


def warmup_factor(update: int, warmup_updates: int) -> float:
    """LR multiplier for 1-based ``update``: linear from 1/warmup up to 1, then flat."""
    if warmup_updates <= 0:
        return 1.0
    return min(1.0, update / warmup_updates)


def build_scheduler(
    optimizer: torch.optim.Optimizer, warmup_updates: int
) -> torch.optim.lr_scheduler.LambdaLR:
    # LambdaLR calls the lambda with the count of scheduler.step() calls so far (0-based), and
    # the loop steps it after each update, so update u (1-based) runs with warmup_factor(u).
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda n: warmup_factor(n + 1, warmup_updates)
    )
