"""The Python types of the config's fields, checked where a Python caller gives them.

The command line and a saved ``config.json`` never hand the config a value of the wrong type
(typer converts what was typed; ``experiments/saved_config.py`` checks the file first), but a
Python caller can, and the bounds let it through (``True >= 1``, ``2.0 >= 1``). Before these
checks ``RunConfig(seed=True)`` trained with seed ``true`` in its config.json,
``RunConfig(steps=True)`` one update, ``micro_batch=2.0`` ended in torch's multinomial and
``seed=np.int64(1)`` in JSON's "int64 is not JSON serializable" once the arm had trained, each
after the run's folder was made; ``ClipParams(zclip_warmup=2.5)`` was torch's "full():
argument 'size'" at the first update, ``agc_lambda=torch.tensor(0.01)`` went into config.json
as a tensor.

    RunConfig(seed=True)       # BadType: RunConfig: seed must be an int, got bool True

A numpy scalar is the number it holds (``np.int64(3)`` is 3): :func:`plain_fields` gives it as
Python's ``int`` or ``float``, which every later reader and JSON take. Whether the value is in
its bounds is not judged here: ``fields.check_bounds`` says that, by the option's flag.

This module imports only the standard library and the config layer's leaves.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import os
import types
import typing
from typing import Any

from andrea_diag.errors import BadType

_BAD = object()  # no value of the annotation's type


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``cls``'s field annotations, resolved once (the specs' checks read them too)."""
    return typing.get_type_hints(cls)


def plain_number(value: Any, kind: type) -> int | float | None:
    """``value`` as a field of ``kind`` (int or float) holds it, numpy's scalars as Python's
    own; None where it is no such number (a bool, a str, a float for an int).

    >>> import numpy as np
    >>> plain_number(np.int64(3), int), plain_number(True, int), plain_number(2, float)
    (3, None, 2)
    """
    plain = _number(value, kind)
    return None if plain is _BAD else plain


def _number(value: Any, kind: type) -> Any:
    """``value`` as a field of ``kind`` (int or float) holds it, or ``_BAD``: a bool is no
    number here (``True`` is no count, no rate); numpy's scalars become Python's."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return _BAD
    if kind is int:
        if not isinstance(value, numbers.Integral):
            return _BAD
        return value if type(value) is int else int(value)
    # a Python int stays one: float(10**400) overflows, and check_bounds says what is wrong
    return value if type(value) in (int, float) else float(value)


def _plain(value: Any, hint: Any) -> Any:
    """``value`` as a field annotated ``hint`` holds it (see :func:`_number`), or ``_BAD``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return next((v for a in args if (v := _plain(value, a)) is not _BAD), _BAD)
    if hint is type(None):
        return value if value is None else _BAD
    if hint in (int, float):
        return _number(value, hint)
    if hint is bool:
        return value if isinstance(value, bool) else _BAD
    if hint is str or origin is typing.Literal:  # which strings: resolve's own choice check
        if hint is str and isinstance(value, os.PathLike):  # a source's Path: its text
            return os.fspath(value) if isinstance(os.fspath(value), str) else _BAD
        return value if isinstance(value, str) else _BAD
    if origin is list:  # a tuple is a list to a caller; its items made plain one by one
        items = [_plain(v, args[0]) for v in value] if isinstance(value, (list, tuple)) else None
        if items is None or any(v is _BAD for v in items):
            return _BAD
        same = isinstance(value, list) and all(a is b for a, b in zip(items, value, strict=True))
        return value if same else items
    if origin is dict:
        if not isinstance(value, dict):
            return _BAD
        pairs = [(_plain(k, args[0]), _plain(v, args[1])) for k, v in value.items()]
        if any(k is _BAD or v is _BAD for k, v in pairs):
            return _BAD
        same = all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items(), strict=True))
        return value if same else dict(pairs)
    if isinstance(hint, type):
        return value if isinstance(value, hint) else _BAD
    return value  # a shape this module does not know: the field's own checks judge it


def _described(hint: Any) -> str:
    """The annotation ``hint`` in words: ``int | None`` is "an int or None"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_described(a) for a in args)
    if origin is list:
        return f"a list of {_described(args[0]).removeprefix('a ').removeprefix('an ')}"
    if origin is dict:
        return "a dict of str to str" if args == (str, str) else "a dict"
    words = {type(None): "None", int: "an int", float: "a number", bool: "True or False"}
    if hint in words:
        return words[hint]
    return "a str" if hint is str or origin is typing.Literal else f"a {hint.__name__}"


def plain_fields(obj: Any, owner: str) -> dict[str, Any]:
    """The fields of the dataclass ``obj`` that a caller gave as a numpy scalar, as Python's
    ``int`` or ``float``, by name; :class:`BadType` naming the first field of the wrong type
    (``owner``: the class, as the caller wrote it).

    >>> import numpy as np
    >>> from andrea_diag.probe_config import ProbeConfig
    >>> plain_fields(ProbeConfig(spike_window=np.int64(20)), "ProbeConfig")
    {'spike_window': 20}
    >>> plain_fields(ProbeConfig(spike_window=True), "ProbeConfig")
    Traceback (most recent call last):
    ...
    andrea_diag.errors.BadType: ProbeConfig: spike_window must be an int, got bool True
    """
    changed = {}
    hints = type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        plain = _plain(value, hints[f.name])
        if plain is _BAD:
            raise BadType(f"{owner}: {f.name} must be {_described(hints[f.name])}, got "
                          f"{type(value).__name__} {value!r}")  # fmt: skip
        if plain is not value:
            changed[f.name] = plain
    return changed
