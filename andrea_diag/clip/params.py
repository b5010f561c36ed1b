"""The adaptive clip modes' parameters, with the papers' defaults, in one place.

The CLI (``--zclip-z``, ``--agc-lambda``, ...), ``RunConfig.clip_params`` and the library's
clippers all read these defaults from here, so none of them restates a number.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ClipParams:
    """Parameters of ``zclip``, ``agc``, ``spam`` and ``skip`` (``none``/``global`` ignore them)."""

    # ZClip (Kumar et al. 2025): EMA of the gradient norm's mean and variance; an update whose
    # norm has z > zclip_z is clipped to mean + zclip_z²·std/z ("adaptive scaling").
    zclip_alpha: float = 0.97
    zclip_z: float = 2.5
    zclip_warmup: int = 25  # updates whose norms initialise the EMA (no clipping before)
    # AGC (Brock et al. 2021): each unit's gradient norm at most agc_lambda x its weight norm
    # (the weight norm floored at agc_eps).
    agc_lambda: float = 0.01
    agc_eps: float = 1e-3
    # SPAM (Huang et al. 2025): element g clipped to sign(g)·sqrt(θ·v) where g² > θ·v, and
    # Adam's m, v (and step count) reset every spam_reset updates; no clipping for the first
    # spam_warmup updates after a reset (v is near zero then).
    spam_theta: float = 5000.0
    spam_reset: int = 500
    spam_warmup: int = 20
    # skip (OLMo-core style): skip the optimizer step when the norm exceeds the rolling mean by
    # more than skip_z standard deviations over the last skip_window updates; no decision before
    # skip_window // 2 norms are in the window.
    skip_z: float = 6.0
    skip_window: int = 128

    def validate(self) -> ClipParams:
        """Raise ``ValueError`` naming the option for a value no mode can run with."""
        positive = {
            "zclip-z": self.zclip_z,
            "agc-lambda": self.agc_lambda,
            "agc-eps": self.agc_eps,
            "spam-theta": self.spam_theta,
            "skip-z": self.skip_z,
        }
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"--{name} must be a positive number, got {value}")
        if not (0.0 < self.zclip_alpha < 1.0):
            raise ValueError(f"--zclip-alpha must be in (0, 1), got {self.zclip_alpha}")
        for name, value, least in (
            ("zclip-warmup", self.zclip_warmup, 1),
            ("spam-reset", self.spam_reset, 1),
            ("spam-warmup", self.spam_warmup, 0),
            ("skip-window", self.skip_window, 4),
        ):
            if value < least:
                raise ValueError(f"--{name} must be at least {least}, got {value}")
        if self.spam_warmup >= self.spam_reset:
            raise ValueError(
                f"--spam-warmup ({self.spam_warmup}) must be below --spam-reset "
                f"({self.spam_reset}): SPAM would never clip"
            )
        return self

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> ClipParams:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (d or {}).items() if k in names})
