"""What a checkpoint's decoded state must be before the trainer takes it: the arm's identity,
and the trainer's own counters of the types it keeps.

    check_identity(tree, path, expect)   # another arm's or run's checkpoint: one line
    check_train_state(state, path)       # update, tokens, batch hashes ... of TrainState's types

A checkpoint is untrusted input (its CRC guards against a torn write, not against whoever made
the run directory). ``TrainState.load_state_dict`` sets whatever it is given: a crafted
``"update": "4"``, ``"batch_hashes": "abc"`` or ``"counts": 5`` (a method replaced by a
number) was taken without a word, and ``--resume`` ended in a TypeError or AttributeError
traceback at the first update after it, the arm's tables already cut back.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from andrea_diag.errors import UserError
from andrea_diag.train.components import TrainState

DAMAGED_HINT = "it is not one we wrote; delete the arm's checkpoints folder to restart the arm"


def check_identity(state: Mapping[str, Any], path: Path, expect: Mapping[str, Any]) -> None:
    """Refuse, in one line, a checkpoint whose identity differs from ``expect``."""
    saved = state.get("identity")
    run = state.get("run")
    saved = {**(saved if isinstance(saved, dict) else {}), **(run if isinstance(run, dict) else {})}
    for key, want in expect.items():
        if saved.get(key) != want:
            raise UserError(
                f"checkpoint {path} is from another run: {key} {saved.get(key)!r}, "
                f"this run {want!r}",
                hint="resume with the options the run was started with, or delete the "
                "checkpoint to restart the arm",
            )


@functools.cache
def _fields() -> dict[str, Any]:
    """TrainState's fields and their types (``int``, ``list[str]`` ...), from the class itself:
    a field added there is checked here without a second list to keep in step."""
    return typing.get_type_hints(TrainState)


def _fits(value: Any, kind: Any) -> bool:
    """``value`` is of ``kind``: a count (``int``, not a bool, not negative), or a list whose
    items are each of its item type."""
    if kind is int:
        return type(value) is int and value >= 0
    if typing.get_origin(kind) is list:
        (item,) = typing.get_args(kind)
        return isinstance(value, list) and all(type(v) is item for v in value)
    return isinstance(value, kind)


def check_train_state(state: Mapping[str, Any], path: Path) -> None:
    """One :class:`UserError` line unless the trainer's counters in ``state`` (decoded) are
    every field of :class:`TrainState`, each of its type, at the checkpoint's own update. A
    state with no trainer part is the trainer's to refuse ("does not fit this run")."""
    trainer = state.get("trainer")
    if not isinstance(trainer, dict) or "train_state" not in trainer:
        return
    part, fields = trainer["train_state"], _fields()
    said = f"checkpoint {path} does not fit this run: its trainer state"
    if not isinstance(part, dict):
        raise UserError(f"{said} is a {type(part).__name__}", hint=DAMAGED_HINT)
    missing, extra = sorted(set(fields) - set(part)), sorted(map(str, set(part) - set(fields)))
    if missing or extra:
        what = f"lacks {', '.join(missing)}" if missing else f"holds {', '.join(extra)}"[:200]
        raise UserError(f"{said} {what}", hint=DAMAGED_HINT)
    for key, kind in fields.items():
        if not _fits(part[key], kind):
            shown = repr(part[key])[:80]
            raise UserError(f"{said}'s {key} is {shown}, not a {_name(kind)}", hint=DAMAGED_HINT)
    if part["update"] != state.get("update"):
        raise UserError(f"{said} is at update {part['update']}, the checkpoint at "
                        f"{state.get('update')!r}"[:300], hint=DAMAGED_HINT)  # fmt: skip


def _name(kind: Any) -> str:
    """``int`` as "count", ``list[str]`` as "list of str"."""
    if kind is int:
        return "count"
    args = typing.get_args(kind)
    return f"list of {args[0].__name__}" if args else getattr(kind, "__name__", str(kind))
