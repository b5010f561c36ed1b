"""Parity review (s31): ``ClippedAdamW`` against ``torch.optim.AdamW`` in torch 2.13 on the CPU.

- Tensor betas (``betas=(torch.tensor(0.9), torch.tensor(0.999))``, which torch takes): torch's
  default CPU step (single-tensor) computes ``1 - beta**t`` and ``lr / (1 - beta1**t)`` in the
  betas' dtype and ``1 - beta1`` in the parameter's; ours did it all in float64, 1.5e-7 apart
  after five float64 steps at lr 1e-2 (more in bf16). Now the same bits, per beta: a group
  holding one tensor beta and one float beta steps as torch's too.
- A tensor ``weight_decay`` (torch takes one): torch's ``1 - lr * weight_decay`` rounds in its
  dtype; ours read it as a Python float, 1e-7 apart in float64. A zero decay is skipped, as
  torch skips it: ours multiplied by ``1 - inf * 0`` (NaN) with an infinite lr.
- ``fused=True`` with ``foreach=True`` or ``differentiable=True``: torch raises its RuntimeError
  at construction; ours took the first pair silently and gave the second our ValueError.
- torch's ``foreach=True`` CPU step gives the same bits as ours in float32/float64; its
  ``fused=True`` CPU kernel rounds elsewhere, within the bounds ``clip/adamw_reference.py``
  states (pinned here).

    pytest tests/test_parity_s31_adamw.py -q -p no:cacheprovider
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from andrea_diag.clip.fused_adamw import ClippedAdamW


def _ours(groups: Any, **hyper: Any) -> ClippedAdamW:
    return ClippedAdamW(groups, max_norm=math.inf, impl="reference", **hyper)


def _params(dtype: torch.dtype) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [
        torch.nn.Parameter(torch.randn(s, generator=gen, dtype=torch.float64).to(dtype))
        for s in ((257,), (7, 3))
    ]


def _set_grads(params: list[torch.nn.Parameter], i: int) -> None:
    gen = torch.Generator().manual_seed(100 + i)
    for j, p in enumerate(params):
        g = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.device, p.dtype)
        p.grad = None if (i + j) % 4 == 3 else g  # now and then a parameter without a grad


def _train(
    make: Callable[..., torch.optim.Optimizer],
    dtype: torch.dtype,
    steps: int,
    groups: Callable[[list], Any] = lambda ps: ps,
    **hyper: Any,
) -> list[torch.Tensor]:
    """``steps`` updates from fixed data; the parameters and every state tensor."""
    params = _params(dtype)
    opt = make(groups(params), **hyper)
    for i in range(steps):
        _set_grads(params, i)
        opt.step()
    out = [p.detach() for p in params]
    for p in params:
        out += [opt.state[p][k] for k in ("exp_avg", "exp_avg_sq", "step")]
    return out


def _assert_bits(ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> None:
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b), int((a != b).sum())


DTYPES = [torch.float32, torch.float64, torch.bfloat16]


@pytest.mark.parametrize("beta_dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tensor_betas_give_torch_adamws_bits(dtype: torch.dtype, beta_dtype: torch.dtype) -> None:
    hyper = {
        "lr": 1e-2,
        "weight_decay": 0.1,
        "betas": (torch.tensor(0.9, dtype=beta_dtype), torch.tensor(0.999, dtype=beta_dtype)),
    }
    _assert_bits(_train(_ours, dtype, 12, **hyper), _train(torch.optim.AdamW, dtype, 12, **hyper))


MIXED = {
    "tensor beta1": (torch.tensor(0.8), 0.99),
    "tensor beta2": (0.8, torch.tensor(0.99)),
}


@pytest.mark.parametrize("case", list(MIXED))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_group_with_one_tensor_beta_and_one_float_beta_steps_as_torchs(
    dtype: torch.dtype, case: str
) -> None:
    """torch checks ``both floats or both tensors`` only for the constructor's betas; a param
    group may hold one of each, and torch's step treats each beta on its own."""

    def groups(ps: list) -> list[dict[str, Any]]:
        return [{"params": ps[:1], "betas": MIXED[case]}, {"params": ps[1:], "lr": 0.1}]

    ours = _train(_ours, dtype, 10, groups, lr=1e-2)
    _assert_bits(ours, _train(torch.optim.AdamW, dtype, 10, groups, lr=1e-2))


