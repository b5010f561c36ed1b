"""Stacked seeds (andrea_diag/bench/stacked.py): each seed of a stack trains as its own GPT would.

python -m pytest -q tests/test_stacked.py
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from andrea_diag.bench.stacked import (
    StackedGPT,
    StackedLoop,
    bench_stacked,
    clip_per_seed,
    seed_losses,
    stacked_from_seeds,
)
from andrea_diag.config import RunConfig
from andrea_diag.model import GPT
from andrea_diag.train.components import make_precision
from andrea_diag.train.optim import build_optimizer

CPU = torch.device("cpu")


def _cfg(**kw: object) -> RunConfig:
    return RunConfig(size="tiny", device="cpu", **kw).resolve()


def _tokens(cfg: RunConfig, k: int, seed: int = 7) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.model.vocab_size, (k, 4, 17), generator=gen)  # (K, B, T+1)


def _assert_same_params(
    ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], cfg: RunConfig, updates: int
) -> None:
    """Equal to float tolerance, but for the key biases: their true gradient is 0 (softmax
    ignores a shift shared by every key), so Adam turns float noise into steps of up to lr
    each; those are bounded by lr x updates instead."""
    keys = slice(cfg.model.d_model, 2 * cfg.model.d_model)  # qkv.bias's last axis: q, k, v
    for name, a in ours.items():
        b = theirs[name]
        if name.endswith("qkv.bias"):
            gap = (a[..., keys] - b[..., keys]).abs().max().item()
            assert gap <= cfg.lr * updates, name
            a, b = a.clone(), b.clone()
            a[..., keys] = b[..., keys] = 0.0
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_each_seed_of_a_stack_computes_its_own_gpts_loss_and_gradients() -> None:
    cfg = _cfg()
    models = []
    for seed in (3, 11):
        torch.manual_seed(seed)
        models.append(GPT(cfg.model))
    stack = StackedGPT(models)
    tokens = _tokens(cfg, 2)
    losses = seed_losses(stack, tokens, make_precision("fp32", CPU))
    losses.sum().backward()
    for k, model in enumerate(models):
        x, y = tokens[k, :, :-1], tokens[k, :, 1:]
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        assert losses[k].item() == pytest.approx(loss.item(), rel=1e-6)
        for i, (name, p) in enumerate(model.named_parameters()):
            assert stack.names[i] == name
            torch.testing.assert_close(stack.stack[i].grad[k], p.grad, rtol=1e-5, atol=1e-7)


def test_a_stack_refuses_mixed_configs_and_tokens_for_another_number_of_seeds() -> None:
    tiny, tiny2 = GPT(_cfg().model), GPT(RunConfig(size="tiny2", device="cpu").resolve().model)
    with pytest.raises(ValueError, match="one config"):
        StackedGPT([tiny, tiny2])
    with pytest.raises(ValueError, match="one config"):
        StackedGPT([])
    with pytest.raises(ValueError, match="3 seeds given to a stack of 1"):
        StackedGPT([tiny])(torch.zeros(3, 2, 8, dtype=torch.long))


def test_an_unclipped_row_is_left_alone_even_with_a_non_finite_norm() -> None:
    grads = [torch.tensor([[math.inf, 1.0], [3.0, 4.0]])]
    norms = clip_per_seed(grads, torch.tensor([math.inf, 1.0]))
    assert norms[0].item() == math.inf and norms[1].item() == pytest.approx(5.0)
    assert grads[0][0].tolist() == [math.inf, 1.0]  # untouched: no inf / inf = NaN
    assert grads[0][1].tolist() == pytest.approx([0.6, 0.8], rel=1e-5)


def test_a_stack_refuses_fp16_and_sequences_past_its_block() -> None:
    with pytest.raises(ValueError, match="fp32 or bf16, not fp16"):
        StackedLoop(_cfg(precision="fp16"), 2, CPU, graphed=False)
    stack = stacked_from_seeds(_cfg(), 1, CPU)
    too_long = torch.zeros(1, 1, stack.cfg.block_size + 1, dtype=torch.long)
    with pytest.raises(ValueError, match="exceeds block size"):
        stack(too_long)


def test_clip_per_seed_scales_only_the_rows_over_their_own_max_norm() -> None:
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(3, 5, 4, generator=gen), torch.randn(3, 6, generator=gen)]
    before = [g.clone() for g in grads]
    truth = torch.stack([torch.cat([g[k].flatten() for g in before]).norm() for k in range(3)])
    max_norms = torch.tensor([0.5, math.inf, 1e6])  # clipped, an unclipped arm, never reached
    norms = clip_per_seed(grads, max_norms)
    torch.testing.assert_close(norms, truth)
    after = torch.stack([torch.cat([g[k].flatten() for g in grads]).norm() for k in range(3)])
    assert after[0].item() == pytest.approx(0.5, rel=1e-5)
    for k in (1, 2):  # untouched rows: bit for bit
        assert all(torch.equal(g[k], b[k]) for g, b in zip(grads, before, strict=True))


@pytest.mark.parametrize("recipe", ["v1", "v2"])  # Adam, and AdamW with its decayed groups
def test_a_stacked_update_is_each_seeds_own_clipped_optimizer_update(recipe: str) -> None:
    cfg = _cfg(recipe=recipe, max_norm=0.05, seed=5)
    loop = StackedLoop(cfg, 2, CPU, graphed=False)
    refs = []
    for k in range(2):  # each seed as the engine trains it: its own GPT and optimizer
        torch.manual_seed(cfg.seed + k)
        model = GPT(cfg.model)
        refs.append((model, build_optimizer(model, cfg.recipe_cfg, cfg.lr, CPU)))
    for s in (1, 2):
        tokens = _tokens(cfg, 2, seed=s)
        loop.update(tokens)
        for k, (model, opt) in enumerate(refs):  # row 0 is a clipped arm, row 1 an unclipped one
            opt.zero_grad()
            x, y = tokens[k, :, :-1], tokens[k, :, 1:]
            F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
            max_norm = cfg.max_norm if k == 0 else math.inf
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            assert k == 1 or norm.item() > cfg.max_norm  # the clipped arm was clipped
            for p, stacked in zip(model.parameters(), loop.params, strict=True):
                torch.testing.assert_close(stacked.grad[k], p.grad, rtol=1e-4, atol=1e-7)
                # the step on the very same gradients: Adam's first steps are about lr x the
                # sign of each gradient, so where a gradient is float noise (the key bias's
                # true one is 0) matmul order alone would move a weight by up to lr
                p.grad.copy_(stacked.grad[k])
            opt.step()
            mine = loop.model.seed_params(k)
            for name, p in model.named_parameters():
                torch.testing.assert_close(mine[name], p.detach(), rtol=1e-5, atol=1e-7, msg=name)


def test_stacked_seeds_start_as_the_engines_seeds_would() -> None:
    cfg = _cfg(seed=4)
    stack = stacked_from_seeds(cfg, 2, CPU)
    torch.manual_seed(5)  # the second row is seed cfg.seed + 1, built as the trainer builds it
    second = GPT(cfg.model)
    for name, p in second.named_parameters():
        assert torch.equal(stack.seed_params(1)[name], p)


def test_bench_stacked_times_the_plain_loop_and_every_k_side_by_side() -> None:
    progress: list[str] = []
    result = bench_stacked(_cfg(), ks=(1, 2), updates=2, warmup=1, block=1,
                           progress=progress.append)  # fmt: skip
    loops = {r["loop"]: r for r in result["loops"]}
    assert list(loops) == ["plain", "stacked-1", "stacked-2"]
    assert [r["seeds"] for r in result["loops"]] == [1, 1, 2]
    assert loops["plain"]["ratio_vs_plain"] == 1.0
    for r in result["loops"]:
        assert len(r["blocks_ms"]) == 2 and r["ms_per_update"] > 0
        assert r["seed_updates_per_s"] == pytest.approx(r["seeds"] * 1e3 / r["ms_per_update"])
        assert r["mfu"] is None  # the CPU has no peak in the table
    two = loops["stacked-2"]
    assert two["ratio_vs_plain"] == pytest.approx(
        two["seed_updates_per_s"] / loops["plain"]["seed_updates_per_s"]
    )
    assert {k: len(v) for k, v in result["final_losses"].items()} == {1: 1, 2: 2}
    assert all(math.isfinite(x) for v in result["final_losses"].values() for x in v)
    assert result["meta"]["cuda_graph"] is False and progress[-1] == "timed 2/2 updates each"


def test_bench_stacked_refuses_a_k_below_one() -> None:
    with pytest.raises(ValueError, match="every K at least 1"):
        bench_stacked(_cfg(), ks=(0,), updates=1, warmup=1, block=1)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_graphed_stack_replays_the_eager_stacks_updates(
    precision: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the bench's figures count graphed updates: they must be the same updates as eager ones
    gpu = torch.device("cuda")
    cfg = RunConfig(size="tiny", device="cuda", precision=precision, max_norm=0.05).resolve()
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)  # no TF32 rounding
    eager, graphed = StackedLoop(cfg, 3, gpu, False), StackedLoop(cfg, 3, gpu, True)
    for s in range(6):
        tokens = _tokens(cfg, 3, seed=s).to(gpu)
        if s == 0:  # a capture warms up on the tokens three times: the eager loop does too
            for _ in range(3):
                eager.update(tokens)
        ours, theirs = graphed.update(tokens).clone(), eager.update(tokens)
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
    stacked = dict(zip(graphed.model.names, graphed.params, strict=True))
    _assert_same_params(stacked, dict(zip(eager.model.names, eager.params, strict=True)), cfg, 9)
