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
from graph_stand_ins import stand_in_graphs

from andrea_diag.bench.train import _engine
from andrea_diag.config import ProbeConfig, RunConfig
from andrea_diag.errors import UserError
from andrea_diag.model import GPT
from andrea_diag.train import graphed
from andrea_diag.train.components import Precision, Reducer, accumulate_with
from andrea_diag.train.graphed import WARMUP_UPDATES, GroupRunner, check_graphable
from andrea_diag.train.rows import overflow_last

COLUMNS = ("loss", "grad_norm", "grad_norm_post", "m_norm", "v_norm", "update_rms",
           "cos_update_grad")  # fmt: skip  # Δθ·g: the CUDA-only flat product, graphed


def _tiny() -> tuple[torch.nn.Module, list[torch.nn.Parameter], torch.Tensor]:
    cfg = RunConfig(size="tiny").resolve()
    torch.manual_seed(0)
    model = GPT(cfg.model)
    tokens = torch.randint(0, cfg.model.vocab_size, (2, 3, 17))  # (A, m, T+1)
    return model, list(model.parameters()), tokens


def _runner(model: torch.nn.Module, params: list, graphed_: bool) -> GroupRunner:
    """A runner on the CPU; a graphed one needs the tests' ``cpu_graphs`` (no CUDA here)."""

    def zero() -> None:
        for p in params:
            p.grad = None

    cpu = torch.device("cpu")
    return GroupRunner(model, Precision(), Reducer(), cpu, zero, params, graphed=graphed_)


def _warm_runner(
    mp: pytest.MonkeyPatch, capture: Any = None
) -> tuple[GroupRunner, torch.Tensor, int]:
    """A graphed runner on stand-in graphs (or ``capture``), past its eager warm-up: its next
    group is captured."""
    model, params, tokens = _tiny()
    if capture is None:
        stand_in_graphs(mp, params)
    else:
        mp.setattr(graphed, "graph_forward_backward", capture)
    runner = _runner(model, params, True)
    n = tokens[:, :, 1:].numel()
    for _ in range(WARMUP_UPDATES):
        runner.run(tokens, n)
    return runner, tokens, n


@pytest.fixture
def cpu_graphs(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The runner's own refusal off CUDA lifted, so its bookkeeping runs on stand-in graphs."""
    monkeypatch.setattr(graphed, "check_graphable", lambda device, world_size: None)
    return monkeypatch


def test_a_graphed_runner_off_cuda_is_refused_when_built() -> None:
    model, params, _ = _tiny()
    with pytest.raises(UserError, match="--cuda-graph needs a CUDA device"):
        _runner(model, params, True)


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
    cpu_graphs: pytest.MonkeyPatch,
) -> None:
    model, params, tokens = _tiny()
    twin, twin_params, _ = _tiny()  # the same weights (no step here), its own gradients
    holder = stand_in_graphs(cpu_graphs, params)
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
    cpu_graphs: pytest.MonkeyPatch,
) -> None:
    runner, tokens, n = _warm_runner(cpu_graphs)
    first = runner.run(tokens, n)  # the capture's replay
    kept = first.loss.clone()
    runner.run(tokens.roll(3, dims=2), n)
    assert torch.equal(first.loss, kept)


def _rows(tmp_path: Path, cuda_graph: bool, precision: str, steps: int) -> list[dict]:
    cfg = RunConfig(size="tiny", device="cuda", precision=precision, cuda_graph=cuda_graph,
                    probes=ProbeConfig(lockin=False, moment_norms_every=1)).resolve()  # fmt: skip
    cfg = dataclasses.replace(cfg, steps=steps, eval_every=0, checkpoint_every=0,
                              inject=[f"nonfinite@{steps - 2}"])  # fmt: skip
    engine, _ = _engine(cfg, tmp_path / f"graph-{cuda_graph}-{precision}")
    rows = [engine.train_update(u) for u in range(1, steps + 1)]
    engine.recorder.flush()
    assert engine.groups.counts["replayed"] == (steps - WARMUP_UPDATES - 1 if cuda_graph else 0)
    # the step: captured once the group's capture has moved the grads (fp16's scaler: eager)
    assert engine.steps.counts["captured"] == (cuda_graph and precision != "fp16")
    optstate = next(p for p in engine.probes.probes if p.name == "optstate")
    assert (optstate.graphs is not None and optstate.graphs.counts["captured"] == 1) == cuda_graph
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