@pytest.mark.parametrize("wd_dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_tensor_weight_decay_rounds_as_torchs(dtype: torch.dtype, wd_dtype: torch.dtype) -> None:
    hyper = {"lr": 0.05, "weight_decay": torch.tensor(0.37, dtype=wd_dtype)}
    _assert_bits(_train(_ours, dtype, 8, **hyper), _train(torch.optim.AdamW, dtype, 8, **hyper))


@pytest.mark.parametrize("zero", [0.0, torch.tensor(0.0)], ids=["float", "tensor"])
def test_no_weight_decay_skips_the_decay_as_torchs_step_does(zero: float | torch.Tensor) -> None:
    """torch multiplies by ``1 - lr * weight_decay`` only where the decay is not 0: with an
    infinite lr ours multiplied by NaN, and every weight became NaN where torch's are +-inf
    (and NaN only where the step is 0/0)."""
    hyper = {"lr": math.inf, "weight_decay": zero}
    ours, theirs = (
        _train(make, torch.float32, 1, **hyper)[0] for make in (_ours, torch.optim.AdamW)
    )
    assert bool(theirs.isinf().any())
    assert torch.equal(ours.isnan(), theirs.isnan())
    assert torch.equal(ours.nan_to_num(), theirs.nan_to_num())


def test_a_torch_state_dict_with_tensor_betas_loads_and_carries_on_alike() -> None:
    """torch AdamW (tensor betas, float64) for 3 steps; its state dict loads into ours, and both
    go on for 4 more steps to the same bits (and back: ours into torch's)."""
    hyper = {"lr": 1e-2, "betas": (torch.tensor(0.9), torch.tensor(0.999))}
    for first, second in ((torch.optim.AdamW, _ours), (_ours, torch.optim.AdamW)):
        params = _params(torch.float64)
        opt = first(params, **hyper)
        for i in range(3):
            _set_grads(params, i)
            opt.step()
        copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
        other = second(copies, **hyper)
        other.load_state_dict(copy.deepcopy(opt.state_dict()))
        for i in range(3, 7):
            for ps, o in ((params, opt), (copies, other)):
                _set_grads(ps, i)
                o.step()
        _assert_bits([p.detach() for p in copies], [p.detach() for p in params])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_torchs_foreach_cpu_step_gives_the_same_bits(dtype: torch.dtype) -> None:
    """float32/float64 only: in bf16/fp16 torch's foreach ops round some products elsewhere
    than its own single-tensor step (adamw_reference.py)."""
    hyper = {"lr": 0.1, "weight_decay": 0.5, "betas": (0.8, 0.95)}
    ours = _train(_ours, dtype, 10, **hyper)
    _assert_bits(ours, _train(torch.optim.AdamW, dtype, 10, foreach=True, **hyper))


def _fused(groups: Any, **hyper: Any) -> torch.optim.AdamW:
    return torch.optim.AdamW(groups, fused=True, **hyper)


@pytest.mark.parametrize("tensor_betas", [False, True], ids=["float betas", "tensor betas"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_torchs_fused_cpu_kernel_is_within_the_stated_bound(
    dtype: torch.dtype, tensor_betas: bool
) -> None:
    """adamw_reference.py's bound: ours gives torch's default step's bits, and torch's fused
    CPU kernel stays within a few ulps (float betas) or ~1e-5 of lr a step (float32 tensor
    betas, whose bias corrections torch's default rounds in float32 and its fused kernel reads
    as float64). The bounds below hold that with a margin of ten."""
    lr, steps = 1e-2, 30
    betas: tuple = (0.9, 0.999)
    if tensor_betas:
        betas = (torch.tensor(0.9), torch.tensor(0.999))
    hyper = {"lr": lr, "weight_decay": 0.1, "betas": betas}
    ours = _train(_ours, dtype, steps, **hyper)
    _assert_bits(ours, _train(torch.optim.AdamW, dtype, steps, **hyper))
    fused = _train(_fused, dtype, steps, **hyper)
    per_step = 1e-4 if tensor_betas else 100 * torch.finfo(dtype).eps
    for a, b in zip(ours[:2], fused[:2], strict=True):
        assert float((a - b).abs().max()) <= per_step * lr * steps


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"fused": True, "foreach": True}, "`fused` and `foreach` cannot be `True` together."),
        ({"fused": True, "differentiable": True}, "`fused` does not support `differentiable`"),
    ],
    ids=["fused+foreach", "fused+differentiable"],
)
def test_the_flag_pairs_torch_refuses_raise_its_runtime_error(
    flags: dict[str, bool], message: str
) -> None:
    with pytest.raises(RuntimeError) as theirs:
        torch.optim.AdamW(_params(torch.float32), **flags)
    with pytest.raises(RuntimeError) as ours:
        ClippedAdamW(_params(torch.float32), **flags)
    assert str(ours.value) == str(theirs.value) == message


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensor_betas_on_the_reference_path_agree_with_torch_to_rounding() -> None:
    """float64 CUDA parameters run the pure-torch step with the step count on the device (no
    host read); torch's single-tensor CUDA step reads it. The two agree to float32 rounding of
    the bias corrections."""
    hyper = {"lr": 1e-2, "betas": (torch.tensor(0.9), torch.tensor(0.999))}
    got = []
    for make in (_ours, lambda ps, **h: torch.optim.AdamW(ps, foreach=False, **h)):
        params = [torch.nn.Parameter(p.detach().cuda()) for p in _params(torch.float64)]
        opt = make(params, **hyper)
        for i in range(6):
            _set_grads(params, i)
            opt.step()
        got.append([p.detach().cpu() for p in params])
    for a, b in zip(*got, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-4 * 1e-2 * 6)
