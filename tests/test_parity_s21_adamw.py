"""Parity review (s21): ``ClippedAdamW`` (CPU reference path) against ``torch.optim.AdamW`` with
``clip_grad_norm_`` in torch 2.13: its keywords, its param-group flags, state dicts in both
directions, the closure and ``zero_grad``. What tests/test_fused_adamw.py pins (the numbers over
20 steps, the non-finite skip, torch state loading into ours) is not repeated here.

    pytest tests/test_parity_s21_adamw.py -q
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from andrea_diag.clip.fused_adamw import ClippedAdamW

HYPER = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in ((4, 3), (5,))]


def _grads(step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return [torch.randn(s, generator=gen) * 2 for s in ((4, 3), (5,))]


def _step_both(ours: ClippedAdamW, theirs: torch.optim.AdamW, step: int, max_norm: float) -> None:
    ps, qs = ours.param_groups[0]["params"], theirs.param_groups[0]["params"]
    for p, q, g in zip(ps, qs, _grads(step), strict=True):
        p.grad, q.grad = g.clone(), g.clone()
    ours.step()
    torch.nn.utils.clip_grad_norm_(qs, max_norm)
    theirs.step()


def test_the_param_groups_carry_torch_adamws_keys() -> None:
    ours = ClippedAdamW(_params(), **HYPER)
    theirs = torch.optim.AdamW(_params(), **HYPER)
    assert set(ours.param_groups[0]) == set(theirs.param_groups[0])


@pytest.mark.parametrize(
    "kwargs", [{"foreach": True}, {"fused": True}, {"capturable": True}, {"capturable": False}]
)
def test_torch_adamws_execution_keywords_are_taken_and_the_step_is_unchanged(kwargs: dict) -> None:
    plain, flagged = ClippedAdamW(_params(), **HYPER), ClippedAdamW(_params(), **HYPER, **kwargs)
    for opt in (plain, flagged):
        for p, g in zip(opt.param_groups[0]["params"], _grads(0), strict=True):
            p.grad = g
        opt.step()
    for p, q in zip(
        plain.param_groups[0]["params"], flagged.param_groups[0]["params"], strict=True
    ):
        assert torch.equal(p, q)


def test_amsgrad_false_is_taken_in_torchs_position() -> None:
    opt = ClippedAdamW(_params(), 1e-3, (0.9, 0.999), 1e-8, 1e-2, False)  # AdamW's sixth argument
    group = opt.param_groups[0]
    assert (group["lr"], group["eps"], group["weight_decay"], group["amsgrad"]) == (
        1e-3,
        1e-8,
        1e-2,
        False,
    )


REFUSED = [
    ({"amsgrad": True}, "amsgrad=True"),
    ({"maximize": True}, "maximize=True"),
    ({"differentiable": True}, "differentiable=True"),
]


@pytest.mark.parametrize(("flags", "name"), REFUSED)
def test_a_flag_this_step_would_ignore_is_refused_as_a_keyword(flags: dict, name: str) -> None:
    with pytest.raises(ValueError, match=f"ClippedAdamW does not support {name}"):
        ClippedAdamW(_params(), **flags)


@pytest.mark.parametrize(
    ("flags", "name"),
    [*REFUSED, ({"decoupled_weight_decay": False, "weight_decay": 0.1}, "decoupled_weight_decay")],
)
def test_a_flag_this_step_would_ignore_is_refused_in_a_param_group(flags: dict, name: str) -> None:
    """Such a group used to be accepted and stepped as plain AdamW, silently."""
    a, b = _params()
    opt = ClippedAdamW([{"params": [a]}], **HYPER)
    with pytest.raises(ValueError, match=f"ClippedAdamW does not support {name}"):
        opt.add_param_group({"params": [b], **flags})
    assert len(opt.param_groups) == 1
    with pytest.raises(ValueError, match=name):
        ClippedAdamW([{"params": [a], **flags}], **HYPER)


def test_a_torch_amsgrad_state_dict_is_refused_before_anything_loads() -> None:
    """Loading it used to drop ``max_exp_avg_sq`` and step on without it."""
    theirs = torch.optim.AdamW(_params(), **HYPER, amsgrad=True)
    ours = ClippedAdamW(_params(), **HYPER)
    _step_both(ours, theirs, 0, 1.0)
    before = {k: v.clone() for k, v in ours.state[ours.param_groups[0]["params"][0]].items()}
    with pytest.raises(ValueError, match="amsgrad=True"):
        ours.load_state_dict(theirs.state_dict())
    assert ours.param_groups[0]["amsgrad"] is False
    after = ours.state[ours.param_groups[0]["params"][0]]
    assert all(torch.equal(after[k], v) for k, v in before.items())


def test_complex_parameters_are_refused_where_torch_steps_them_as_real_pairs() -> None:
    with pytest.raises(TypeError, match="complex parameters"):
        ClippedAdamW([torch.nn.Parameter(torch.zeros(3, dtype=torch.complex64))])


def test_a_cpu_state_dict_loads_into_torch_adamw_and_both_carry_on_alike() -> None:
    """Our groups said ``capturable=True``; torch's AdamW then refused CPU parameters at its
    first step ("If capturable=True, params and state_steps must be on supported devices")."""
    ours = ClippedAdamW(_params(), **HYPER, max_norm=0.5)
    twin = torch.optim.AdamW(_params(), **HYPER)
    for step in range(3):
        _step_both(ours, twin, step, 0.5)
    theirs = torch.optim.AdamW([p.detach().clone().requires_grad_() for p in _params(9)], **HYPER)
    theirs.load_state_dict(copy.deepcopy(ours.state_dict()))  # as saved: no shared tensors
    for p, q in zip(ours.param_groups[0]["params"], theirs.param_groups[0]["params"], strict=True):
        q.data.copy_(p.detach())
    for step in range(3, 6):
        _step_both(ours, theirs, step, 0.5)
    for p, q in zip(ours.param_groups[0]["params"], theirs.param_groups[0]["params"], strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)
        assert float(theirs.state[q]["step"]) == float(ours.state[p]["step"]) == 6.0


def test_our_state_dict_round_trips_with_torchs_key_names() -> None:
    """Saved, loaded into a fresh optimizer over copies of the parameters: the next step of the
    two is the same, bit for bit."""
    ours = ClippedAdamW(_params(), **HYPER)
    twin = torch.optim.AdamW(_params(), **HYPER)
    _step_both(ours, twin, 0, 1.0)
    saved, torchs = ours.state_dict(), twin.state_dict()
    assert {k: set(v) for k, v in saved["state"].items()} == {
        k: set(v) for k, v in torchs["state"].items()
    }
    assert set(saved["param_groups"][0]) == set(torchs["param_groups"][0])
    copies = [p.detach().clone().requires_grad_() for p in ours.param_groups[0]["params"]]
    again = ClippedAdamW(copies, **HYPER)
    again.load_state_dict(copy.deepcopy(saved))
    for opt in (ours, again):
        for p, g in zip(opt.param_groups[0]["params"], _grads(1), strict=True):
            p.grad = g.clone()
        opt.step()
    for p, q in zip(ours.param_groups[0]["params"], copies, strict=True):
        assert torch.equal(p, q)
        a, b = ours.state[p], again.state[q]
        assert b["step"].dtype == torch.float32 and float(b["step"]) == 2.0
        assert torch.equal(a["exp_avg"], b["exp_avg"]) and torch.equal(
            a["exp_avg_sq"], b["exp_avg_sq"]
        )


def test_a_state_dict_with_a_tensor_lr_is_refused_before_anything_loads() -> None:
    """The constructor refused a tensor lr, but a loaded one was taken and read back with a
    host sync at every step."""
    theirs = torch.optim.AdamW(_params(), **{**HYPER, "lr": torch.tensor(1e-2)})
    ours = ClippedAdamW(_params(), **HYPER)
    with pytest.raises(ValueError, match="a tensor lr"):
        ours.load_state_dict(theirs.state_dict())
    assert ours.param_groups[0]["lr"] == HYPER["lr"]
    with pytest.raises(ValueError, match="a tensor lr"):
        ours.add_param_group({"params": _params(1), "lr": torch.tensor(1e-3)})
    assert len(ours.param_groups) == 1


def test_a_non_capturable_torch_state_dict_loads_with_our_groups_still_capturable() -> None:
    """Loading took torch's ``capturable=False`` into our groups, so torch's loader kept each
    ``step`` on the CPU and the first step had to copy it to the parameter's device."""
    theirs = torch.optim.AdamW(_params(), **HYPER)
    ours = ClippedAdamW(_params(), **HYPER)
    _step_both(ours, theirs, 0, 1.0)
    saved = theirs.state_dict()
    assert saved["param_groups"][0]["capturable"] is False
    ours.load_state_dict(saved)
    assert ours.param_groups[0]["capturable"] is True
    assert saved["param_groups"][0]["capturable"] is False  # the caller's dict is not changed


def test_step_returns_the_closures_loss_and_zero_grad_sets_none_as_torchs() -> None:
    results: list[Any] = []
    for cls in (torch.optim.AdamW, ClippedAdamW):
        params = _params()
        opt = cls(params, **HYPER)

        def closure(params: list = params, opt: Any = opt) -> torch.Tensor:
            opt.zero_grad()
            loss = sum((p * p).sum() for p in params)
            loss.backward()
            return loss

        loss = opt.step(closure)
        opt.zero_grad(set_to_none=False)
        zeroed = all(p.grad is not None and not p.grad.any() for p in params)
        opt.zero_grad()
        results.append((float(loss.detach()), zeroed, all(p.grad is None for p in params)))
    assert results[0] == results[1]
