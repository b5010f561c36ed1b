"""Parity review (s24): ``ClippedAdamW`` against ``torch.optim.AdamW`` in torch 2.13, where the
s21 and s23 reviews and tests/test_fused_adamw.py do not pin it: a copied or pickled optimizer
(``copy.deepcopy``, ``pickle``, ``torch.save`` of the optimizer itself), and a state dict
saved by an older torch (no ``maximize``/``foreach``/... keys, an integer ``step``).

    pytest tests/test_parity_s24_adamw.py -q
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch

from andrea_diag.clip.fused_adamw import ClippedAdamW

HYPER = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def _params() -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in ((4, 3), (5,))]


def _step(opt: torch.optim.Optimizer, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for p in opt.param_groups[0]["params"]:
        p.grad = torch.randn(p.shape, generator=gen) * 3  # norm well past max_norm: clipped
    opt.step()


def _torch_save(opt: Any) -> Any:
    buf = io.BytesIO()
    torch.save(opt, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


COPIES: dict[str, Callable[[Any], Any]] = {
    "copy.deepcopy": copy.deepcopy,
    "pickle": lambda opt: pickle.loads(pickle.dumps(opt)),
    "torch.save": _torch_save,
}


@pytest.mark.parametrize("how", list(COPIES))
def test_a_copied_optimizer_keeps_its_clip_settings_and_steps_as_the_original(how: str) -> None:
    """torch's AdamW copies and unpickles into an optimizer that steps; ours lost ``max_norm``,
    ``norm_type`` and ``impl`` (torch's ``__getstate__`` keeps only defaults, state and
    groups) and its first step raised "'ClippedAdamW' object has no attribute 'impl'"."""
    theirs = COPIES[how](torch.optim.AdamW(_params(), **HYPER))
    _step(theirs, 1)  # what torch's does: the copy steps
    ours = ClippedAdamW(_params(), **HYPER, max_norm=0.25, norm_type=1.0, impl="reference")
    _step(ours, 0)
    twin = COPIES[how](ours)
    assert (twin.max_norm, twin.norm_type, twin.impl) == (0.25, 1.0, "reference")
    assert float(twin.last_clip.total_norm) == float(ours.last_clip.total_norm)
    _step(ours, 1)
    _step(twin, 1)
    for p, q in zip(ours.param_groups[0]["params"], twin.param_groups[0]["params"], strict=True):
        assert torch.equal(p, q)
        assert float(twin.state[q]["step"]) == 2.0
    assert float(ours.last_clip.scale) < 1  # the step clipped, and the copy's clipped alike
    assert torch.equal(twin.last_clip.scale, ours.last_clip.scale)


def _old_format(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """``opt``'s state dict as an older torch saved it: none of the flags added since, and an
    integer ``step``."""
    saved = copy.deepcopy(opt.state_dict())
    for group in saved["param_groups"]:
        for key in ("maximize", "foreach", "capturable", "differentiable", "fused",
                    "decoupled_weight_decay"):  # fmt: skip
            group.pop(key)
    for st in saved["state"].values():
        st["step"] = int(st["step"])
    return saved


def test_a_state_dict_from_an_older_torch_loads_and_steps_like_torchs_adamw() -> None:
    """torch's AdamW fills the missing group keys and makes the integer step a tensor
    (``Adam.__setstate__``); ours kept the group as it came, and its first step raised
    "'int' object has no attribute 'device'"."""
    source = torch.optim.AdamW(_params(), **HYPER)
    _step(source, 0)
    old = _old_format(source)
    results = []
    for cls in (torch.optim.AdamW, ClippedAdamW):
        opt = cls(_params(), **HYPER)
        opt.load_state_dict(copy.deepcopy(old))
        assert set(opt.param_groups[0]) == set(source.param_groups[0])
        assert opt.param_groups[0]["decoupled_weight_decay"] is True
        _step(opt, 1)
        p = opt.param_groups[0]["params"][0]
        results.append((opt.state[p]["step"].dtype, float(opt.state[p]["step"])))
        saved_keys = set(opt.state_dict()["param_groups"][0])
        assert saved_keys == set(source.state_dict()["param_groups"][0])
    assert results[0] == results[1] == (torch.float32, 2.0)
