"""``--cuda-graph``: the accumulation group captured once and replayed (train/graphed.py).

On the CPU there are no graphs: these tests pin the refusal (one line, before any folder), the
eager path (``graphed=False`` is the trainer's group of before, bit for bit), and the runner's
bookkeeping (warm-up, capture, replay, the eager fallback into the graph's gradient tensors)
with a stand-in graph whose replay re-runs the captured step into the captured tensors, as a
CUDA graph's replay does. The CUDA tests compare a graphed engine with an eager one.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from andrea_diag.bench.train import _engine
from andrea_diag.config import ProbeConfig, RunConfig
from andrea_diag.errors import UserError
from andrea_diag.model import GPT
from andrea_diag.train import graphed
from andrea_diag.train.components import Precision, Reducer, accumulate_with
from andrea_diag.train.graphed import WARMUP_UPDATES, GroupRunner, check_graphable
from andrea_diag.train.rows import overflow_last

COLUMNS = ("loss", "grad_norm", "grad_norm_post", "m_norm", "v_norm", "update_rms")


class StandInGraph:
    """Replays the captured step into the captured tensors: grads zeroed in place and
    accumulated where they are, outputs copied into the ones the capture returned."""

    def __init__(self, step: Any, tokens: torch.Tensor, params: list[torch.nn.Parameter]) -> None:
        self.step, self.tokens, self.params, self.replays = step, tokens, params, 0
        self.out = step(tokens)  # a real capture records without running; this runs once
        self.grads = [p.grad for p in params]

    def replay(self) -> None:
        self.replays += 1
        torch._foreach_zero_([g for g in self.grads if g is not None])
        fresh = self.step(self.tokens)
        for p, g in zip(self.params, self.grads, strict=True):
            if g is not None and p.grad is not g:
                g.copy_(p.grad)
                p.grad = g
        self.out.loss.copy_(fresh.loss)
        self.out.example_loss.copy_(fresh.example_loss)


def _tiny() -> tuple[torch.nn.Module, list[torch.nn.Parameter], torch.Tensor]:
    cfg = RunConfig(size="tiny").resolve()
    torch.manual_seed(0)
    model = GPT(cfg.model)
    tokens = torch.randint(0, cfg.model.vocab_size, (2, 3, 17))  # (A, m, T+1)
    return model, list(model.parameters()), tokens


def _runner(model: torch.nn.Module, params: list, graphed_: bool) -> GroupRunner:
    def zero() -> None:
        for p in params:
            p.grad = None

    cpu = torch.device("cpu")
    return GroupRunner(model, Precision(), Reducer(), cpu, zero, params, graphed=graphed_)


def test_cuda_graph_is_refused_off_cuda_and_with_replicas_in_one_line() -> None:
    with pytest.raises(UserError, match="--cuda-graph needs a CUDA device"):
        check_graphable(torch.device("cpu"), 1)
    with pytest.raises(UserError, match="one process; this run has D = 2"):
        check_graphable(torch.device("cuda"), 2)


def test_cuda_graph_on_cpu_fails_before_any_folder_exists(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from andrea_diag.cli import app

    for cmd in ("cascade", "sweep"):
        out = tmp_path / cmd
        args = [cmd, "--cuda-graph", "--steps", "3", "--device", "cpu", "--out", str(out)]
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, res.output
        assert "--cuda-graph needs a CUDA device" in res.output
        assert "Traceback" not in res.output
        assert not out.exists()


def test_the_eager_runner_is_the_trainers_group_bit_for_bit() -> None:
    model, params, tokens = _tiny()
    want = accumulate_with(
        model, graphed.split_microbatches(tokens), Precision(), Reducer(), torch.device("cpu"),
        local_tokens=tokens[:, :, 1:].numel(),
    )  # fmt: skip
    want_grads = [p.grad.clone() for p in params]
    got = _runner(model, params, False).run(tokens, tokens[:, :, 1:].numel())
    assert torch.equal(got.loss, want.loss)
    assert torch.equal(got.example_loss, want.example_loss)
    assert all(torch.equal(p.grad, g) for p, g in zip(params, want_grads, strict=True))


def test_runner_captures_after_warmup_replays_and_falls_back_into_the_graphs_grads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, params, tokens = _tiny()
    twin, twin_params, _ = _tiny()  # the same weights (no step here), its own gradients
    holder: dict[str, StandInGraph] = {}

    def capture(step: Any, static: torch.Tensor) -> tuple[StandInGraph, Any]:
        holder["g"] = StandInGraph(step, static, params)
        return holder["g"], holder["g"].out

    monkeypatch.setattr(graphed, "graph_forward_backward", capture)
    runner, eager = _runner(model, params, True), _runner(twin, twin_params, False)
    n = tokens[:, :, 1:].numel()
    batches = [tokens.roll(k, dims=2) for k in range(WARMUP_UPDATES + 4)]
    hook_at = WARMUP_UPDATES + 2  # the non-finite injection: the graph cannot run it
    for i, batch in enumerate(batches):
        hook = overflow_last(batch.size(0)) if i == hook_at else None
        want = eager.run(batch, n, hook)
        want_grads = [p.grad for p in twin_params]
        got = runner.run(batch, n, hook)
        assert torch.equal(got.loss, want.loss) or (i == hook_at and math.isinf(got.loss))
        assert all(  # bit for bit, NaN where NaN (the injected update's grads)
            torch.allclose(p.grad, g, rtol=0, atol=0, equal_nan=True)
            for p, g in zip(params, want_grads, strict=True)
        ), i
        if i >= WARMUP_UPDATES:  # from the capture on, the graph's tensors are the grads
            assert all(p.grad is g for p, g in zip(params, holder["g"].grads, strict=True))
    assert runner.counts == {"eager": WARMUP_UPDATES + 1, "replayed": len(batches) - 4}
    assert holder["g"].replays == len(batches) - 4
    assert runner.describe() == {"cuda_graph": True, "groups_eager": 4, "groups_replayed": 3}
    assert eager.describe() == {}


def test_outputs_are_copies_the_next_replay_does_not_overwrite(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, params, tokens = _tiny()
    monkeypatch.setattr(
        graphed,
        "graph_forward_backward",
        lambda step, static: ((g := StandInGraph(step, static, params)), g.out),
    )
    runner = _runner(model, params, True)
    n = tokens[:, :, 1:].numel()
    for _ in range(WARMUP_UPDATES):
        runner.run(tokens, n)
    first = runner.run(tokens, n)  # the capture's replay
    kept = first.loss.clone()
    runner.run(tokens.roll(3, dims=2), n)
    assert torch.equal(first.loss, kept)


def _rows(tmp_path: Path, cuda_graph: bool, precision: str, steps: int) -> list[dict]:
    cfg = RunConfig(size="tiny", device="cuda", precision=precision, cuda_graph=cuda_graph,
                    probes=ProbeConfig(lockin=False)).resolve()  # fmt: skip
    cfg = dataclasses.replace(cfg, steps=steps, eval_every=0, checkpoint_every=0,
                              inject=[f"nonfinite@{steps - 2}"])  # fmt: skip
    engine, _ = _engine(cfg, tmp_path / f"graph-{cuda_graph}-{precision}")
    rows = [engine.train_update(u) for u in range(1, steps + 1)]
    engine.recorder.flush()
    assert engine.groups.counts["replayed"] == (steps - WARMUP_UPDATES - 1 if cuda_graph else 0)
    engine.recorder.close()
    engine.recorder.release()
    return rows


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_graphed_engine_matches_the_eager_engine(tmp_path: Path, precision: str) -> None:
    eager = _rows(tmp_path, False, precision, 12)
    graph = _rows(tmp_path, True, precision, 12)
    worst = 0.0
    for e, g in zip(eager, graph, strict=True):
        for col in COLUMNS:
            a, b = e.get(col), g.get(col)
            if isinstance(a, float) and math.isfinite(a):
                worst = max(worst, abs(a - b) / max(abs(a), 1e-12))
    print(f"graphed vs eager, tiny {precision}: worst relative difference {worst:.3g}")
    assert worst <= 1e-5
