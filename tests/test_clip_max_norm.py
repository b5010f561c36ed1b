"""``max_norm`` is checked once (``clip.api.check_max_norm``) by the drop-in
``clip_grad_norm_`` and the stats variant: NaN and a negative bound (which torch applies,
poisoning or sign-flipping every gradient) are a ValueError, a bool or a string a TypeError,
raised before any gradient changes; 0 and inf keep torch's meaning."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from andrea_diag import clip_grad_norm_, clip_grad_norm_with_stats
from andrea_diag.clip.api import check_max_norm


def _params() -> list[torch.nn.Parameter]:
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.tensor([3.0, 4.0, 0.0])
    return [p]


BAD = [
    (-1.0, ValueError, "max_norm must be 0 or more"),
    (-math.inf, ValueError, "max_norm must be 0 or more"),
    (math.nan, ValueError, "max_norm must be a number, got NaN"),
    (torch.tensor(math.nan), ValueError, "got NaN"),
    ("1", TypeError, "max_norm must be a real number, got str '1'"),
    (True, TypeError, "max_norm must be a real number, got bool"),
    (None, TypeError, "max_norm must be a real number, got NoneType"),
    (1 + 0j, TypeError, "got complex"),
    (torch.tensor([1.0, 2.0]), TypeError, "got Tensor"),
    (torch.tensor(True), TypeError, "got Tensor"),
]


@pytest.mark.parametrize(("max_norm", "error", "message"), BAD)
@pytest.mark.parametrize(
    ("clip", "norm_type"),
    [(clip_grad_norm_, 2.0), (clip_grad_norm_, 0.0), (clip_grad_norm_with_stats, 2.0)],
    ids=["drop-in", "drop-in-via-torch", "stats"],  # norm_type 0: the drop-in runs torch's own
)
def test_a_bad_max_norm_is_refused_before_any_gradient_changes(
    clip: Any, norm_type: float, max_norm: Any, error: type[Exception], message: str
) -> None:
    params = _params()
    with pytest.raises(error, match=message):
        clip(params, max_norm, norm_type)
    assert params[0].grad.tolist() == [3.0, 4.0, 0.0]


@pytest.mark.parametrize(
    ("max_norm", "grad"),
    [
        (1.0, [0.6, 0.8, 0.0]),
        (1, [0.6, 0.8, 0.0]),
        (np.float32(1.0), [0.6, 0.8, 0.0]),
        (torch.tensor(1.0), [0.6, 0.8, 0.0]),
        (0.0, [0.0, 0.0, 0.0]),  # torch's meaning: every gradient zeroed
        (math.inf, [3.0, 4.0, 0.0]),  # never clips
    ],
)
def test_a_real_max_norm_clips_as_torch_does(max_norm: Any, grad: list[float]) -> None:
    ours, theirs = _params(), _params()
    total = clip_grad_norm_(ours, max_norm)
    torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert float(total) == 5.0
    assert ours[0].grad.tolist() == pytest.approx(grad, abs=1e-6)
    assert torch.allclose(ours[0].grad, theirs[0].grad, atol=1e-6)


def test_the_optimizers_check_refuses_zero_as_well() -> None:
    assert check_max_norm(0.0) == 0.0
    with pytest.raises(ValueError, match=r"max_norm must be > 0 \(inf: never clip\), got 0.0"):
        check_max_norm(0.0, allow_zero=False)
    assert check_max_norm(math.inf, allow_zero=False) == math.inf


ADAMW_BAD = [(m, e, msg.replace("0 or more", "> 0")) for m, e, msg in BAD]


@pytest.mark.parametrize(("max_norm", "error", "message"), [*ADAMW_BAD, (0.0, ValueError, "> 0")])
def test_clipped_adamw_refuses_a_bad_max_norm_by_the_drop_ins_rule(
    max_norm: Any, error: type[Exception], message: str
) -> None:
    """ClippedAdamW took ``True`` as 1.0 with its own check; it now shares check_max_norm (0 is
    refused there too: an optimizer whose every update is zero trains nothing)."""
    from andrea_diag.clip.fused_adamw import ClippedAdamW

    with pytest.raises(error, match=message):
        ClippedAdamW(_params(), max_norm=max_norm)


@pytest.mark.parametrize(("max_norm", "error", "message"), BAD)
def test_the_sharded_clip_refuses_a_bad_max_norm_before_any_gradient_changes(
    max_norm: Any, error: type[Exception], message: str
) -> None:
    """A negative bound would flip every shard's sign, as torch's clip does."""
    from andrea_diag.clip.sharded import clip_grad_norm_sharded_

    params = _params()
    with pytest.raises(error, match=message):
        clip_grad_norm_sharded_(params, max_norm)
    assert torch.equal(params[0].grad, torch.tensor([3.0, 4.0, 0.0]))
