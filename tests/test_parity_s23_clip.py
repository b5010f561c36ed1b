"""Parity review (s23): ``andrea_diag.clip_grad_norm_`` against ``torch.nn.utils.clip_grad_norm_``
in torch 2.13, on classes of input the s21 review and tests/test_clip_torch_contract.py do not
pin: gradients on the ``meta`` device, sparse gradients, ``max_norm`` forms that torch's
``float()`` reads, and ``error_if_nonfinite`` when only the gradients' own dtype overflows.

    pytest tests/test_parity_s23_clip.py -q
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from andrea_diag import clip_grad_norm_, clip_grad_norm_with_stats


def _params(values: list[list[float]], dtype: torch.dtype = torch.float32) -> list[Any]:
    out = []
    for vals in values:
        p = torch.nn.Parameter(torch.zeros(len(vals), dtype=dtype))
        p.grad = torch.tensor(vals, dtype=dtype)
        out.append(p)
    return out


def _meta(dtypes: tuple[torch.dtype, ...]) -> list[Any]:
    out = []
    for dt in dtypes:
        p = torch.nn.Parameter(torch.zeros(2, 3, device="meta", dtype=dt))
        p.grad = torch.zeros(2, 3, device="meta", dtype=dt)
        out.append(p)
    return out


@pytest.mark.parametrize("norm_type", [2.0, 1, "inf", 0.5])
@pytest.mark.parametrize(
    "dtypes",
    [(torch.float32,), (torch.bfloat16,), (torch.float16, torch.float32), (torch.float64,)],
    ids=["fp32", "bf16", "fp16+fp32", "fp64"],
)
def test_meta_gradients_are_clipped_like_torch(norm_type: Any, dtypes: tuple) -> None:
    """torch clips meta tensors (shape tracing, fake tensors); ours crashed in the final stage
    with "cannot repeat_interleave a meta tensor without output_size"."""
    seen = []
    for clip in (torch.nn.utils.clip_grad_norm_, clip_grad_norm_):
        params = _meta(dtypes)
        total = clip(params, 1.0, norm_type)
        seen.append((total.dtype, total.device, total.shape, [p.grad.shape for p in params]))
    assert seen[0] == seen[1]
    result = clip_grad_norm_with_stats(_meta(dtypes), 1.0, norm_type)
    assert result.total_norm.device.type == "meta" and result.per_tensor_norm.shape == (
        len(dtypes),
    )


def _sparse_params() -> list[Any]:
    dense, sparse = _params([[3.0, 4.0], [1.0, 0.0, 2.0]])
    sparse.grad = sparse.grad.to_sparse()
    return [dense, sparse]


SPARSE_CALLS: dict[str, Callable[[list[Any]], Any]] = {
    "l2": lambda ps: clip_grad_norm_(ps, 1.0),
    "inf": lambda ps: clip_grad_norm_(ps, 1.0, math.inf),
    "norm_type 0 (torch's path)": lambda ps: clip_grad_norm_(ps, 1.0, 0.0),
    "a generator": lambda ps: clip_grad_norm_((p for p in ps), 1.0),
    "stats": lambda ps: clip_grad_norm_with_stats(ps, 1.0),
}


@pytest.mark.parametrize("call", list(SPARSE_CALLS))
def test_a_sparse_gradient_is_refused_with_one_clear_error_naming_it(call: str) -> None:
    """torch refuses sparse gradients (NotImplementedError from ``linalg_vector_norm``); ours
    failed deep inside the chunked stages with "reshape is not implemented for sparse tensors".
    Now: one error that names them, a TypeError and, like torch's, a NotImplementedError."""
    params = _sparse_params()
    with pytest.raises(NotImplementedError):
        torch.nn.utils.clip_grad_norm_(_sparse_params(), 1.0)
    with pytest.raises(TypeError, match="does not support sparse gradients") as info:
        SPARSE_CALLS[call](params)
    assert isinstance(info.value, NotImplementedError)
    assert params[0].grad.tolist() == [3.0, 4.0]  # nothing was clipped before the refusal


@pytest.mark.parametrize(
    "max_norm",
    [np.array(1.0), np.array(2, dtype=np.int64), np.array(0.5, dtype=np.float32), np.array(0.0)],
    ids=["0-dim float64", "0-dim int64", "0-dim float32", "0-dim zero"],
)
def test_a_0dim_numpy_max_norm_clips_as_torch_does(max_norm: np.ndarray) -> None:
    """torch reads ``max_norm`` with ``float()``; ours refused np.array(1.0) with "max_norm must
    be a real number, got ndarray" (a config or sweep table read through numpy holds those)."""
    ours, theirs = _params([[3.0, 4.0], [1.0, 2.0, 2.0]]), _params([[3.0, 4.0], [1.0, 2.0, 2.0]])
    a = clip_grad_norm_(ours, max_norm)
    b = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    # Equal to float32 rounding, not bit for bit: torch takes the norm of per-tensor norms, ours
    # sums squares chunk by chunk, and the two round differently in the last bit.
    torch.testing.assert_close(a, b)
    for x, y in zip(ours, theirs, strict=True):
        torch.testing.assert_close(x.grad, y.grad)


