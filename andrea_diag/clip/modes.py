"""Clip modes as objects: what an arm does to the gradients between backward and the optimizer.

    from andrea_diag.clip.modes import CLIPPERS, make_clipper
    clipper = make_clipper("global", max_norm=1.0, impl="auto")
    res = clipper(params)          # a ClipResult: pre- and post-clip norms, scale, non-finite flag

A mode is one class and one ``@register``: its ``name`` (the ``--clip`` value), a ``label`` and
a ``color`` (the report reads both from here), and ``__call__``. A mode that needs memory across
updates (an adaptive threshold, say) keeps it on the object and saves it through
``state_dict`` / ``load_state_dict``, which the trainer's checkpoints call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from andrea_diag.clip.api import ClipResult, clip_grad_norm_with_stats


class Clipper:
    """Base: a stateless kernel-mode clipper. Subclasses set the class attributes."""

    name: ClassVar[str]
    label: ClassVar[str]
    color: ClassVar[str]
    kernel_mode: ClassVar[str]  # the mode of clip_grad_norm_with_stats that does the work

    def __init__(self, max_norm: float = 1.0, impl: str = "auto") -> None:
        self.max_norm, self.impl = float(max_norm), impl

    def __call__(self, params: Sequence[torch.Tensor]) -> ClipResult:
        return clip_grad_norm_with_stats(
            params, self.max_norm, mode=self.kernel_mode, impl=self.impl
        )

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state  # stateless


CLIPPERS: dict[str, type[Clipper]] = {}


def register(cls: type[Clipper]) -> type[Clipper]:
    """Class decorator: make ``cls`` available as ``--clip cls.name``."""
    CLIPPERS[cls.name] = cls
    return cls


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


def clip_modes() -> tuple[str, ...]:
    """Every registered ``--clip`` value, in registration order."""
    return tuple(CLIPPERS)


def make_clipper(mode: str, max_norm: float = 1.0, impl: str = "auto") -> Clipper:
    if mode not in CLIPPERS:
        raise ValueError(f"unknown clip mode {mode!r}; choose from {', '.join(CLIPPERS)}")
    return CLIPPERS[mode](max_norm, impl)


def mode_color(mode: str, default: str = "#555") -> str:
    cls = CLIPPERS.get(mode)
    return cls.color if cls is not None else default
