"""ParamStates (andrea_diag/optim_state.py): the cached per-parameter state dicts are always
what ``[optimizer.state.get(p) for p in params]`` would give."""

from __future__ import annotations

import torch

from andrea_diag.optim_state import ParamStates


def _stepped(n: int = 3) -> tuple[list[torch.nn.Parameter], torch.optim.Optimizer]:
    params = [torch.nn.Parameter(torch.randn(4)) for _ in range(n)]
    opt = torch.optim.AdamW(params)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    return params, opt


def _fresh(opt: torch.optim.Optimizer, params: list) -> list:
    return [opt.state.get(p) for p in params]


def test_the_cached_dicts_are_the_optimizers_own_across_steps() -> None:
    params, opt = _stepped()
    states = ParamStates()
    first = states.of(opt, params)
    opt.step()
    again = states.of(opt, params)
    assert again is first  # cached: no lookup
    assert all(a is b for a, b in zip(again, _fresh(opt, params), strict=True))


def test_a_loaded_state_dict_is_looked_up_again() -> None:
    params, opt = _stepped()
    states = ParamStates()
    before = states.of(opt, params)
    opt.load_state_dict(opt.state_dict())  # a resume: new state dicts and tensors
    after = states.of(opt, params)
    assert all(a is b for a, b in zip(after, _fresh(opt, params), strict=True))
    assert all(a is not b for a, b in zip(after, before, strict=True))


def test_parameters_without_state_are_not_cached_and_a_new_list_is_looked_up() -> None:
    params = [torch.nn.Parameter(torch.randn(4)) for _ in range(2)]
    opt = torch.optim.AdamW(params)
    states = ParamStates()
    assert states.of(opt, params) == [None, None]
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()  # the first step fills the state: seen at once, not a stale None
    assert all(d is not None for d in states.of(opt, params))
    swapped = [params[1], params[0]]
    assert all(a is b for a, b in zip(states.of(opt, swapped), _fresh(opt, swapped), strict=True))


def test_a_moment_replaced_in_its_dict_is_seen() -> None:
    params, opt = _stepped(1)
    states = ParamStates()
    states.of(opt, params)
    new = torch.zeros(4)
    opt.state[params[0]]["exp_avg"] = new  # in place in the dict, as fused_adamw.py does
    assert states.of(opt, params)[0]["exp_avg"] is new
