"""The optimizer's per-parameter state dicts, looked up once per state object, not every update.

    states = ParamStates()
    per_param = states.of(optimizer, params)   # == [optimizer.state.get(p) for p in params]

Why: ``optimizer.state`` is keyed by the parameter tensors, and a tensor's ``__hash__`` is a
Python call. The graphed step's key and the optimizer-state probe each looked every parameter up
every update, about 0.3 ms of a 12m update's host time on the H200 under cProfile
(reports/bench-train/h200-2026-12-03d/), in an update the host bounds there.

Why the dicts can be kept: torch fills a parameter's dict at its first step and updates it in
place (so does this toolkit: ``clip/fused_adamw.py``, the moment resets of ``clip/adaptive.py``),
and ``load_state_dict`` installs a new ``state`` object. So the lookup is redone when the state
object, its length or the parameter list changes, and while any parameter has no state yet.
The tensors are read from the dicts at each call, so a tensor replaced in a dict is seen. Not
seen: ``optimizer.state[p] = new_dict`` for a parameter that already has state (same object,
same length); nothing the toolkit's loops run does that, and code that does must make a new
``ParamStates``.

    >>> import torch
    >>> p = torch.nn.Parameter(torch.ones(2))
    >>> opt = torch.optim.AdamW([p])
    >>> states = ParamStates()
    >>> states.of(opt, [p])
    [None]
    >>> p.grad = torch.ones(2); opt.step()
    >>> states.of(opt, [p])[0] is opt.state[p]
    True
"""

from __future__ import annotations

import operator
from typing import Any

import torch


class ParamStates:
    """``[optimizer.state.get(p) for p in params]``, cached while it cannot have changed."""

    def __init__(self) -> None:
        self._state: Any = None  # the optimizer's ``state`` object the cache is of
        self._len = -1
        self._params: list[torch.Tensor] = []
        self._dicts: list[dict[str, Any] | None] = []

    def of(
        self, optimizer: torch.optim.Optimizer, params: list[torch.Tensor]
    ) -> list[dict[str, Any] | None]:
        state = optimizer.state
        if (
            state is self._state
            and len(state) == self._len
            and len(params) == len(self._params)
            and all(map(operator.is_, params, self._params))  # identity, no tensor op
        ):
            return self._dicts
        dicts = [state.get(p) for p in params]
        if all(d is not None for d in dicts):  # every parameter has its state: keep it
            self._state, self._len, self._dicts = state, len(state), dicts
            self._params = list(params)  # the caller's list may change
        else:
            self._state = None
        return dicts
