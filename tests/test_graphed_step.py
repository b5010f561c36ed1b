"""``--cuda-graph``: the optimizer step captured and replayed (train/graphed_step.py).

On the CPU there are no graphs: these tests pin which optimizers and precisions are graphed at
all, and the runner's bookkeeping (warm-up, the key a replay needs, a new capture when the lr
settles, nothing replayed for a skipped update) with a stand-in graph whose replay runs the
eager step, as a CUDA graph's replay runs the recorded kernel. The CUDA test compares replays
with the eager fused step bit for bit.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from graph_stand_ins import StandInStepGraph

from andrea_diag.errors import UserError
from andrea_diag.train import graphed_step
from andrea_diag.train.components import make_precision
from andrea_diag.train.graphed import WARMUP_UPDATES
from andrea_diag.train.graphed_step import StepRunner, graphable_optimizer


def _params(device: str = "cpu", seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in [(4, 3), (3,)]]


def _adam(params: list[torch.nn.Parameter], cls: type = torch.optim.Adam, **kw: Any) -> Any:
    return cls(params, lr=1e-2, fused=True, **kw)


def _grads(params: list[torch.nn.Parameter], i: int) -> None:
    """Fresh gradients written into the same tensors (as the graphed group does)."""
    g = torch.Generator().manual_seed(100 + i)
    for p in params:
        fresh = torch.randn(p.shape, generator=g).to(p.device)
        if p.grad is None:
            p.grad = fresh
        else:
            p.grad.copy_(fresh)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> list[StandInStepGraph]:
    made: list[StandInStepGraph] = []

    def capture(optimizer: torch.optim.Optimizer) -> StandInStepGraph:
        made.append(StandInStepGraph(optimizer))
        return made[-1]

    monkeypatch.setattr(graphed_step, "graph_step", capture)
    return made


def test_only_torchs_fused_adam_stepped_by_its_own_precision_is_graphed() -> None:
    cpu = torch.device("cpu")
    ps = _params()
    assert graphable_optimizer(_adam(ps), make_precision("fp32", cpu))
    assert graphable_optimizer(_adam(ps, torch.optim.AdamW), make_precision("bf16", cpu))
    assert not graphable_optimizer(torch.optim.Adam(ps, lr=1e-2), make_precision("fp32", cpu))
    assert not graphable_optimizer(torch.optim.SGD(ps, lr=1e-2), make_precision("fp32", cpu))
    fp16 = make_precision("fp16", cpu)  # its scaler steps on a host found-inf flag
    assert not graphable_optimizer(_adam(ps), fp16)
    runner = StepRunner(_adam(ps), fp16, ps, graphed=True)
    assert not runner.graphed and runner.describe() == {}


def test_an_ungraphed_runner_is_the_precisions_step_bit_for_bit() -> None:
    cpu = torch.device("cpu")
    ps, twin = _params(), _params()
    runner = StepRunner(_adam(ps), make_precision("fp32", cpu), ps, graphed=False)
    ref_opt, ref = _adam(twin), make_precision("fp32", cpu)
    for i in range(6):
        _grads(ps, i)
        _grads(twin, i)
        runner.step(i != 2)  # update 3 skipped: no step
        ref.step(ref_opt, i != 2)
    assert all(torch.equal(p, q) for p, q in zip(ps, twin, strict=True))
    assert runner.counts == {"eager": 0, "replayed": 0, "captured": 0}


def test_the_step_is_captured_after_warmup_and_a_skipped_update_replays_nothing(
    stand_in: list[StandInStepGraph],
) -> None:
    cpu = torch.device("cpu")
    ps, twin = _params(), _params()
    runner = StepRunner(_adam(ps), make_precision("fp32", cpu), ps, graphed=True)
    ref = _adam(twin)
    n = WARMUP_UPDATES + 5
    for i in range(n):
        _grads(ps, i)
        _grads(twin, i)
        applied = i != WARMUP_UPDATES + 2
        runner.step(applied)
        if applied:
            ref.step()
        assert all(torch.equal(p, q) for p, q in zip(ps, twin, strict=True)), i
    assert len(stand_in) == 1  # captured once, at the first step past the warm-up
    assert runner.counts == {"eager": WARMUP_UPDATES, "replayed": n - WARMUP_UPDATES - 1,
                             "captured": 1}  # fmt: skip
    assert stand_in[0].replays == n - WARMUP_UPDATES - 1
    assert runner.describe() == {"steps_eager": 3, "steps_replayed": 4, "steps_captured": 1}


def test_a_changing_lr_steps_eagerly_and_a_settled_one_is_captured_again(
    stand_in: list[StandInStepGraph],
) -> None:
    cpu = torch.device("cpu")
    ps = _params()
    opt = _adam(ps)
    runner = StepRunner(opt, make_precision("fp32", cpu), ps, graphed=True)
    warm = 6  # a linear warm-up: a new lr each step, so no step is captured until it ends
    for i in range(warm):
        opt.param_groups[0]["lr"] = 1e-2 * (i + 1) / warm
        _grads(ps, i)
        runner.step(True)
    assert runner.counts["captured"] == 0 and runner.counts["eager"] == warm
    _grads(ps, warm)
    runner.step(True)  # the lr held for two steps: captured
    assert runner.counts["captured"] == 1 and runner.key is not None
    opt.param_groups[0]["lr"] = 5e-3
    for i in range(3):
        _grads(ps, warm + 1 + i)
        runner.step(True)
    assert runner.counts == {"eager": warm + 1, "replayed": 3, "captured": 2}
    assert runner.key is not None and runner.key.extra[0][0][0] == 5e-3  # the new graph's lr


def _captured_runner() -> tuple[list[torch.nn.Parameter], Any, StepRunner]:
    """Parameters, their fused Adam and a graphed runner whose step is captured (stand-ins)."""
    ps = _params()
    opt = _adam(ps)
    runner = StepRunner(opt, make_precision("fp32", torch.device("cpu")), ps, graphed=True)
    for i in range(WARMUP_UPDATES + 2):
        _grads(ps, i)
        runner.step(True)
    assert runner.counts["captured"] == 1
    return ps, opt, runner


def test_gradients_moved_to_new_tensors_step_eagerly_until_they_hold(
    stand_in: list[StandInStepGraph],
) -> None:
    ps, _, runner = _captured_runner()
    for p in ps:  # the group's own capture moves the grads into its graph's pool
        p.grad = p.grad.clone()
    runner.step(True)
    assert runner.counts["eager"] == WARMUP_UPDATES + 1 and len(stand_in) == 1
    runner.step(True)
    assert runner.counts["captured"] == 2 and len(stand_in) == 2


def test_a_loaded_optimizer_state_steps_eagerly_then_is_captured_again(
    stand_in: list[StandInStepGraph],
) -> None:
    ps, opt, runner = _captured_runner()
    opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # a resume: the values, new tensors
    for i in range(2):
        _grads(ps, 10 + i)
        runner.step(True)  # the stand-in's replay would fail on the old tensors
    assert runner.counts == {"eager": WARMUP_UPDATES + 1, "replayed": 3, "captured": 2}


def test_a_device_skipped_step_is_the_skip_and_an_unskipped_one_the_plain_step(
    stand_in: list[StandInStepGraph],
) -> None:
    ps, opt, runner = _captured_runner()
    twin = _params()
    twin_opt = _adam(twin)
    twin_opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # the same state, its own tensors
    for p, q in zip(ps, twin, strict=True):
        q.data.copy_(p.data)
    skip = [0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    for i, flag in enumerate(skip):
        _grads(ps, 20 + i)
        _grads(twin, 20 + i)
        runner.step_unless(torch.tensor(flag))
        if not flag:  # the reference: the host's decision, one plain fused step
            twin_opt.step()
        assert all(torch.equal(p, q) for p, q in zip(ps, twin, strict=True)), i
        steps = [opt.state[p]["step"] for p in ps] + [twin_opt.state[q]["step"] for q in twin]
        assert len({float(s) for s in steps}) == 1, i  # a skip puts the step count back
    assert not hasattr(opt, "found_inf")  # only during the step: an eager step reads none
    # the device-skipping step is a graph of its own: captured again once its key held
    assert runner.counts["captured"] == 2 and runner.counts["replayed"] > 1


def test_a_flagged_runner_skipping_before_the_first_step_makes_no_state(
    stand_in: list[StandInStepGraph],
) -> None:
    ps = _params()
    opt = _adam(ps)
    runner = StepRunner(opt, make_precision("fp32", torch.device("cpu")), ps, graphed=True)
    runner.device_skip = True  # a pipeline follows: the host's decisions go through the flag
    _grads(ps, 0)
    runner.step(False)
    assert not opt.state  # as the eager path: nothing stepped, no moments made
    runner.step(False)
    runner.step(True)
    assert [float(opt.state[p]["step"]) for p in ps] == [1.0, 1.0]
    runner.step(False)  # now the device skips it: the count is put back
    assert [float(opt.state[p]["step"]) for p in ps] == [1.0, 1.0]


def test_a_step_that_cannot_be_captured_is_one_user_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(optimizer: torch.optim.Optimizer) -> Any:
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    monkeypatch.setattr(graphed_step, "graph_step", refuse)
    ps = _params()
    runner = StepRunner(_adam(ps), make_precision("fp32", torch.device("cpu")), ps, graphed=True)
    _grads(ps, 0)
    for _ in range(WARMUP_UPDATES):
        runner.step(True)
    with pytest.raises(UserError, match=r"step cannot be captured as a CUDA graph \(operation"):
        runner.step(True)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW])
def test_a_replayed_step_is_the_eager_fused_step_bit_for_bit(cls: type) -> None:
    cuda = torch.device("cuda")
    ps, twin = _params("cuda"), _params("cuda")
    opt = _adam(ps, cls, weight_decay=0.1)
    runner = StepRunner(opt, make_precision("fp32", cuda), ps, graphed=True)
    ref = _adam(twin, cls, weight_decay=0.1)
    for i in range(WARMUP_UPDATES + 9):
        if i == WARMUP_UPDATES + 4:  # a new lr: eager once, then captured again
            for o in (opt, ref):
                o.param_groups[0]["lr"] = 3e-3
        _grads(ps, i)
        _grads(twin, i)
        runner.step(True)
        ref.step()
    torch.cuda.synchronize()
    assert runner.counts["replayed"] == 8 and runner.counts["captured"] == 2
    assert all(torch.equal(p, q) for p, q in zip(ps, twin, strict=True))
    assert all(not g["capturable"] for g in opt.param_groups)  # the flag put back
    assert torch.equal(opt.state[ps[0]]["step"], ref.state[twin[0]]["step"])
