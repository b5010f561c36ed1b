"""Clip modes as objects: what an arm does to the gradients between backward and the optimizer.

    from andrea_diag.clip.modes import CLIPPERS, make_clipper
    clipper = make_clipper("global", max_norm=1.0, impl="auto")
    res = clipper(params)          # a ClipResult: pre- and post-clip norms, scale, non-finite flag

The base class, ``@register`` and the fixed modes (``none``, ``global``, ``per-tensor``) are in
``registry.py``; the adaptive ones (``zclip``, ``agc``, ``spam``, ``skip``) in ``adaptive.py``,
their parameters in ``andrea_diag/clip_params.py``. Importing this module registers them all.
"""

from __future__ import annotations

import torch

from andrea_diag.clip import adaptive  # noqa: F401  (registers the adaptive modes)
from andrea_diag.clip.registry import CLIPPERS, Clipper, UnknownClipMode, register
from andrea_diag.clip_params import ClipParams
from andrea_diag.errors import UserError

__all__ = [
    "CLIPPERS", "Clipper", "UnknownClipMode", "check_clip", "clip_modes", "make_clipper",
    "mode_color", "register",
]  # fmt: skip


def clip_modes() -> tuple[str, ...]:
    """Every registered ``--clip`` value, in registration order."""
    return tuple(CLIPPERS)


def check_clip(mode: str | None, impl: str, device: torch.device) -> None:
    """One :class:`UserError` line, before any output exists, for a ``--clip`` mode no class
    registered (``None``: not checked here) or ``--clip-impl cuda`` off a CUDA device: the
    clipper itself would say so only at the first update, as a ValueError traceback."""
    if mode is not None and mode not in CLIPPERS:
        raise UnknownClipMode(
            f"unknown clip mode {mode!r}", hint=f"choose from {', '.join(CLIPPERS)}"
        )
    if impl == "cuda" and device.type != "cuda":
        raise UserError(
            "--clip-impl cuda needs the run on a CUDA device",
            hint="use --clip-impl auto (the CUDA clipper when available, else the reference)",
        )


def make_clipper(
    mode: str,
    max_norm: float = 1.0,
    impl: str = "auto",
    params: ClipParams | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> Clipper:
    """The clipper for ``--clip mode``; ``optimizer`` is bound for the modes that read it."""
    if mode not in CLIPPERS:
        raise UnknownClipMode(
            f"unknown clip mode {mode!r}", hint=f"choose from {', '.join(CLIPPERS)}"
        )
    clipper = CLIPPERS[mode](max_norm, impl, params)
    if optimizer is not None:
        clipper.bind(optimizer)
    return clipper


def mode_color(mode: str, default: str = "#555") -> str:
    cls = CLIPPERS.get(mode)
    return cls.color if cls is not None else default
