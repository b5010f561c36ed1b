"""Config fields that are also command-line options: the flag, the help, the bounds, in one place.

A dataclass field declared with ``field(..., metadata=cli(...))`` carries a :class:`Cli` record.
``commands/options.py`` turns every such field into a typer option (so the CLI never restates a
default or a help text), ``RunConfig.resolve`` checks its bounds, and ``--resume`` reads which
fields are *runtime* (how fast or where a run goes, not what it computes).

    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Knobs:
    ...     steps: int = dataclasses.field(default=10, metadata=cli(help="Updates.", lo=1, hi=1000))
    >>> check_bounds(Knobs(steps=0), ValueError)
    Traceback (most recent call last):
    ...
    ValueError: --steps must be at least 1, got 0

This module imports only the standard library and :mod:`andrea_diag.errors`: the config layer
sits at the bottom.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from andrea_diag.errors import OutOfRange

# An upper bound for counts of updates and the like: far past any run, far below the integer
# sizes at which torch, numpy or a tensor allocation raise instead of refusing in one line.
MAX_UPDATES = 10**9
MAX_SEED = 2**32 - 1  # numpy's SeedSequence and most samplers take 32-bit seeds
# A positive float option's range: far past any rate, threshold or z-score a run means on
# either side, and inside float32's (1.2e-38 .. 3.4e38), the dtype these values meet the
# tensors in. Past it torch refused the scalar mid-run, after the run's folder was made ("value
# cannot be converted to type float without overflow": --lr 1e38, Adam's first step being 10x
# the lr; --agc-eps 1e39); below it the value is 0 there (--max-norm 1e-320 zeroed every
# gradient: the 0 that is refused, taken without a word).
POSITIVE_RANGE = (1e-30, 1e30)


@dataclass(frozen=True)
class Cli:
    """How a config field appears on the command line."""

    help: str
    flags: tuple[str, ...] = ()  # typer declarations; () means --<field-name>
    runtime: bool = False  # how or where a run goes, not what it computes: --resume may change it
    lo: float | None = None  # inclusive bounds, checked by check_bounds (ints and floats)
    hi: float | None = None
    shown: str | None = None  # the help's [default: ...] when the field's default is None
    panel: str | None = None  # rich help panel
    one_cell: bool = False  # only commands that run one cell take it (sweep/ladder give lists)
    positive: bool = False  # a float that must be finite, > 0 and in POSITIVE_RANGE
    # names files (a str, or a dict's values): none may be blank, Path("") is the working folder
    paths: bool = False

    def flag(self, name: str) -> str:
        """The long flag, e.g. ``--micro-batch``."""
        longs = [f for f in self.flags if f.startswith("--")]
        return longs[0].split("/")[0] if longs else "--" + name.replace("_", "-")


def cli(**kw: Any) -> dict[str, Cli]:
    """Field metadata that makes the field a CLI option (keywords: the fields of :class:`Cli`)."""
    return {"cli": Cli(**kw)}


def cli_of(f: dataclasses.Field) -> Cli | None:
    return f.metadata.get("cli")


def cli_fields(cls: Any) -> Iterator[tuple[dataclasses.Field, Cli]]:
    """``(field, Cli)`` for every field of ``cls`` that is a CLI option, in declaration order."""
    for f in dataclasses.fields(cls):
        meta = cli_of(f)
        if meta is not None:
            yield f, meta


def positive_problem(value: float) -> str | None:
    """What is wrong with ``value`` as a positive option's (the words after its name), or None.

    >>> positive_problem(-1.0), positive_problem(1e-320), positive_problem(2.5)
    ('must be a positive number, got -1.0', 'must be from 1e-30 to 1e+30, got 1e-320', None)
    """
    lo, hi = POSITIVE_RANGE
    if isinstance(value, int) and abs(value) > hi:  # 10**400: math.isfinite overflowed
        return f"must be from {lo:g} to {hi:g}, got {shown_number(value)}"
    if not (math.isfinite(value) and value > 0):
        return f"must be a positive number, got {value}"
    if not lo <= value <= hi:
        return f"must be from {lo:g} to {hi:g}, got {value}"
    return None


def shown_number(value: float) -> str:
    """``value`` as an error line shows it: an integer of 100 digits or more by its length, as
    ``str`` raises past 4,300 digits (Python's own limit: the message, not the value, failed).

    >>> shown_number(12), shown_number(10**5000), shown_number(-(10**120))
    ('12', 'an integer of 5001 digits', 'an integer of 121 digits')
    """
    if isinstance(value, int) and abs(value) >= 10**99:
        digits = math.floor(math.log10(abs(value))) + 1
        # log10 of a big int rounds: a power of ten just below may read one digit long
        digits -= abs(value) < 10 ** (digits - 1)
        return f"an integer of {digits} digits"
    return str(value)


def check_bounds(obj: Any, error: type[Exception]) -> None:
    """Raise ``error`` naming the flag for the first CLI field of ``obj`` outside its bounds;
    for a positive number outside :data:`POSITIVE_RANGE`, ``errors.OutOfRange`` where that is
    an ``error`` (it says which flag and value: a run saved before the range is told so)."""
    for f, meta in cli_fields(type(obj)):
        value = getattr(obj, f.name)
        if meta.paths and (blank := _blank_path(value)) is not None:
            raise error(f"{meta.flag(f.name)} {blank}: an empty path names no file or folder "
                        "(it would read the working folder)")  # fmt: skip
        if value is None or isinstance(value, (bool, str, list, dict)):
            continue
        if (problem := bound_problem(meta, value)) is None:
            continue
        flag = meta.flag(f.name)
        if meta.positive and 0 < value < math.inf and issubclass(OutOfRange, error):
            raise OutOfRange(f"{flag} {problem}", flag, value)  # not nan, 0 or below
        raise error(f"{flag} {problem}")


def bound_problem(meta: Cli, value: float) -> str | None:
    """What is wrong with the number ``value`` against ``meta``'s bounds (the words after the
    option's name), or None: ``check_bounds``'s rule, and the specs' for each value of a grid's
    axis (``experiments/spec_checks.py``).

    >>> bound_problem(Cli(help="", lo=1), 0), bound_problem(Cli(help="", positive=True), 2.0)
    ('must be at least 1, got 0', None)
    """
    if meta.positive and (problem := positive_problem(value)) is not None:
        return problem
    if meta.lo is not None and value < meta.lo:
        least = "0 or more" if meta.lo == 0 else f"at least {meta.lo:g}"
        return f"must be {least}, got {shown_number(value)}"
    if meta.hi is not None and value > meta.hi:
        return f"must be at most {meta.hi:.0f}, got {shown_number(value)}"
    return None


def _blank_path(value: Any) -> str | None:
    """How a blank path in ``value`` (a path, or paths by name) is named, or None: the CLI
    refuses ``--source gutenberg=``; a Python caller's ``sources={"gutenberg": ""}`` read
    every text file of the working folder as that source."""
    named = value.items() if isinstance(value, dict) else [(None, value)]
    for name, path in named:
        if isinstance(path, str) and not path.strip():
            return f"{name}={path!r}" if name is not None else repr(path)
    return None


def comma_items(value: str, option: str, error: type[Exception]) -> list[str]:
    """The items of a comma list option (``--seed 0,1,2``), stripped; an empty item (``1,,2``,
    a trailing comma) or no item at all raises ``error``: dropping it silently would run a grid
    other than the one typed.

    >>> comma_items(" 0, 1 ,2", "--seed", ValueError)
    ['0', '1', '2']
    >>> comma_items("0,,1", "--seed", ValueError)
    Traceback (most recent call last):
    ...
    ValueError: --seed '0,,1' has an empty item: separate values with single commas
    """
    items = [v.strip() for v in value.split(",")]
    if not value.strip():
        raise error(f"{option} needs at least one value")
    if not all(items):
        raise error(f"{option} {value!r} has an empty item: separate values with single commas")
    return items
