"""The accumulation rules of MISSION.md (document 002), pinned down on the tiny model."""

from __future__ import annotations

import pytest
import torch

from andrea_diag.config import MODEL_PRESETS
from andrea_diag.model import GPT
from andrea_diag.train.accumulation import (
    IGNORE,
    accumulate_group,
    iterate_groups,
    token_weighted_mean,
)
from andrea_diag.train.optim import build_scheduler, warmup_factor

V = MODEL_PRESETS["tiny"].vocab_size


def _model() -> GPT:
    torch.manual_seed(0)
    return GPT(MODEL_PRESETS["tiny"]).double()


def _padded_batch(lengths: list[int], T: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of unequal supervised length: targets past each length are IGNORE."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V, (len(lengths), T), generator=g)
    y = torch.randint(0, V, (len(lengths), T), generator=g)
    for i, n in enumerate(lengths):
        y[i, n:] = IGNORE
    return x, y


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def test_mission_example_token_weighted_mean_is_3_5_not_mean_of_means() -> None:
    loss = token_weighted_mean([512 * 2.0, 1536 * 4.0], [512, 1536])
    assert loss == pytest.approx(3.5)
    assert loss != pytest.approx((2.0 + 4.0) / 2)  # the mean of microbatch means is 3


def test_group_loss_equals_token_weighted_mean_of_microbatches() -> None:
    model = _model()
    mbs = [_padded_batch([16, 3], 16, 1), _padded_batch([9, 16, 1], 16, 2)]
    res = accumulate_group(model, mbs)
    assert res.tokens == 16 + 3 + 9 + 16 + 1
    # independent: torch's own mean over every supervised token of the concatenated group
    with torch.no_grad():
        logits = torch.cat([model(x) for x, _ in mbs])  # (5, T, V)
        y = torch.cat([y for _, y in mbs])
        expected = torch.nn.functional.cross_entropy(
            logits.reshape(-1, V), y.reshape(-1), ignore_index=IGNORE
        )
    assert float(res.loss) == pytest.approx(float(expected), rel=1e-12)
    # per-example means weighted by their tokens give the group loss back
    weighted = (res.example_loss * res.example_tokens).sum() / res.example_tokens.sum()
    assert float(weighted) == pytest.approx(float(res.loss), rel=1e-12)


def test_accumulated_gradient_equals_full_batch_gradient_with_unequal_lengths() -> None:
    T = 12
    lengths = [[12, 2], [5, 12, 7], [1]]  # microbatches of unequal size and padding
    mbs = [_padded_batch(lens, T, seed) for seed, lens in enumerate(lengths)]
    accum = _model()
    accumulate_group(accum, mbs)
    full = _model()
    x = torch.cat([m[0] for m in mbs])
    y = torch.cat([m[1] for m in mbs])
    accumulate_group(full, [(x, y)])
    for ga, gf in zip(_grads(accum), _grads(full), strict=True):
        torch.testing.assert_close(ga, gf, rtol=1e-9, atol=1e-12)


def test_mean_of_means_would_give_a_different_gradient() -> None:
    """Guards the test above: the naive objective really differs on these lengths."""
    T = 12
    mbs = [_padded_batch([12, 12], T, 0), _padded_batch([1], T, 1)]
    right = _model()
    accumulate_group(right, mbs)
    naive = _model()
    for x, y in mbs:
        logits = naive(x)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, V), y.reshape(-1), ignore_index=IGNORE
        ) / len(mbs)
        loss.backward()
    diff = max(
        float((a - b).abs().max()) for a, b in zip(_grads(right), _grads(naive), strict=True)
    )
    assert diff > 1e-4


def test_accumulate_group_never_zeroes_existing_grads() -> None:
    model = _model()
    mb = [_padded_batch([8], 8, 3)]
    accumulate_group(model, mb)
    once = _grads(model)
    accumulate_group(model, mb)  # no zero_grad in between: contributions add up
    for g1, g2 in zip(once, _grads(model), strict=True):
        torch.testing.assert_close(g2, 2 * g1)


def test_group_without_supervised_tokens_is_rejected() -> None:
    x, y = _padded_batch([0, 0], 8, 0)
    with pytest.raises(ValueError, match="no supervised tokens"):
        accumulate_group(_model(), [(x, y)])


def test_partial_last_group_policy_is_explicit() -> None:
    mbs = [_padded_batch([4], 4, i) for i in range(5)]
    kept = list(iterate_groups(mbs, accum=2, policy="use-real-denominator"))
    assert [len(g) for g, _ in kept] == [2, 2, 1]
    assert [p for _, p in kept] == [False, False, True]
    dropped = list(iterate_groups(mbs, accum=2, policy="drop"))
    assert [len(g) for g, _ in dropped] == [2, 2, 0]
    assert dropped[-1][1] is True
    with pytest.raises(ValueError):
        list(iterate_groups(mbs, accum=2, policy="mean"))


def test_scheduler_steps_per_update_with_linear_warmup() -> None:
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=1.0)
    sched = build_scheduler(opt, warmup_updates=4)
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])
    assert warmup_factor(10, 0) == 1.0
