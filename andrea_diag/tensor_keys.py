"""Which tensors a captured CUDA graph reads, as a key that cannot be fooled by a reused id.

    key = TensorKey([p.grad for p in params], moments, extra=(lr, betas))
    key == TensorKey(...)    # True only over the very same live tensors (and equal extras)
    key.matches(grads, moments, extra=(lr, betas))   # the same, without building a key

A graph replays on the addresses it was captured with, so a runner replays only while the
tensors it reads are the captured ones. ``id()`` alone is not enough: once a tensor is freed
its id can be handed to a new one (measured on the CPU: a few gradients' ids repeat between
eager updates). The key holds the tensors weakly, so it keeps nothing alive, and a freed tensor
never matches again.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import torch

Refs = tuple["weakref.ref[torch.Tensor] | None", ...] | None


def _refs(group: Sequence[torch.Tensor | None] | None) -> Refs:
    return None if group is None else tuple(None if t is None else weakref.ref(t) for t in group)


def _same(a: Refs, b: Refs) -> bool:
    if a is None or b is None:
        return a is b
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x is None or y is None:
            if x is not y:
                return False
        elif (t := x()) is None or t is not y():
            return False
    return True


class TensorKey:
    """Groups of tensors (or None) held weakly, plus plain ``extra`` values compared by ``==``."""

    __hash__ = None  # type: ignore[assignment]  # compared, never hashed

    def __init__(self, *groups: Sequence[torch.Tensor | None] | None, extra: Any = ()) -> None:
        self.groups = tuple(_refs(g) for g in groups)
        self.extra = extra

    def matches(self, *groups: Sequence[torch.Tensor | None] | None, extra: Any = ()) -> bool:
        """``self == TensorKey(*groups, extra=extra)`` without building that key: a replay's
        check, every update, over hundreds of tensors (no weak reference made, no hash)."""
        if len(groups) != len(self.groups) or self.extra != extra:
            return False
        for refs, group in zip(self.groups, groups, strict=True):
            if refs is None or group is None:
                if refs is not group:
                    return False
                continue
            if len(refs) != len(group):
                return False
            for r, t in zip(refs, group, strict=True):
                if (t is None) != (r is None) or (r is not None and r() is not t):
                    return False
        return True

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorKey) or len(self.groups) != len(other.groups):
            return False
        same = all(_same(a, b) for a, b in zip(self.groups, other.groups, strict=True))
        return same and self.extra == other.extra