def test_a_decimal_max_norm_clips_as_torch_does() -> None:
    ours, theirs = _params([[3.0, 4.0]]), _params([[3.0, 4.0]])
    clip_grad_norm_(ours, decimal.Decimal("1.0"))
    torch.nn.utils.clip_grad_norm_(theirs, decimal.Decimal("1.0"))
    assert torch.equal(ours[0].grad, theirs[0].grad)


@pytest.mark.parametrize(
    ("max_norm", "error", "message"),
    [
        (np.array(math.nan), ValueError, "got NaN"),
        (np.array(-1.0), ValueError, "max_norm must be 0 or more"),
        (decimal.Decimal("NaN"), ValueError, "got NaN"),
        (decimal.Decimal("-1"), ValueError, "max_norm must be 0 or more"),
    ],
)
def test_a_numpy_or_decimal_max_norm_is_checked_by_value_as_a_float_is(
    max_norm: Any, error: type[Exception], message: str
) -> None:
    """Read as torch reads them, then held to the drop-in's rule: a NaN or negative bound is the
    ValueError a float gets (ours said "got ndarray", as if the type were the problem)."""
    params = _params([[3.0, 4.0]])
    with pytest.raises(error, match=message):
        clip_grad_norm_(params, max_norm)
    assert params[0].grad.tolist() == [3.0, 4.0]


def test_only_a_0dim_real_numpy_max_norm_is_read() -> None:
    """np.array(1.0) clips (ours refused it); a 1-dim array (torch's ``float()`` refuses it
    too), a bool, a complex and a string array stay a TypeError naming ``max_norm``."""
    params = _params([[3.0, 4.0]])
    assert float(clip_grad_norm_(params, np.array(1.0))) == 5.0
    for bad in (np.array([1.0]), np.array(True), np.array(1 + 0j), np.array("1")):
        with pytest.raises(TypeError, match="max_norm must be a real number, got ndarray"):
            clip_grad_norm_(params, bad)


OVERFLOW = {  # fp16 gradients whose norm is finite in float32 but past fp16's 65504
    "one tensor": [[60000.0, 60000.0]],
    "two tensors": [[48000.0], [48000.0]],
}


@pytest.mark.parametrize("case", list(OVERFLOW))
@pytest.mark.parametrize("norm_type", [2.0, 1.0])
def test_error_if_nonfinite_raises_when_the_fp16_norm_overflows_as_torch(
    case: str, norm_type: float
) -> None:
    """torch's fp16 norm is inf and it raises; ours returned that inf (cast from its finite
    float32 total) without raising, and clipped the gradients."""
    with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
        torch.nn.utils.clip_grad_norm_(
            _params(OVERFLOW[case], torch.float16), 1.0, norm_type, error_if_nonfinite=True
        )
    for clip in (clip_grad_norm_, clip_grad_norm_with_stats):
        params = _params(OVERFLOW[case], torch.float16)
        with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
            clip(params, 1.0, norm_type, error_if_nonfinite=True)
        assert [p.grad.tolist() for p in params] == OVERFLOW[case]  # raised before clipping


def _two_devices(meta_first: bool) -> list[Any]:
    cpu = _params([[3.0, 4.0]])[0]
    meta = _meta((torch.float32,))[0]
    return [meta, cpu] if meta_first else [cpu, meta]


def _error(call: Callable[[], Any]) -> tuple[type, str]:
    with pytest.raises(Exception) as info:  # any type: the caller compares it with torch's
        call()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("meta_first", [False, True], ids=["cpu-first", "meta-first"])
def test_gradients_on_several_devices_go_through_torchs_own_grouping(meta_first: bool) -> None:
    """torch groups gradients by device (CPU-offloaded beside CUDA parameters clip there); ours
    failed in the chunked stages' torch.cat ("Tensor on device meta is not on the expected
    device cpu!"). The drop-in now hands them to torch's function, so it does what torch does
    (here, with a meta gradient, torch's own error); the stats variant names the devices."""
    theirs = _error(lambda: torch.nn.utils.clip_grad_norm_(_two_devices(meta_first), 1.0))
    assert _error(lambda: clip_grad_norm_(_two_devices(meta_first), 1.0)) == theirs
    params = _two_devices(meta_first)
    with pytest.raises(ValueError, match="must be on one device, got cpu, meta"):
        clip_grad_norm_with_stats(params, 1.0)
    assert params[1 if meta_first else 0].grad.tolist() == [3.0, 4.0]
