"""Parity review (s28): a :class:`ClipResult` knows the norm it was taken in.

torch's ``clip_grad_norm_`` returns its total in the ``norm_type`` it was given; so do
``clip_grad_norm_with_stats``, ``ClippedAdamW`` and ``clip_adamw_``, but their ClipResult did
not say which p that was. ``SpikeMonitor.after_clip`` records L2 norms and takes ``norm_type``
for a bare total; given a ClipResult it checked ``norm_type``'s value only, and recorded an
inf-norm ClipResult's total as the L2 ``grad_norm``. The decision (``clip.from_total.clip_in_l2``,
what ``after_clip`` is to call for a ClipResult): a ClipResult whose p differs from the
``norm_type`` given is refused, and a non-L2 one that matches is recorded in L2 norms, read from
the clipped gradients over the clip's own scale.

    pytest tests/test_parity_s28_clip.py -q -p no:cacheprovider
"""

from __future__ import annotations

import math

import pytest
import torch

from andrea_diag.clip.api import ClipResult, clip_grad_norm_with_stats
from andrea_diag.clip.from_total import clip_in_l2
from andrea_diag.clip.fused_adamw import ClippedAdamW, clip_adamw_

P = [1.0, 3.0, math.inf]


def _params() -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(s)) for s in ((5, 4), (7,), (3,))]
    for i, p in enumerate(params):
        p.grad = torch.randn(p.shape, generator=gen) * 10.0**i
    return params


def _l2(grads: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    per = torch.stack([g.double().norm() for g in grads])
    return per.norm(), per


@pytest.mark.parametrize("p", [2.0, *P])
def test_every_clip_result_records_the_norm_type_it_was_computed_with(p: float) -> None:
    assert clip_grad_norm_with_stats(_params(), 1.0, norm_type=p).norm_type == p
    assert clip_grad_norm_with_stats([], 1.0, norm_type=p).norm_type == p  # no gradient
    params = _params()
    opt = ClippedAdamW(params, max_norm=1.0, norm_type=p)
    opt.step()
    assert opt.last_clip is not None and opt.last_clip.norm_type == p
    grads = [q.grad for q in params]
    state = [torch.zeros_like(q) for q in params]
    steps = [torch.zeros(()) for _ in params]
    clip = clip_adamw_([q.detach() for q in params], grads, state, [s.clone() for s in state],
                       steps, max_norm=1.0, norm_type=p)  # fmt: skip
    assert clip.norm_type == p


@pytest.mark.parametrize(("computed", "given"), [(math.inf, 2.0), (2.0, math.inf), (1.0, 3.0)])
def test_a_clip_result_of_another_norm_type_than_the_one_given_is_refused(
    computed: float, given: float
) -> None:
    params = _params()
    res = clip_grad_norm_with_stats(params, 1.0, norm_type=computed)
    with pytest.raises(ValueError, match=r"computed with norm_type=.* but norm_type=.* was given"):
        clip_in_l2(res, [q.grad for q in params], given)


@pytest.mark.parametrize("mode", ["global", "per-tensor", "none"])
@pytest.mark.parametrize("p", P)
def test_a_non_l2_clip_result_is_recorded_in_the_l2_norms_of_the_gradients(
    p: float, mode: str
) -> None:
    params = _params()
    total, per = _l2([q.grad for q in params])  # before the clip
    res = clip_grad_norm_with_stats(params, 1.0, norm_type=p, mode=mode)
    assert mode == "none" or float(res.scale.min()) < 1.0  # the clip really clipped
    got = clip_in_l2(res, [q.grad for q in params], p)
    assert got.norm_type == 2.0 and got.scale is res.scale and got.nonfinite is res.nonfinite
    torch.testing.assert_close(got.per_tensor_norm.double(), per, rtol=1e-5, atol=0)
    torch.testing.assert_close(got.total_norm.double(), total, rtol=1e-5, atol=0)
    post_total, _ = _l2([q.grad for q in params])  # what the optimizer receives
    torch.testing.assert_close(got.post_norm.double(), post_total, rtol=1e-5, atol=0)


def test_an_l2_clip_result_is_recorded_as_it_is() -> None:
    params = _params()
    res = clip_grad_norm_with_stats(params, 1.0)
    assert clip_in_l2(res, [q.grad for q in params]) is res


def test_a_non_l2_clip_that_zeroed_the_gradients_keeps_its_own_total() -> None:
    """max_norm 0 cannot be undone: the clip's p-norm stands in, as for a bare total."""
    params = _params()
    res = clip_grad_norm_with_stats(params, 0.0, norm_type=math.inf)
    got = clip_in_l2(res, [q.grad for q in params], math.inf)
    assert float(got.total_norm) == float(res.total_norm) > 0
    assert float(got.post_norm) == 0.0


def test_per_tensor_scales_of_another_list_are_refused() -> None:
    params = _params()
    res = clip_grad_norm_with_stats(params, 1.0, norm_type=3.0, mode="per-tensor")
    with pytest.raises(ValueError, match="3 per-tensor scales for 2 gradients"):
        clip_in_l2(res, [q.grad for q in params[:2]], 3.0)


def test_a_clip_result_built_by_hand_is_an_l2_one() -> None:
    """Positional construction (tests, the adaptive modes) keeps working: p defaults to 2."""
    res = ClipResult(torch.tensor(5.0), torch.tensor([5.0]), torch.tensor(1.0),
                     torch.tensor(False), "user")  # fmt: skip
    assert res.norm_type == 2.0


def _monitored(tmp_path):
    from andrea_diag.monitor import SpikeMonitor

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mon = SpikeMonitor(model, opt, tmp_path / "run")
    loss = model(torch.randint(0, 10, (4, 5))).logsumexp(-1).mean()
    loss.backward()
    mon.after_backward(loss)
    return mon, model


def test_the_monitor_refuses_a_clip_result_of_another_norm_than_it_was_told(tmp_path) -> None:
    mon, model = _monitored(tmp_path)
    res = clip_grad_norm_with_stats(list(model.parameters()), 0.1, norm_type=math.inf)
    with pytest.raises(ValueError, match="computed with norm_type=inf"):
        mon.after_clip(res, norm_type=2.0)  # told, explicitly, another p than the clip's own
    assert mon.update == 0  # nothing recorded for the refused call


def test_the_monitor_records_a_non_l2_clip_result_as_the_gradients_l2_norm(tmp_path) -> None:
    from andrea_diag.record import load_run

    mon, model = _monitored(tmp_path)
    pre = float(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).norm())
    res = clip_grad_norm_with_stats(list(model.parameters()), 0.1, norm_type=math.inf)
    assert float(res.total_norm) < pre / 1.5  # the inf-norm, far below the L2 one here
    mon.after_clip(res, norm_type=math.inf)
    mon.after_step()
    mon.close()
    metrics = load_run(tmp_path / "run")["metrics"]
    assert metrics["grad_norm"].iloc[0] == pytest.approx(pre, rel=1e-5)


def test_the_monitor_takes_a_clip_results_own_norm_type_when_told_none(tmp_path) -> None:
    from andrea_diag.record import load_run

    mon, model = _monitored(tmp_path)
    pre = float(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).norm())
    mon.after_clip(clip_grad_norm_with_stats(list(model.parameters()), 0.1, norm_type=math.inf))
    mon.after_step()
    mon.close()
    assert load_run(tmp_path / "run")["metrics"]["grad_norm"].iloc[0] == pytest.approx(pre, 1e-5)
