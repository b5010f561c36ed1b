"""SpikeMonitor on models it did not build: layer groups by module type, lock-in's vocabulary and
position limit inferred from the model or given, and skipped with one warning when neither says
(issue 24 item 4). Checked on ``nn.TransformerEncoder``, Hugging Face GPT-2, nanoGPT's module
shape, our own GPT (groups exactly as the trainer names them) and a plain MLP.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from monitor_helpers import monitored_update
from torch import nn

from andrea_diag.config import ModelConfig
from andrea_diag.model import GPT, param_group_of
from andrea_diag.monitor import SpikeMonitor
from andrea_diag.probes.shape import block_size_of, layer_groups, vocab_size_of
from andrea_diag.record import load_run

V, T, D = 61, 24, 32


class EncoderLM(nn.Module):
    """A practitioner's LM on ``nn.TransformerEncoder``: no config, no telling names."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        layer = nn.TransformerEncoderLayer(D, 2, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(D), enable_nested_tensor=False)
        self.out = nn.Linear(D, V)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)  # indexes past T if not cut
        mask = nn.Transformer.generate_square_subsequent_mask(idx.size(1))
        return self.out(self.enc(self.emb(idx) + self.pos(pos), mask=mask, is_causal=True))


# -- nanoGPT's module shape (karpathy/nanoGPT model.py, abridged: same names, same types) -----
@dataclass
class NanoConfig:
    block_size: int = T
    vocab_size: int = V
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = D


class LayerNorm(nn.Module):  # nanoGPT's own class (optional bias), not nn.LayerNorm
    def __init__(self, ndim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c: NanoConfig) -> None:
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)
        self.n_head = c.n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, L, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, L, C))


