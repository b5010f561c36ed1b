"""What a Python caller gives ``run_cascade``, ``run_sweep`` and ``run_ladder``, checked where it
is given and before any folder or file is written (``given_checks.py``'s rule, for the specs).

    CascadeSpec(clips="none")      # BadType: CascadeSpec: clips must be a list of str, got str
    configs = checked_arms(spec.base, spec.clips)   # check_config's checks, for each arm

The command line builds a spec from options it checked itself (``commands/options.checked``,
each field named by its flag, and a comma list per axis); a Python caller had only the spec's
annotations, which nothing read, and ``RunConfig.resolve``:

- ``clips="none"`` was the arms ``n, o, n, e`` ("--clip lists an arm twice: n,o,n,e"), and a
  ``str`` for ``sizes`` the size ``t``; an ``out`` given as a ``str`` was an AttributeError (a
  TypeError in a sweep), ``Path("")`` the working folder ("output directory . exists");
- a numpy number in ``lrs`` or ``seeds`` trained, then failed writing sweep.json, and a value
  listed twice trained one cell twice, counted twice in the pooled rates;
- ``mixer_sharpness=nan`` (and every other value ``config_checks.check_config`` refuses: a nan
  anywhere, an unknown clip mode, a microbatch past one forward) passed ``resolve`` and was
  refused by the data mixer or the trainer only after ``cascade.json`` (or the arm's folder)
  was written.

A wrong type is a :class:`~andrea_diag.errors.BadType` (a ``TypeError``), a value that cannot
be used a :class:`~andrea_diag.errors.BadArgument` (a ``ValueError``); both are the CLI's one
line. The fields are named as Python names them (``mixer_sharpness``, not the flag).
"""

from __future__ import annotations

import contextlib
import dataclasses
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from andrea_diag.config import RunConfig
from andrea_diag.errors import BadArgument, BadType, UserError
from andrea_diag.experiments.config_checks import check_config
from andrea_diag.field_types import plain_number, type_hints
from andrea_diag.given_checks import given_folder


def checked_spec(spec: Any, owner: str) -> None:
    """Each field of the dataclass ``spec`` (a CascadeSpec, SweepSpec or LadderSpec) as the
    type it declares, made plain in place: a list (or tuple) of str or numbers, with no value
    twice, as a list of Python's own (a numpy number as the number it holds); an ``out`` path
    as a :class:`~pathlib.Path` (a ``str`` too, through ``given_folder``: not blank, no NUL or
    control character). ``owner``: the class, as the caller wrote it, for the line."""
    hints = type_hints(type(spec))
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        setattr(spec, f.name, _plain(f"{owner}: {f.name}", value, hints[f.name]))


def _plain(what: str, value: Any, hint: Any) -> Any:
    """``value`` as the field ``what`` annotated ``hint`` holds it, or one error naming it."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list:
        return _plain_list(what, value, args[0])
    if Path in args:  # out: Path | None
        return None if value is None else given_folder(value, what)
    if hint is bool and not isinstance(value, bool):
        raise BadType(f"{what} must be True or False, got {type(value).__name__} {value!r}")
    if isinstance(hint, type) and not isinstance(value, hint):  # base, executor, plotly
        raise BadType(f"{what} must be a {hint.__name__}, got {type(value).__name__}")
    return value


def _plain_list(what: str, value: Any, kind: type) -> list[Any]:
    """A list (or tuple) of ``kind`` (str, int or float), not empty, no item twice."""
    if isinstance(value, str):  # a str is a sequence of str: "none" was four arms
        raise BadType(f"{what} must be a list of {kind.__name__}, got str {value!r}",
                      hint=f"pass a list: {what.rpartition(' ')[2]}=[{value!r}]")  # fmt: skip
    if _array_1d(value) or isinstance(value, range):  # np.logspace(-4, -2, 3), range(3)
        value = list(value)
    if not isinstance(value, (list, tuple)):  # a set has no order, a generator is used up
        raise BadType(f"{what} must be a list of {kind.__name__}, got {type(value).__name__}")
    items = [_item(what, v, kind) for v in value]
    if not items:
        raise BadArgument(f"{what} is empty", hint="give at least one value")
    for i, item in enumerate(items):
        if item in items[:i]:  # 1e-3 and 0.001 are one cell: it would train twice
            raise BadArgument(f"{what} lists {item!r} twice", hint="give each value once")
    return items


def _array_1d(value: Any) -> bool:
    """A one-dimensional array (numpy's, or any with its ``ndim``/``tolist``): a list of values
    to a caller; ``sizes``'s strs and the numbers alike are checked item by item after."""
    return getattr(value, "ndim", None) == 1 and callable(getattr(value, "tolist", None))


def _item(what: str, value: Any, kind: type) -> Any:
    """One item of a list of ``kind``: a str, or a number (not a bool) as Python's own
    (field_types' rule for a config's numbers: np.float32(1e-3) as a float, JSON takes no
    numpy)."""
    if kind is str:
        plain = value if isinstance(value, str) else None
    else:
        plain = plain_number(value, kind)
    if plain is None:
        raise BadType(f"{what} must be a list of {kind.__name__}, got an item of "
                      f"{type(value).__name__} {value!r}"[:300])  # fmt: skip
    return plain


@contextlib.contextmanager
def _as_python_error() -> Iterator[None]:
    """A plain :class:`UserError` from the config's checks as a :class:`BadArgument` (also a
    ``ValueError``); one that already is a ``ValueError`` or ``TypeError`` (an unknown
    precision or clip mode, a bound) passes as it is."""
    try:
        yield
    except UserError as e:
        if isinstance(e, (ValueError, TypeError)):
            raise
        raise BadArgument(e.message, e.hint) from None


def checked_arms(base: RunConfig, clips: list[str]) -> list[RunConfig]:
    """Each arm's config (``base`` with the arm's clip mode), resolved once it passes
    :func:`~andrea_diag.experiments.config_checks.check_config`: what the command line's
    options and a saved config pass, for a Python caller, before anything is written."""
    configs = []
    for clip in clips:
        with _as_python_error():
            cfg = dataclasses.replace(base, clip=clip, arm=clip)
            configs.append(check_config(cfg, name=lambda field: field))
    return configs
