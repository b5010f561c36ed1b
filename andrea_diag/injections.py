"""Spikes caused on purpose: ``--inject KIND@UPDATE`` (the kinds, and the parser).

>>> parse_injections(["outlier@40"], steps=100)
{40: <Injection.OUTLIER: 'outlier'>}
"""

from __future__ import annotations

import re
from enum import StrEnum

from andrea_diag.errors import UserError

# ASCII digits only: str.isdigit() and int() also take "²" or "٤" (a traceback in int(), or a
# number the user never typed) and int() takes "1_0"
_UPDATE = re.compile(r"[0-9]+")


class Injection(StrEnum):
    """What ``--inject KIND@UPDATE`` does at that update (str-valued: JSON on disk is the name)."""

    OUTLIER = "outlier"  # one microbatch replaced by an outlier batch
    NONFINITE = "nonfinite"  # an overflow (inf) in the last microbatch's gradients


def injection_forms() -> str:
    """ "outlier@UPDATE or nonfinite@UPDATE": every kind, for the help and the errors."""
    return " or ".join(f"{k.value}@UPDATE" for k in Injection)


def parse_injections(specs: list[str], steps: int) -> dict[int, Injection]:
    """``["outlier@40", "nonfinite@90"]`` -> {40: Injection.OUTLIER, 90: Injection.NONFINITE}.

    An update named twice is refused: one update takes one injection, and keeping the last
    would drop one the user asked for without a word."""
    out: dict[int, Injection] = {}
    kinds = [k.value for k in Injection]
    for spec in specs:
        kind, _, at = spec.partition("@")
        if kind not in kinds or not _UPDATE.fullmatch(at):
            raise UserError(
                f"bad --inject {spec!r}", hint=f"use {injection_forms()}, e.g. {kinds[0]}@40"
            )
        update = int(at)
        if not 1 <= update <= steps:
            raise UserError(f"--inject {spec!r}: update {update} is outside 1..{steps}")
        if update in out:
            raise UserError(
                f"--inject names update {update} twice ({out[update].value}@{update} and {spec})",
                hint="give each update one injection",
            )
        out[update] = Injection(kind)
    return out
