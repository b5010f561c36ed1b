"""The adaptive clip modes' parameters, with the papers' defaults: one dataclass per mode.

Each mode's dataclass owns its options: the default, the ``--flag`` help and the bounds sit on
its fields (``fields.cli``), and ``commands/options.py`` turns them into the CLI's
``--zclip-z``, ``--agc-lambda``, ... A new mode with parameters is its ``Clipper`` class
(``@register``) plus one dataclass here under ``@mode_params("name")``: :class:`ClipParams`,
the flat union that ``RunConfig.clip_params`` and ``config.json`` hold, is built from the
registered ones, so no list elsewhere names the modes.

A ``ClipParams`` is checked when it is made (its types, then :meth:`validate`): it is handed
to ``make_clipper`` as well as to the config, and a clipper never validated it, so
``ClipParams(agc_lambda=1e-320)`` zeroed every gradient and ``zclip_alpha=1.5`` ran an EMA
that grows without a word. A refusal is a :class:`~andrea_diag.errors.BadArgument` (a
``ValueError``, and the CLI's one line) or a :class:`~andrea_diag.errors.BadType`.

This module imports no torch: the config composes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from andrea_diag.errors import BadArgument
from andrea_diag.field_types import plain_fields
from andrea_diag.fields import MAX_UPDATES, check_bounds, cli

MODE_PARAMS: dict[str, type] = {}  # --clip mode -> its parameters' dataclass
MAX_WINDOW = 2**20  # warm-up and rolling windows are device buffers of this many norms
T = TypeVar("T")


def mode_params(mode: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: ``cls`` holds the parameters of ``--clip mode``."""

    def deco(cls: type[T]) -> type[T]:
        MODE_PARAMS[mode] = cls
        return cls

    return deco


@mode_params("zclip")
@dataclass(frozen=True)
class ZClipParams:
    """ZClip (Kumar et al. 2025): EMA of the gradient norm's mean and variance; an update whose
    norm has z > zclip_z is clipped to mean + zclip_z²·std/z ("adaptive scaling")."""

    zclip_alpha: float = field(
        default=0.97, metadata=cli(help="ZClip: EMA factor of the norm's mean/variance.")
    )
    zclip_z: float = field(
        default=2.5,
        metadata=cli(help="ZClip: z-score above which an update is clipped.", positive=True),
    )
    zclip_warmup: int = field(
        default=25,
        metadata=cli(help="ZClip: updates that initialise the EMA.", lo=1, hi=MAX_WINDOW),
    )

    def check(self) -> None:
        if not (0.0 < self.zclip_alpha < 1.0):
            raise ValueError(f"--zclip-alpha must be in (0, 1), got {self.zclip_alpha}")


@mode_params("agc")
@dataclass(frozen=True)
class AgcParams:
    """AGC (Brock et al. 2021): each unit's gradient norm at most agc_lambda x its weight norm
    (the weight norm floored at agc_eps)."""

    agc_lambda: float = field(
        default=0.01, metadata=cli(help="AGC: max unit gradient/weight norm ratio.", positive=True)
    )
    agc_eps: float = field(
        default=1e-3, metadata=cli(help="AGC: floor of the unit weight norm.", positive=True)
    )

    def check(self) -> None:
        pass


@mode_params("spam")
@dataclass(frozen=True)
class SpamParams:
    """SPAM (Huang et al. 2025): element g clipped to sign(g)·sqrt(θ·v) where g² > θ·v, and
    Adam's m, v (and step count) reset every spam_reset updates; no clipping for the first
    spam_warmup updates after a reset (v is near zero then)."""

    spam_theta: float = field(
        default=5000.0,
        metadata=cli(help="SPAM: clip elements with g^2 > theta * v.", positive=True),
    )
    spam_reset: int = field(
        default=500,
        metadata=cli(help="SPAM: updates between resets of Adam's m and v.", lo=1, hi=MAX_UPDATES),
    )
    spam_warmup: int = field(
        default=20,
        metadata=cli(help="SPAM: updates after a reset with no clipping.", lo=0, hi=MAX_UPDATES),
    )

    def check(self) -> None:
        if self.spam_warmup >= self.spam_reset:
            raise ValueError(
                f"--spam-warmup ({self.spam_warmup}) must be below --spam-reset "
                f"({self.spam_reset}): SPAM would never clip"
            )


@mode_params("skip")
@dataclass(frozen=True)
class SkipParams:
    """skip (OLMo-core style): skip the optimizer step when the norm exceeds the rolling mean by
    more than skip_z standard deviations over the last skip_window updates; no decision before
    skip_window // 2 norms are in the window."""

    skip_z: float = field(
        default=6.0,
        metadata=cli(
            help="skip: skip a step whose norm is this many rolling standard deviations above "
            "the rolling mean.",
            positive=True,
        ),
    )
    skip_window: int = field(
        default=128, metadata=cli(help="skip: updates in the rolling window.", lo=4, hi=MAX_WINDOW)
    )

    def check(self) -> None:
        pass


def _validate(self: Any) -> Any:
    """Raise ``BadArgument`` (a ``ValueError``) naming the option for a value no mode can run
    with: a bound, or a mode's own ``check`` (which raises a plain ``ValueError``)."""
    check_bounds(self, BadArgument)
    for cls in MODE_PARAMS.values():
        try:
            cls.check(self)
        except ValueError as exc:  # a UserError too: the CLI's one line, a saved config's
            raise BadArgument(str(exc)) from None
    return self


def _post_init(self: Any) -> None:
    """Checked when made: a numpy scalar kept as the Python number it holds (config.json is
    JSON), a wrong type refused, then every bound (:func:`_validate`)."""
    for name, value in plain_fields(self, "ClipParams").items():
        object.__setattr__(self, name, value)  # frozen: this is its own __init__'s work
    _validate(self)


def _from_dict(cls: type, d: dict[str, Any] | None) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in (d or {}).items() if k in names})


# The flat union of every mode's parameters, fields in registration order (zclip_alpha, ...,
# skip_window): what config.json's "clip_params" holds, and what every clipper receives.
ClipParams: Any = dataclasses.make_dataclass(
    "ClipParams",
    [],
    bases=tuple(reversed(MODE_PARAMS.values())),  # a dataclass takes its bases' fields MRO-last
    frozen=True,
    namespace={
        "validate": _validate,
        "__post_init__": _post_init,
        "from_dict": classmethod(_from_dict),
        "__doc__": "Parameters of every adaptive mode (``none``/``global`` ignore them).",
        "__module__": __name__,
    },
)