class MLP(nn.Module):
    def __init__(self, c: NanoConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c: NanoConfig) -> None:
        super().__init__()
        self.ln_1, self.attn = LayerNorm(c.n_embd), CausalSelfAttention(c)
        self.ln_2, self.mlp = LayerNorm(c.n_embd), MLP(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, config: NanoConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(0.0),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT does

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:  # inference: the last position only, as nanoGPT returns it
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def _train(model: nn.Module, run_dir: Path, steps: int = 4, **options) -> dict:
    """A plain loop with SpikeMonitor: next-token loss on random ids, torch clipping."""
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    prompts = {"a": torch.arange(20) % V, "b": (torch.arange(20) * 7) % V}
    with SpikeMonitor(model, opt, run_dir, total_steps=steps, prompts=prompts, shadow=False,
                      **options) as mon:  # fmt: skip
        for _ in range(steps):
            ids = torch.randint(0, V, (2, 16), generator=gen)
            out = model(ids)
            logits = out.logits if hasattr(out, "logits") else out
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))
            loss.backward()
            mon.after_backward(loss)
            mon.after_clip(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
            opt.step()
            mon.after_step()
            opt.zero_grad()
    return load_run(run_dir)


def _layer_cols(run: dict) -> set[str]:
    return {c.split("/", 1)[1] for c in run["metrics"].columns if c.startswith("layer_gn/")}


def test_transformer_encoder_groups_by_module_type_and_lockin_stays_in_its_table(tmp_path):
    torch.manual_seed(0)
    model = EncoderLM()
    groups = layer_groups(model)
    assert groups["enc.layers.0.linear1.weight"] == ("h00", "mlp")  # not h00.norm
    assert groups["enc.layers.1.linear2.bias"] == ("h01", "mlp")
    assert groups["enc.layers.0.self_attn.in_proj_weight"] == ("h00", "attention")
    assert groups["enc.layers.0.self_attn.out_proj.weight"] == ("h00", "attention")
    assert groups["enc.layers.1.norm2.weight"] == ("h01", "norm")
    assert groups["emb.weight"] == groups["pos.weight"] == ("embed", "embedding")
    assert groups["enc.norm.weight"] == ("final", "norm")
    assert groups["out.weight"] == ("head", "head")
    assert (vocab_size_of(model), block_size_of(model)) == (V, T)

    run = _train(model, tmp_path / "enc")
    assert _layer_cols(run) == {
        "embed.embedding", "h00.attention", "h00.mlp", "h00.norm", "h01.attention", "h01.mlp",
        "h01.norm", "final.norm", "head.head",
    }  # fmt: skip
    # prompts of 20 tokens + 32 new ones are cut to the 24 positions the table holds
    assert not run["probe_failures"], run["probe_failures"]
    assert len(run["samples"]) == 4  # 2 prompts x greedy/temp1, at the last update
    assert run["config"]["model_shape"]["vocab_size"] == V
    assert run["config"]["model_shape"]["block_size"] == T


def test_hf_gpt2_groups_and_shape_come_from_its_modules_and_config(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=D, n_layer=2, n_head=2,
                                  bos_token_id=0, eos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    groups = layer_groups(model)
    assert groups["transformer.h.1.attn.c_attn.weight"] == ("h01", "attention")
    assert groups["transformer.h.1.mlp.c_fc.weight"] == ("h01", "mlp")
    assert groups["transformer.h.0.ln_2.bias"] == ("h00", "norm")
    assert groups["transformer.wpe.weight"] == ("embed", "embedding")
    assert groups["transformer.ln_f.weight"] == ("final", "norm")
    assert (vocab_size_of(model), block_size_of(model)) == (V, T)
    run = _train(model, tmp_path / "gpt2", steps=2)
    assert not run["probe_failures"] and len(run["samples"]) == 4


def test_nanogpt_shape_groups_its_own_layernorm_and_samples_through_its_tuple(tmp_path):
    torch.manual_seed(0)
    model = NanoGPT(NanoConfig())
    groups = layer_groups(model)
    assert groups["transformer.h.0.ln_1.weight"] == ("h00", "norm")  # its own LayerNorm class
    assert groups["transformer.h.1.attn.c_proj.weight"] == ("h01", "attention")
    assert groups["transformer.h.1.mlp.c_proj.weight"] == ("h01", "mlp")
    assert groups["transformer.ln_f.bias"] == ("final", "norm")
    assert groups["transformer.wte.weight"] == ("embed", "embedding")  # tied: the head's too
    assert (vocab_size_of(model), block_size_of(model)) == (V, T)

    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    prompts = {"a": torch.arange(20) % V}
    with SpikeMonitor(model, opt, tmp_path / "nano", total_steps=2, prompts=prompts,
                      shadow=False) as mon:  # fmt: skip
        for _ in range(2):
            ids = torch.randint(0, V, (2, 16), generator=gen)
            _, loss = model(ids, ids)
            monitored_update(mon, opt, loss)
    run = load_run(tmp_path / "nano")
    assert not run["probe_failures"], run["probe_failures"]
    assert len(run["samples"]) == 2
    assert "h01.mlp" in _layer_cols(run) and "final.norm" in _layer_cols(run)


def test_our_gpt_groups_exactly_as_the_trainer_names_them():
    model = GPT(ModelConfig("t", d_model=32, n_layer=2, n_head=2, block_size=16, vocab_size=50))
    groups = layer_groups(model)
    assert groups == {n: param_group_of(n) for n, _ in model.named_parameters()}


def test_layer_groups_and_shape_given_to_spike_monitor_override_the_inference(tmp_path):
    torch.manual_seed(0)
    model = EncoderLM()
    by_prefix = {"enc.layers": "blocks.all", "enc.layers.1.linear1": ("late", "ffn")}
    run = _train(model, tmp_path / "map", steps=2, layer_groups=by_prefix)
    cols = _layer_cols(run)
    assert {"blocks.all", "late.ffn", "embed.embedding", "head.head"} <= cols
    assert not any(c.startswith("h0") for c in cols)

    def by_name(name: str) -> str:
        return "emb.all" if name.startswith(("emb", "pos")) else "rest.all"

    run = _train(EncoderLM(), tmp_path / "fn", steps=2, layer_groups=by_name, block_size=20)
    assert _layer_cols(run) == {"emb.all", "rest.all"}
    assert run["config"]["model_shape"]["block_size"] == 20


def test_lockin_is_skipped_with_one_warning_when_the_vocabulary_is_unknown(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match="lock-in probe skipped.*vocab_size=N") as seen:
        mon = SpikeMonitor(model, opt, tmp_path / "mlp", shadow=False)
    assert sum("lock-in" in str(w.message) for w in seen) == 1
    with mon, warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing more during the run
        for _ in range(3):
            loss = model(torch.randn(8, 4)).square().mean()
            monitored_update(mon, opt, loss)
    run = load_run(tmp_path / "mlp")
    assert "lockin" not in run["summary"] and not run["probe_failures"]
    assert math.isfinite(run["metrics"]["loss"].iloc[-1])
    assert _layer_cols(run) == {"h00.mlp", "head.head"}  # one group per Linear, not one lump


def test_lockin_is_skipped_when_no_table_is_known_to_hold_positions(tmp_path):
    class TwoTables(EncoderLM):  # a third table (segments): which one is positions?
        def __init__(self) -> None:
            super().__init__()
            self.seg = nn.Embedding(3, D)

    model = TwoTables()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match="block_size=N"):
        SpikeMonitor(model, opt, tmp_path / "two", shadow=False).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SpikeMonitor(model, opt, tmp_path / "given", shadow=False, block_size=T).close()


@pytest.mark.parametrize("bad", [("blocks/0", "attn"), ("h0", ""), ("a", "b", "c"), 3, ".mlp"])
def test_a_bad_layer_group_is_one_line_at_construction(tmp_path, bad):
    from andrea_diag.errors import UserError

    model = EncoderLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(UserError, match="layer_groups gives parameter"):
        SpikeMonitor(model, opt, tmp_path / "run", layer_groups=lambda name: bad)