def test_a_replay_points_the_grads_back_at_the_graph_after_outside_code_set_them_to_none(
    cpu_graphs: pytest.MonkeyPatch,
) -> None:
    model, params, tokens = _tiny()
    twin, twin_params, _ = _tiny()
    stand_in_graphs(cpu_graphs, params)
    runner, eager = _runner(model, params, True), _runner(twin, twin_params, False)
    n = tokens[:, :, 1:].numel()
    for i in range(WARMUP_UPDATES + 3):
        batch = tokens.roll(i, dims=2)
        eager.run(batch, n)
        if i > WARMUP_UPDATES:  # after the capture: a user's zero_grad(set_to_none=True)
            for p in params:
                p.grad = None
        runner.run(batch, n)
        assert all(p.grad is not None for p in params), i
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(params, twin_params, strict=True))


def test_a_model_that_cannot_be_captured_is_one_user_error(
    cpu_graphs: pytest.MonkeyPatch,
) -> None:
    def capture(step: Any, static: torch.Tensor) -> Any:
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    runner, tokens, n = _warm_runner(cpu_graphs, capture)
    with pytest.raises(UserError, match=r"cannot be captured as a CUDA graph \(operation not "):
        runner.run(tokens, n)


def test_a_changing_token_count_after_the_capture_runs_eagerly_and_warns_once(
    cpu_graphs: pytest.MonkeyPatch,
) -> None:
    runner, tokens, n = _warm_runner(cpu_graphs)
    runner.run(tokens, n)  # captured
    with pytest.warns(UserWarning, match="run eagerly") as seen:
        runner.run(tokens, n - 1)
        runner.run(tokens, n - 1)
    assert len(seen) == 1
    assert runner.counts == {"eager": WARMUP_UPDATES + 2, "replayed": 1}


def test_a_sweep_for_slurm_or_merge_only_is_not_refused_for_this_hosts_device() -> None:
    from andrea_diag.experiments.executor import ExecutorConfig
    from andrea_diag.experiments.sweep import SweepSpec, cells

    base = RunConfig(cuda_graph=True, device="auto")  # whatever this host has
    for executor in (ExecutorConfig(kind="slurm"), ExecutorConfig(merge_only=True)):
        spec = SweepSpec(base=base, lrs=[1e-3], executor=executor)
        assert [c.cuda_graph for c in cells(spec)] == [True]  # the cells' own hosts decide
        with pytest.raises(UserError, match="needs a CUDA device"):  # the CPU is one anywhere
            cells(dataclasses.replace(spec, base=RunConfig(cuda_graph=True, device="cpu")))
    with pytest.raises(UserError, match="needs a CUDA device"):
        cells(SweepSpec(base=RunConfig(cuda_graph=True, device="cpu"), lrs=[1e-3]))  # local
    with pytest.raises(UserError, match="D = 2 replicas"):
        cells(SweepSpec(base=RunConfig(cuda_graph=True, replicas=2), lrs=[1e-3],
                        executor=ExecutorConfig(kind="slurm")))  # fmt: skip


def test_torchruns_world_is_refused_before_any_output(monkeypatch: pytest.MonkeyPatch) -> None:
    from andrea_diag.experiments.cascade import check_runnable

    monkeypatch.setattr(graphed.torch.cuda, "is_available", lambda: True)  # resolve "cuda"
    for name, value in {
        "WORLD_SIZE": "2",
        "RANK": "0",
        "MASTER_ADDR": "h",
        "MASTER_PORT": "1",
    }.items():
        monkeypatch.setenv(name, value)  # what torchrun sets; the config still says D = 1
    cfg = RunConfig(cuda_graph=True, device="cuda").resolve()
    with pytest.raises(UserError, match="D = 2 replicas"):
        check_runnable(cfg)


def test_bench_train_refuses_a_warmup_that_would_time_the_capture(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from andrea_diag.bench.train import bench_train

    monkeypatch.setattr(graphed, "check_graphable", lambda device, world: None)
    cfg = RunConfig(size="tiny", device="cpu", cuda_graph=True).resolve()
    with pytest.raises(UserError, match=f"--warmup {WARMUP_UPDATES + 2} or more, got 4"):
        bench_train(cfg, updates=2, warmup=4, block=1)  # the step's graph comes at update 5
