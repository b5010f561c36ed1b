"""K seeds of one model in one set of kernels: what batching seeds could buy (issue 20, item 3).

    from andrea_diag.bench.stacked import bench_stacked
    from andrea_diag.config import RunConfig
    cfg = RunConfig(size="12m", precision="bf16", cuda_graph=True).resolve()
    result = bench_stacked(cfg, ks=(1, 2, 4, 8), updates=60, warmup=5, block=10)

Why: at 12m one graphed update keeps the H200 busy about 63% of the time at 9-13% MFU
(reports/bench-train/): its kernels are too small to fill the GPU. More processes (``--jobs`` and
MPS) fill the idle time and overlap kernels, 1.68x at 12m (reports/throughput-h200/). Batching
seeds is the other way: every matmul becomes one batched matmul over K seeds and every
elementwise op K times larger. This module measures that ceiling before an engine is built on it.

:class:`StackedGPT` is :class:`~andrea_diag.model.GPT` with a leading seed axis on every
parameter. Seed k's slice starts as that seed's GPT and, on the same tokens, computes the same
loss and gradients to float tolerance (a batched matmul may sum in another order;
tests/test_stacked.py). Each seed's gradient is clipped by its own global norm against its own
max_norm (inf for an unclipped arm), and one Adam steps every seed: Adam is elementwise, so
seed k's slice of each state tensor is that seed's own Adam state.

Method, as bench-train's: ``warmup`` updates of every loop, then alternating timed blocks of
``block`` updates between syncs, in one process, on the same random token batches. The loops:

- ``plain``: bench-train's :class:`~andrea_diag.bench.train.PlainLoop`, one seed, the run's
  clipper (the fused CUDA kernel on a GPU), graphed under ``cfg.cuda_graph``: the reference;
- ``stacked-K`` for each K: one CUDA graph per update (forward, backward, per-seed clip by
  torch ops, Adam), or eager without ``cfg.cuda_graph``.

The figure is seed-updates per second and its ratio to ``plain``. The per-seed clip is plain
torch (one norm per tensor row, one multiply per tensor), not the fused kernel, so a stacked
figure is, if anything, low.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from andrea_diag.config import Recipe, RunConfig
from andrea_diag.model import GPT
from andrea_diag.train.components import Precision


class StackedGPT(nn.Module):
    """``len(models)`` GPTs of one config as one module: parameter ``i`` of seed k is
    ``stack[i][k]``, in the GPT's own parameter order (``names``). ``forward`` maps tokens
    (K, B, T) to logits (K, B, T, vocab)."""

    def __init__(self, models: Sequence[GPT]) -> None:
        super().__init__()
        if not models or any(m.cfg != models[0].cfg for m in models):
            raise ValueError("StackedGPT needs one or more GPTs of one config")
        self.cfg = models[0].cfg
        self.names = [n for n, _ in models[0].named_parameters()]
        per_seed = [dict(m.named_parameters()) for m in models]
        self.stack = nn.ParameterList(
            nn.Parameter(torch.stack([p[n].detach() for p in per_seed])) for n in self.names
        )
        self._at = {n: i for i, n in enumerate(self.names)}

    @property
    def k(self) -> int:
        """The number of seeds."""
        return self.stack[0].size(0)

    def w(self, name: str) -> torch.Tensor:
        """The stacked parameter named as in GPT, e.g. ``h.0.attn.qkv.weight`` (K, ...)."""
        return self.stack[self._at[name]]

    def seed_params(self, k: int) -> dict[str, torch.Tensor]:
        """Seed k's parameters by GPT name (views into the stack)."""
        return {n: self.stack[i][k] for i, n in enumerate(self.names)}

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        K, _, T = idx.shape
        if K != self.k:
            raise ValueError(f"tokens for {K} seeds given to a stack of {self.k}")
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block size {self.cfg.block_size}")
        vocab = self.cfg.vocab_size
        # one embedding table of K·vocab rows: seed k's ids are shifted by k·vocab
        shift = torch.arange(K, device=idx.device).view(K, 1, 1) * vocab  # (K, 1, 1)
        x = F.embedding(idx + shift, self.w("wte.weight").flatten(0, 1))  # (K, B, T, C)
        x = x + self.w("wpe.weight")[:, None, :T]  # (K, B, T, C)
        for i in range(self.cfg.n_layer):
            x = x + self._attention(self._norm(x, f"h.{i}.ln_1"), f"h.{i}.attn")
            h = self._linear(self._norm(x, f"h.{i}.ln_2"), f"h.{i}.mlp.fc")
            x = x + self._linear(F.gelu(h, approximate="tanh"), f"h.{i}.mlp.proj")
        return self._linear(self._norm(x, "ln_f"), "lm_head")  # (K, B, T, vocab)

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w, b = self.w(f"{name}.weight"), self.w(f"{name}.bias")  # (K, C) each
        return F.layer_norm(x, x.shape[-1:]) * w[:, None, None] + b[:, None, None]

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """(K, B, T, in) -> (K, B, T, out): one batched matmul over the seeds."""
        K, B, T, C = x.shape
        w = self.w(f"{name}.weight").transpose(1, 2)  # (K, in, out)
        flat = x.reshape(K, B * T, C)
        bias = f"{name}.bias"
        if bias in self._at:
            y = torch.baddbmm(self.w(bias)[:, None], flat, w)  # (K, B·T, out)
        else:
            y = torch.bmm(flat, w)  # (K, B·T, out)
        return y.view(K, B, T, -1)

    def _attention(self, x: torch.Tensor, name: str) -> torch.Tensor:
        K, B, T, C = x.shape
        nh = self.cfg.n_head
        q, k, v = self._linear(x, f"{name}.qkv").split(C, dim=-1)  # 3 x (K, B, T, C)
        # seeds and batch rows are one batch axis for attention: it has no weights
        q, k, v = (t.reshape(K * B, T, nh, C // nh).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (K·B, nh, T, hs)
        y = y.transpose(1, 2).reshape(K, B, T, C)
        return self._linear(y, f"{name}.proj")


def stacked_from_seeds(cfg: RunConfig, k: int, device: torch.device) -> StackedGPT:
    """K seeds' GPTs (seeds ``cfg.seed`` .. ``cfg.seed + k - 1``, each as the engine builds
    it: ``torch.manual_seed`` then ``GPT``) stacked on ``device``."""
    models = []
    for j in range(k):
        torch.manual_seed(cfg.seed + j)
        models.append(GPT(cfg.model).to(device))
    return StackedGPT(models)


def seed_losses(model: StackedGPT, tokens: torch.Tensor, precision: Precision) -> torch.Tensor:
    """Each seed's mean next-token loss on its own rows of ``tokens`` (K, B, T+1) -> (K,)."""
    x, y = tokens[..., :-1], tokens[..., 1:]
    with precision.autocast():
        logits = model(x)  # (K, B, T, vocab)
    ce = F.cross_entropy(logits.flatten(0, 2).float(), y.flatten(), reduction="none")
    return ce.view(tokens.size(0), -1).mean(1)  # (K,)


def clip_per_seed(grads: list[torch.Tensor], max_norms: torch.Tensor) -> torch.Tensor:
    """Scale seed k's gradients (row k of every tensor) by min(1, max_norms[k] / (norm_k +
    1e-6)), torch's ``clip_grad_norm_`` per seed; returns the norms before clipping (K,). A row
    with max_norm inf (an unclipped arm) is left alone, even where its norm is not finite."""
    k = max_norms.numel()
    rows = [g[j] for g in grads for j in range(k)]  # tensor-major: row j of every tensor
    per_row = torch.stack(torch._foreach_norm(rows)).view(len(grads), k)  # (tensors, K)
    norms = torch.linalg.vector_norm(per_row, dim=0)  # (K,)
    coef = (max_norms / (norms + 1e-6)).clamp(max=1.0)  # (K,)
    coef = torch.where(torch.isinf(max_norms), torch.ones_like(coef), coef)  # not inf / inf
    for g in grads:
        g.mul_(coef.view(k, *([1] * (g.dim() - 1))).to(g.dtype))
    return norms


def stacked_optimizer(
    model: StackedGPT, recipe: Recipe, lr: float, device: torch.device, capturable: bool
) -> torch.optim.Optimizer:
    """The recipe's optimizer as ``build_optimizer`` makes it, on the stack: a tensor is
    decayed when the GPT's own parameter (one axis fewer) has two or more axes."""
    decay = [p for p in model.stack if p.dim() - 1 >= 2]
    no_decay = [p for p in model.stack if p.dim() - 1 < 2]
    wd = recipe.weight_decay if recipe.optimizer != "adam" else 0.0
    groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
    kw = {"lr": lr, "betas": recipe.betas, "eps": recipe.eps, "fused": device.type == "cuda"}
    cls = torch.optim.Adam if recipe.optimizer == "adam" else torch.optim.AdamW
    return cls(groups, capturable=capturable, **kw)


class StackedLoop:
    """Updates of K stacked seeds: eager, or (``graphed``) one CUDA graph per update captured
    on the first call, as PyTorch's whole-network capture does (warm-up on a side stream)."""

    def __init__(self, cfg: RunConfig, k: int, device: torch.device, graphed: bool) -> None:
        from andrea_diag.train.components import make_precision

        if cfg.precision not in ("fp32", "bf16"):  # fp16's loss scaler is not applied here
            raise ValueError(f"stacked seeds run fp32 or bf16, not {cfg.precision}")
        self.model = stacked_from_seeds(cfg, k, device)
        self.params = list(self.model.stack)
        self.precision = make_precision(cfg.precision, device)
        self.optimizer = stacked_optimizer(self.model, cfg.recipe_cfg, cfg.lr, device, graphed)
        # even rows are clipped arms, odd rows unclipped ones: a cell's two arms, side by side
        norms = [cfg.max_norm if j % 2 == 0 else math.inf for j in range(k)]
        self.max_norms = torch.tensor(norms, device=device)
        self.graphed = graphed
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: tuple[torch.Tensor, torch.Tensor] | None = None  # (tokens, losses)

    def _step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)  # in a capture: grads from the graph's pool
        losses = seed_losses(self.model, tokens, self.precision)
        self.precision.backward(losses.sum())  # seeds share no weight: each gets its own grad
        clip_per_seed([p.grad for p in self.params], self.max_norms)
        self.optimizer.step()
        return losses

    def _capture(self, tokens: torch.Tensor) -> None:
        static = tokens.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # lazy initialisation (cuBLAS, autograd) off the capture
            for _ in range(3):
                self._step(static)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            losses = self._step(static)
        self.static = (static, losses)

    def update(self, tokens: torch.Tensor) -> torch.Tensor:
        """One update of every seed on ``tokens`` (K, B, T+1); returns the seeds' losses (K,)."""
        if not self.graphed:
            return self._step(tokens).detach()
        if self.graph is None:
            self._capture(tokens)
        assert self.static is not None
        self.static[0].copy_(tokens)
        self.graph.replay()
        return self.static[1]


def _batches(cfg: RunConfig, k: int, n: int, device: torch.device) -> list[torch.Tensor]:
    """``n`` random token batches of K seeds (K, m, seq_len+1), drawn once on the host."""
    gen = torch.Generator().manual_seed(cfg.seed)
    shape = (n, k, cfg.micro_batch * cfg.accum, cfg.seq_len + 1)
    return list(torch.randint(0, cfg.model.vocab_size, shape, generator=gen).to(device))


def bench_stacked(
    cfg: RunConfig,
    ks: Sequence[int],
    updates: int,
    warmup: int,
    block: int,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Time ``plain`` (one seed) and ``stacked-K`` for each K in ``ks`` on ``cfg`` (resolved),
    in alternating blocks. Returns {"meta", "loops": [...], "final_losses"}."""
    from andrea_diag.bench.train import PlainLoop, _sync, _timed_blocks, peak_tflops
    from andrea_diag.device import resolve_device
    from andrea_diag.train.graphed_step import CAPTURED_BY

    device = resolve_device(cfg.device)
    if updates < 1 or warmup < 1 or block < 1 or not ks or min(ks) < 1:
        raise ValueError("updates, warmup and block must be at least 1, every K at least 1")
    graphed = cfg.cuda_graph and device.type == "cuda"
    if graphed and warmup < CAPTURED_BY:  # a capture is warm-up work, never a timed update
        raise ValueError(f"a graphed bench needs warmup >= {CAPTURED_BY}, got {warmup}")
    torch.set_float32_matmul_precision(cfg.matmul_precision)  # as the trainer does
    n_batches = 8  # cycled: the content does not change the work
    plain = PlainLoop(cfg, device, graphed=graphed)
    one = _batches(cfg, 1, n_batches, device)
    arms: dict[str, Callable[[int], Any]] = {
        "plain": lambda u: plain.update(one[u % n_batches][0].unsqueeze(0))  # (A=1, m, T+1)
    }
    loops, batches = {}, {}
    for k in ks:
        loop = loops[k] = StackedLoop(cfg, k, device, graphed)
        toks = batches[k] = _batches(cfg, k, n_batches, device)
        arms[f"stacked-{k}"] = lambda u, loop=loop, toks=toks: loop.update(toks[u % n_batches])
    say = progress or (lambda _line: None)
    for u in range(1, warmup + 1):
        for step in arms.values():
            step(u)
    _sync(device)
    say(f"warm-up done: {warmup} updates each")
    times = _timed_blocks(device, arms, warmup, updates, block, say)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    peak = peak_tflops(gpu, cfg.precision, cfg.matmul_precision)
    tokens = cfg.micro_batch * cfg.accum * cfg.seq_len
    flops = cfg.model.flops_per_token(cfg.seq_len)
    rows = []
    for name, t in times.items():
        seeds = 1 if name == "plain" else int(name.split("-")[1])
        ms = sum(t) / updates
        rate = seeds * 1e3 / ms
        mfu = flops * tokens * rate / (peak * 1e12) if peak else None
        rows.append({"loop": name, "seeds": seeds, "ms_per_update": ms,
                     "seed_updates_per_s": rate, "mfu": mfu, "blocks_ms": t})  # fmt: skip
    base = rows[0]["seed_updates_per_s"]
    for r in rows:
        r["ratio_vs_plain"] = r["seed_updates_per_s"] / base
    # one more update each, untimed: its losses show every seed still trains on finite numbers
    final = {k: loops[k].update(batches[k][0]).tolist() for k in ks}
    meta = {"device": str(device), "gpu": gpu, "torch": torch.__version__, "size": cfg.size,
            "precision": cfg.precision, "matmul_precision": cfg.matmul_precision,
            "cuda_graph": graphed, "clip": cfg.clip, "clip_impl": cfg.clip_impl,
            "max_norm": cfg.max_norm, "recipe": cfg.recipe, "m": cfg.micro_batch,
            "A": cfg.accum, "seq_len": cfg.seq_len, "tokens_per_update_per_seed": tokens,
            "updates": updates, "warmup": warmup, "block": block, "peak_tflops": peak,
            "flops_per_token": flops}  # fmt: skip
    return {"meta": meta, "loops": rows, "final_losses": final}
