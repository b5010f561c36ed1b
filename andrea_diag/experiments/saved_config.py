"""A run's saved ``config.json`` read back as a :class:`RunConfig`, or one line saying why not.

    cfg = saved_config(arm_dir / "config.json")

``config.json`` comes from a run directory, which is untrusted input (someone else's sweep, a
hand-edited or truncated file). Every field is checked against the type :class:`RunConfig`
declares before it is used (``"steps": "16"``, a list where a number is due, an unknown size),
and integers must fit in 64 bits, so a damaged file is one line naming the file and the field
instead of a traceback somewhere in training.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

from andrea_diag.config import RunConfig
from andrea_diag.errors import UserError
from andrea_diag.field_types import type_hints
from andrea_diag.rundir import read_json

INT_LIMIT = 2**63  # anything larger is no count of updates, bytes or seeds


def _ok(value: Any, tp: Any) -> bool:
    """Whether the JSON ``value`` fits the annotation ``tp`` (the shapes RunConfig uses)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_ok(value, a) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool) and abs(value) < INT_LIMIT
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin in (list, tuple):
        return isinstance(value, list) and all(_ok(v, args[0]) for v in value) if args else True
    if origin is dict:
        return isinstance(value, dict) and all(
            _ok(k, args[0]) and _ok(v, args[1]) for k, v in value.items()
        )
    if dataclasses.is_dataclass(tp):
        return isinstance(value, dict) and _bad_field(value, tp) is None
    return True  # a shape this checker does not know: the dataclass itself decides


def _bad_field(d: dict[str, Any], cls: type) -> str | None:
    """The first field of ``d`` whose value does not fit ``cls``'s annotation, else None."""
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in d and not _ok(d[f.name], hints[f.name]):
            return f.name
    return None


def saved_config(path: Path, arm: str | None = None) -> RunConfig:
    """``path`` (a config.json) as a RunConfig; ``arm``: the arm directory it must belong to."""
    d = read_json(path, "the run's config", kind=dict)
    bad = _bad_field(d, RunConfig)
    if bad is not None:
        raise UserError(
            f"{path}: {bad} is {d[bad]!r}, which is not a valid value",
            hint="the file is damaged or edited; restore it, or start the run again",
        )
    try:
        cfg = RunConfig.from_dict(d)
        cfg.resolve()  # every bound (steps -1, seq_len past the block), said of this file
    except UserError as exc:  # not of an option the user never typed ("--steps must be ...")
        raise UserError(
            f"{path} holds a value no run takes: {exc.message}",
            hint="the file is damaged or edited; restore it, or start the run again",
        ) from None
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise UserError(f"{path} is not a run config ({type(exc).__name__}: {exc})") from None
    if arm is not None and cfg.arm != arm:
        raise UserError(f"{path} belongs to arm {cfg.arm!r}, found in the folder of arm {arm!r}")
    return cfg
