"""Parity review (s21): ``andrea_diag.clip_grad_norm_`` against ``torch.nn.utils.clip_grad_norm_``
in torch 2.13, side by side on the same gradients, where tests/test_clip_torch_contract.py and
tests/test_clip_max_norm.py do not already pin it: autograd (torch clips under ``no_grad``),
where the empty-generator warning points, and the argument forms torch accepts.

    pytest tests/test_parity_s21_clip.py -q
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

from andrea_diag import clip_grad_norm_, clip_grad_norm_with_stats

CLIPS: dict[str, Callable[..., torch.Tensor]] = {
    "torch": torch.nn.utils.clip_grad_norm_,
    "ours": clip_grad_norm_,
    "stats": lambda params, m: clip_grad_norm_with_stats(params, m).total_norm,
    "per-tensor": lambda params, m: clip_grad_norm_with_stats(params, m, mode="per-tensor").scale,
}


@pytest.mark.parametrize("name", list(CLIPS))
def test_a_gradient_that_requires_grad_is_clipped_without_autograd_like_torch(name: str) -> None:
    """torch clips under ``no_grad``; ours raised "a leaf Variable that requires grad is being
    used in an in-place operation" for such a gradient."""
    w = torch.nn.Parameter(torch.zeros(2))
    w.grad = torch.tensor([3.0, 4.0], requires_grad=True)
    CLIPS[name]([w], 1.0)
    assert w.grad.tolist() == pytest.approx([0.6, 0.8])
    assert w.grad.grad_fn is None and w.grad.is_leaf


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_clipping_a_create_graph_gradient_records_no_history_like_torch(dtype: torch.dtype) -> None:
    fns = []
    for clip in (torch.nn.utils.clip_grad_norm_, clip_grad_norm_):
        w = torch.nn.Parameter(torch.tensor([3.0, 4.0], dtype=dtype))
        with warnings.catch_warnings():  # torch's "reference cycle" warning (once a process)
            warnings.simplefilter("ignore")
            (w * w).sum().backward(create_graph=True)
        before = w.grad.grad_fn
        total = clip(w, 1.0)
        assert not total.requires_grad
        fns.append(w.grad.grad_fn is before)
    assert fns == [True, True]


def test_the_empty_generator_warning_names_the_callers_line_as_torchs_does() -> None:
    for clip in (torch.nn.utils.clip_grad_norm_, clip_grad_norm_):
        with pytest.warns(UserWarning, match="empty generator") as rec:
            clip((p for p in []), 1.0)
        assert rec[0].filename == __file__


def _param(values: list[float], dtype: torch.dtype = torch.float32, grad: bool = True) -> Any:
    p = torch.nn.Parameter(torch.zeros(len(values), dtype=dtype), requires_grad=grad)
    p.grad = torch.tensor(values, dtype=dtype)
    return p


def _one() -> list[Any]:
    return [_param([3.0, -4.0])]


# case -> (parameters, how the call passes them, further positional args, keywords)
ARGS: dict[str, Callable[[], tuple[list[Any], Callable[[list], Any], tuple, dict]]] = {
    "a single tensor": lambda: (_one(), lambda ps: ps[0], (1.0,), {}),
    "a tuple": lambda: (_one(), tuple, (1.0,), {}),
    "a generator": lambda: (_one(), lambda ps: (p for p in ps), (1.0,), {}),
    "norm_type 'inf'": lambda: (_one(), list, (1.0, "inf"), {}),
    "norm_type int 1": lambda: (_one(), list, (1.0, 1), {}),
    "norm_type 0.5": lambda: (_one(), list, (1.0, 0.5), {}),
    "max_norm int": lambda: (_one(), list, (2,), {}),
    "max_norm float64 tensor": lambda: (_one(), list, (torch.tensor(2.0).double(),), {}),
    "max_norm 0": lambda: (_one(), list, (0,), {}),
    "requires_grad=False": lambda: ([_param([3.0, -4.0], grad=False)], list, (1.0,), {}),
    "a param without grad": lambda: ([torch.nn.Parameter(torch.ones(2)), *_one()], list, (1,), {}),
    "float32 and float64": lambda: ([_param([3.0]), _param([4.0], torch.float64)], list, (1,), {}),
    "foreach=True": lambda: (_one(), list, (1.0,), {"foreach": True}),
    "foreach=False": lambda: (_one(), list, (1.0,), {"foreach": False}),
    "an inf gradient": lambda: ([_param([math.inf, 1.0])], list, (1.0,), {}),
}


@pytest.mark.parametrize("case", list(ARGS))
def test_each_argument_form_torch_takes_gives_torchs_norm_and_gradients(case: str) -> None:
    seen = []
    for clip in (torch.nn.utils.clip_grad_norm_, clip_grad_norm_):
        params, wrap, args, kwargs = ARGS[case]()
        total = clip(wrap(params), *args, **kwargs)
        seen.append((total, [p.grad for p in params if p.grad is not None]))
    (a, ga), (b, gb) = seen
    assert a.dtype == b.dtype and a.shape == b.shape == () and a.device == b.device
    torch.testing.assert_close(a, b, equal_nan=True)
    assert len(ga) == len(gb)
    for x, y in zip(ga, gb, strict=True):
        torch.testing.assert_close(x, y, equal_nan=True)
