"""Spikes caused on purpose: ``--inject KIND@UPDATE`` (the kinds, and the parser).

>>> parse_injections(["outlier@40"], steps=100)
{40: <Injection.OUTLIER: 'outlier'>}
"""

from __future__ import annotations

import re
from enum import StrEnum

from andrea_diag.errors import BadType, UserError

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
    if isinstance(specs, str):  # a str is a list of one-letter specs: "bad --inject 'o'"
        raise BadType(f"--inject takes a list of KIND@UPDATE, got str {specs!r}"[:300],
                      hint=f"pass a list: [{specs!r}]"[:300])  # fmt: skip
    out: dict[int, Injection] = {}
    kinds = [k.value for k in Injection]
    for spec in specs:
        kind, _, at = spec.partition("@")
        if kind not in kinds or not _UPDATE.fullmatch(at):
            raise UserError(
                f"bad --inject {spec!r}", hint=f"use {injection_forms()}, e.g. {kinds[0]}@40"
            )
        digits = at.lstrip("0") or "0"
        if len(digits) > len(str(steps)):  # past steps, and int() refuses 4,300 digits or more
            shown = digits if len(digits) <= 20 else f"of {len(digits):,} digits"
            raise UserError(f"--inject {kind}@...: update {shown} is outside 1..{steps}")
        update = int(digits)
        if not 1 <= update <= steps:
            raise UserError(f"--inject {spec!r}: update {update} is outside 1..{steps}")
        if update in out:
            raise UserError(
                f"--inject names update {update} twice ({out[update].value}@{update} and {spec})",
                hint="give each update one injection",
            )
        out[update] = Injection(kind)
    return out
