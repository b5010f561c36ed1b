"""A one-file GPT decoder: pre-LayerNorm, learned positions, untied head (nanoGPT shape).

    >>> from andrea_diag.config import MODEL_PRESETS
    >>> model = GPT(MODEL_PRESETS["tiny"])
    >>> logits = model(torch.zeros(2, 16, dtype=torch.long))   # (B, T, vocab)

Parameter names are stable (``h.{i}.attn.qkv.weight`` ...); ``param_group_of`` maps each one to
the (layer, kind) pair the per-layer probes and reports group by.

Decoding is the model's own, so a change to the forward pass is made once: ``forward`` and
``next_logits`` take an optional :class:`KVCache` (feed the prompt once, then one position per
call), and ``generate_batch`` continues a batch of prompts greedily and/or at temperatures
(the lock-in probe's sampler). :func:`decode_batch` is that sampling loop for any
``idx -> next-token logits`` function, which is how the probe samples models that are not ours.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from andrea_diag.config import ModelConfig


class KVCache:
    """Keys and values of the positions decoded so far, one ``(k, v)`` pair per layer.

    Generation without it re-runs the whole growing prefix for every new token; with it each
    step feeds one new position, which keeps the lock-in probe inside its overhead budget.
    """

    def __init__(self, n_layer: int) -> None:
        self.kv: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * n_layer
        self.pos = 0  # positions every layer has cached; GPT advances it after the last layer

    def extend(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Append a layer's new (B, nh, t, hs) keys/values -> (all keys, all values, prefill?)."""
        past = self.kv[layer]
        if past is not None:
            k = torch.cat([past[0], k], dim=2)  # (B, nh, pos + t, hs)
            v = torch.cat([past[1], v], dim=2)  # (B, nh, pos + t, hs)
        self.kv[layer] = (k, v)
        return k, v, past is None


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.layer = layer  # this layer's slot in a KVCache
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        else:
            k, v, prefill = cache.extend(self.layer, k, v)  # (B, nh, pos + T, hs)
            # a prefill is causal; one new token attends to every cached position
            y = F.scaled_dot_product_attention(q, k, v, is_causal=prefill and T > 1)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.proj = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg, layer)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.block_size, cfg.d_model)
        self.h = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        # Untied head: the seeds' trainer keeps a separate output matrix, and the H200
        # baselines' gradient sets (98,820,096 params / 149 tensors for 120m) count it.
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):  # GPT-2 scaled init of residual projections
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """idx (B, T) token ids -> logits (B, T, vocab).

        With a ``cache``, idx holds only the positions it has not seen (the prompt, then one
        token per call) and their keys/values are appended to it.
        """
        return self.lm_head(self.ln_f(self._hidden(idx, cache)))  # (B, T, vocab)

    def next_logits(self, idx: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """idx (B, T) -> (B, vocab) logits of the token after the last position.

        The head runs on the last position alone: it is the tiny model's biggest matmul.
        """
        x = self._hidden(idx, cache)  # (B, T, C)
        return self.lm_head(self.ln_f(x[:, -1]))  # (B, vocab)

    def _hidden(self, idx: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """idx (B, T) -> the last block's output (B, T, C), before the final LayerNorm."""
        _, T = idx.shape
        start = 0 if cache is None else cache.pos
        if start + T > self.cfg.block_size:
            raise ValueError(
                f"sequence length {start + T} exceeds block size {self.cfg.block_size}"
            )
        if start and T > 1:  # the cached branch only masks a prefill, not a multi-token append
            raise ValueError("after its prompt a KVCache takes one new position per call")
        pos = torch.arange(start, start + T, device=idx.device)  # (T,)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        for block in self.h:
            x = block(x, cache)
        if cache is not None:
            cache.pos += T
        return x

    @torch.no_grad()
    def generate_batch(
        self,
        prompts: torch.Tensor,
        n_new: int,
        temperatures: Sequence[float],
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Continue every prompt row (B, T) for ``n_new`` tokens under each temperature.

        Same contract as :func:`decode_batch`. Uses a KVCache when prompt and continuation fit
        the block; otherwise every step re-runs the last ``block_size`` tokens (a sliding
        window). Call it under ``eval()``.
        """
        limit = self.cfg.block_size
        if prompts.size(1) + n_new <= limit:
            cache = KVCache(len(self.h))

            def step(idx: torch.Tensor) -> torch.Tensor:  # prefill once, then one position
                return self.next_logits(idx[:, cache.pos :], cache)  # (R, vocab)

        else:

            def step(idx: torch.Tensor) -> torch.Tensor:
                return self.next_logits(idx[:, -limit:])  # (R, vocab)

        return decode_batch(step, prompts, n_new, temperatures, generator)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


@torch.no_grad()
def decode_batch(
    next_logits: Callable[[torch.Tensor], torch.Tensor],
    prompts: torch.Tensor,
    n_new: int,
    temperatures: Sequence[float],
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Continue every prompt row (B, T) under each temperature (0 = greedy), in one batch.

    ``next_logits`` maps the (R, T') tokens so far to the (R, vocab) logits of the next one;
    it is called once per new token. Temperature draws come from ``generator`` alone, so the
    global RNG is untouched. Returns (tokens (B·n_t, n_new), max_logit (B·n_t,),
    mean_entropy (B·n_t,)) over the generated tokens, entropy in nats at temperature 1; rows
    are temperature-major: all prompts at temperatures[0], then at temperatures[1] ...
    """
    B = prompts.size(0)
    idx = prompts.repeat(len(temperatures), 1)  # (R, T), R = B·n_t
    max_logit = torch.full((idx.size(0),), -math.inf, device=idx.device)  # (R,)
    ent_sum = torch.zeros(idx.size(0), device=idx.device)  # (R,)
    new = []
    for _ in range(n_new):
        logits = next_logits(idx).float()  # (R, vocab)
        logp = F.log_softmax(logits, dim=-1)  # (R, vocab)
        p = logp.exp()  # (R, vocab), the temperature-1 distribution
        ent_sum += -(p * logp).sum(-1)
        max_logit = torch.maximum(max_logit, logits.amax(-1))
        nxt = logits.argmax(-1, keepdim=True)  # (R, 1) greedy for every row, then overwrite
        for j, t in enumerate(temperatures):
            if t <= 0:
                continue
            rows = slice(j * B, (j + 1) * B)  # rows are temperature-major
            probs = p[rows] if t == 1.0 else F.softmax(logits[rows] / t, dim=-1)  # (B, vocab)
            # inverse-CDF draw: cheaper than multinomial on CPU, same distribution; a NaN row
            # (a diverged model) yields some id instead of an exception
            cdf = probs.cumsum(-1)  # (B, vocab)
            u = torch.rand((B, 1), generator=generator).to(cdf.device) * cdf[:, -1:]  # (B, 1)
            drawn = torch.searchsorted(cdf, u).clamp_(max=cdf.size(-1) - 1)  # (B, 1)
            nxt[rows] = drawn
        new.append(nxt)
        idx = torch.cat([idx, nxt], dim=1)  # (R, T')
    return torch.cat(new, dim=1), max_logit, ent_sum / n_new


# Names that mark a parameter's place in a decoder, ours and the common Hugging Face ones
# (GPT-2 ``transformer.h.N``, Llama ``model.layers.N``, GPT-NeoX ``gpt_neox.layers.N``), found
# at any depth, so a model wrapped in a LightningModule or a user's module groups the same way.
_BLOCKS = ("h", "layers", "blocks", "layer")
_EMBED = ("wte", "wpe", "embed_tokens", "embed_in", "embed_positions", "embeddings")
_FINAL_NORM = ("ln_f", "norm", "final_layer_norm", "final_layernorm")
_ATTENTION = ("attn", "attention", "self_attn", "self_attention")
_MLP = ("mlp", "feed_forward", "ffn")


def param_group_of(name: str) -> tuple[str, str]:
    """Map a parameter name to (layer, kind), kind in {embedding, attention, mlp, norm, head}.

    >>> param_group_of("h.3.attn.qkv.weight")
    ('h03', 'attention')
    >>> param_group_of("model.transformer.h.0.mlp.c_fc.weight")
    ('h00', 'mlp')
    >>> param_group_of("model.layers.1.input_layernorm.weight")
    ('h01', 'norm')
    """
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part in _BLOCKS and i + 1 < len(parts) and parts[i + 1].isdigit():
            sub = parts[i + 2] if i + 2 < len(parts) else ""
            kind = "attention" if sub in _ATTENTION else "mlp" if sub in _MLP else "norm"
            return f"h{int(parts[i + 1]):02d}", kind
        if part in _EMBED:
            return "embed", "embedding"
        if part in _FINAL_NORM:
            return "final", "norm"
    return "head", "head"
