"""Clip modes as objects: what an arm does to the gradients between backward and the optimizer.

    from andrea_diag.clip.modes import CLIPPERS, make_clipper
    clipper = make_clipper("global", max_norm=1.0, impl="auto")
    res = clipper(params)          # a ClipResult: pre- and post-clip norms, scale, non-finite flag

The fixed modes are here (``none``, ``global``, ``per-tensor``); the adaptive ones (``zclip``,
``agc``, ``spam``, ``skip``) in ``adaptive.py``; the base class and ``@register`` in
``registry.py``. Importing this module registers all of them.
"""

from __future__ import annotations

import torch

from andrea_diag.clip import adaptive  # registers the adaptive modes
from andrea_diag.clip.params import ClipParams
from andrea_diag.clip.registry import CLIPPERS, Clipper, register

__all__ = ["CLIPPERS", "Clipper", "clip_modes", "make_clipper", "mode_color", "register"]


@register
class NoClip(Clipper):
    """Measure only: the norms are recorded, no gradient changes (the unclipped arm)."""

    name, label, color, kernel_mode = "none", "unclipped", "#d62728", "none"


@register
class GlobalNormClip(Clipper):
    """torch's ``clip_grad_norm_``: every gradient scaled by min(1, max_norm / total norm)."""

    name, label, color, kernel_mode = "global", "global-norm clip", "#1f77b4", "global"


@register
class PerTensorClip(Clipper):
    """Each gradient tensor scaled by min(1, max_norm / its own norm)."""

    name, label, color, kernel_mode = "per-tensor", "per-tensor clip", "#2ca02c", "per-tensor"


# registration order is the --clip help's order: the fixed modes first
for _name in adaptive.ADAPTIVE_MODES:
    CLIPPERS[_name] = CLIPPERS.pop(_name)


def clip_modes() -> tuple[str, ...]:
    """Every registered ``--clip`` value, in registration order."""
    return tuple(CLIPPERS)


def make_clipper(
    mode: str,
    max_norm: float = 1.0,
    impl: str = "auto",
    params: ClipParams | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> Clipper:
    """The clipper for ``--clip mode``; ``optimizer`` is bound for the modes that read it."""
    if mode not in CLIPPERS:
        raise ValueError(f"unknown clip mode {mode!r}; choose from {', '.join(CLIPPERS)}")
    clipper = CLIPPERS[mode](max_norm, impl, params)
    if optimizer is not None:
        clipper.bind(optimizer)
    return clipper


def mode_color(mode: str, default: str = "#555") -> str:
    cls = CLIPPERS.get(mode)
    return cls.color if cls is not None else default
