"""The clip-mode registry: the ``Clipper`` base class and ``@register``.

A mode is one class and one ``@register``: its ``name`` (the ``--clip`` value), a ``label`` and
a ``color`` (the report reads both from here), and ``__call__(params) -> ClipResult``. A mode
that needs memory across updates (an adaptive threshold, say) keeps it on the object and saves
it through ``state_dict`` / ``load_state_dict``, which the trainer's checkpoints call. A mode
that reads the optimizer's state (SPAM reads Adam's ``v``) gets it through ``bind``.

The fixed modes live in ``modes.py``, the adaptive ones in ``adaptive.py``; both import this
module, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from andrea_diag.clip.api import ClipResult, clip_grad_norm_with_stats
from andrea_diag.clip.params import ClipParams


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
