"""The clip-mode registry: the ``Clipper`` base class and ``@register``.

A mode is one class and one ``@register``: its ``name`` (the ``--clip`` value), a ``label`` and
a ``color`` (the report reads both from here), and ``__call__(params) -> ClipResult``. A mode
that needs memory across updates (an adaptive threshold, say) keeps it on the object and saves
it through ``state_dict`` / ``load_state_dict``, which the trainer's checkpoints call. A mode
that reads the optimizer's state (SPAM reads Adam's ``v``) gets it through ``bind``.

The fixed modes (``none``, ``global``, ``per-tensor``) are registered here, so they come first
in the ``--clip`` help whatever imports what; the adaptive ones live in ``adaptive.py``, with
their parameters in ``andrea_diag/clip_params.py`` (below the config, which holds them).
``modes.py`` imports both and is the public entry point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from andrea_diag.clip.api import ClipResult, clip_grad_norm_with_stats
from andrea_diag.clip_params import ClipParams
from andrea_diag.errors import UserError


class Clipper:
    """Base: a stateless kernel-mode clipper. Subclasses set the class attributes."""

    name: ClassVar[str]
    label: ClassVar[str]
    color: ClassVar[str]
    kernel_mode: ClassVar[str] = "none"  # the mode of clip_grad_norm_with_stats that does the work

    def __init__(
        self, max_norm: float = 1.0, impl: str = "auto", params: ClipParams | None = None
    ) -> None:
        self.max_norm, self.impl = float(max_norm), impl
        self.params = params or ClipParams()

    def __call__(self, params: Sequence[torch.Tensor]) -> ClipResult:
        return clip_grad_norm_with_stats(
            params, self.max_norm, mode=self.kernel_mode, impl=self.impl
        )

    def bind(self, optimizer: torch.optim.Optimizer) -> None:
        """Modes that read the optimizer's state override this; the rest ignore it."""
        del optimizer

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state  # stateless


CLIPPERS: dict[str, type[Clipper]] = {}


def register(cls: type[Clipper]) -> type[Clipper]:
    """Class decorator: make ``cls`` available as ``--clip cls.name``."""
    CLIPPERS[cls.name] = cls
    return cls


class UnknownClipMode(UserError, ValueError):
    """``--clip NAME`` that no class registered: one line at the CLI, a ValueError to callers."""


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
