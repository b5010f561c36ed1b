"""Model presets: the shapes the seeds name, exact parameter counts, and the tiny sibling."""

from __future__ import annotations

import pytest
import torch

from andrea_diag.config import MODEL_PRESETS, VOCAB_SIZE, RunConfig
from andrea_diag.errors import UserError
from andrea_diag.model import GPT, KVCache, param_group_of


@pytest.mark.parametrize(
    ("name", "width", "layers", "heads"), [("12m", 384, 6, 6), ("120m", 768, 12, 12)]
)
def test_presets_have_the_seed_widths_and_layer_counts(
    name: str, width: int, layers: int, heads: int
) -> None:
    cfg = MODEL_PRESETS[name]
    assert (cfg.d_model, cfg.n_layer, cfg.n_head, cfg.vocab_size) == (width, layers, heads, 8449)
    model = GPT(cfg)
    assert len(model.h) == layers
    assert model.h[0].attn.qkv.weight.shape == (3 * width, width)
    assert model.lm_head.weight.shape == (VOCAB_SIZE, width)


@pytest.mark.parametrize("name", list(MODEL_PRESETS))
def test_reported_param_count_equals_the_model(name: str) -> None:
    cfg = MODEL_PRESETS[name]
    model = GPT(cfg)
    assert cfg.n_params() == sum(p.numel() for p in model.parameters())
    assert cfg.n_tensors() == len(list(model.parameters()))


def test_param_counts_match_the_h200_baseline_gradient_sets() -> None:
    # ../shared/anchors/h200-torch-baselines.jsonl: 17,529,600 / 77 and 98,820,096 / 149
    assert (MODEL_PRESETS["12m"].n_params(), MODEL_PRESETS["12m"].n_tensors()) == (17529600, 77)
    assert (MODEL_PRESETS["120m"].n_params(), MODEL_PRESETS["120m"].n_tensors()) == (98820096, 149)


def test_tiny_forward_backward_runs_and_groups_every_parameter() -> None:
    model = GPT(MODEL_PRESETS["tiny"])
    x = torch.randint(0, VOCAB_SIZE, (2, 16))
    logits = model(x)
    assert logits.shape == (2, 16, VOCAB_SIZE)
    logits.float().logsumexp(-1).mean().backward()
    kinds = {param_group_of(n)[1] for n, _ in model.named_parameters()}
    assert kinds == {"embedding", "attention", "mlp", "norm", "head"}


def test_kv_cached_forward_gives_the_full_forward_logits_at_every_position() -> None:
    """Prefill then one token per call: the logits of ``model(idx)``, position by position."""
    torch.manual_seed(0)
    model = GPT(MODEL_PRESETS["tiny"]).eval()
    idx = torch.randint(0, VOCAB_SIZE, (3, 12))
    with torch.no_grad():
        want = model(idx)  # (3, 12, vocab)
        cache = KVCache(len(model.h))
        got = [model(idx[:, :8], cache)] + [model(idx[:, t : t + 1], cache) for t in range(8, 12)]
        last = model.next_logits(idx[:, :12])  # head on the last position only
    assert cache.pos == 12 and all(kv is not None and kv[0].size(2) == 12 for kv in cache.kv)
    assert torch.allclose(torch.cat(got, dim=1), want, atol=1e-5, rtol=1e-5)
    assert torch.allclose(last, want[:, -1], atol=1e-5, rtol=1e-5)


def test_kv_cache_refuses_a_multi_token_append_and_the_block_overflow() -> None:
    model = GPT(MODEL_PRESETS["tiny"]).eval()
    cache = KVCache(len(model.h))
    with torch.no_grad():
        model(torch.zeros(1, 126, dtype=torch.long), cache)
        with pytest.raises(ValueError, match="one new position"):
            model(torch.zeros(1, 2, dtype=torch.long), cache)
        for _ in range(2):  # positions 126 and 127: the block's last
            model(torch.zeros(1, 1, dtype=torch.long), cache)
        with pytest.raises(ValueError, match="exceeds block size"):
            model(torch.zeros(1, 1, dtype=torch.long), cache)


def test_flops_per_token_counts_every_weight_matmul_and_no_embedding_lookup() -> None:
    # torch's own FlopCounterMode over a forward + backward of the tiny model counts the weight
    # matmuls (the head included; the two embedding tables are lookups, not matmuls)
    from torch.utils.flop_counter import FlopCounterMode

    cfg, batch, seq = MODEL_PRESETS["tiny"], 2, 64
    model = GPT(cfg)
    x = torch.randint(0, cfg.vocab_size, (batch, seq))
    with FlopCounterMode(display=False) as counter:
        model(x).float().logsumexp(-1).sum().backward()
    counted = counter.get_total_flops() / (batch * seq)
    if not any("attention" in str(op) for op in counter.get_flop_counts()["Global"]):
        counted += 12 * cfg.n_layer * cfg.d_model * seq  # the counter missed attention (CPU)
    # biases and LayerNorm (0.3% of the tiny model's weights) are in the formula's 6N only
    assert cfg.flops_per_token(seq) == pytest.approx(counted, rel=0.005)


def test_run_config_resolves_defaults_and_rejects_bad_values() -> None:
    cfg = RunConfig(size="tiny").resolve()
    # tiny has its own lr (the README's first run, issue 24); other sizes take the recipe's
    assert cfg.lr == 2e-3 and cfg.steps and cfg.micro_batch and cfg.accum
    assert RunConfig(size="12m").resolve().lr == 3e-4
    assert cfg.to_dict()["effective_batch"]["examples"] == cfg.micro_batch * cfg.accum
    assert RunConfig(size="tiny", lr=1e-2).resolve().lr == 1e-2
    for bad in (
        RunConfig(size="huge"),
        RunConfig(recipe="v3"),
        RunConfig(lr=-1.0),
        RunConfig(max_norm=0.0),
        RunConfig(steps=0),
        RunConfig(seq_len=4096),
        RunConfig(device="tpu"),
    ):
        with pytest.raises(UserError):
            bad.resolve()


def test_an_unknown_clip_mode_is_refused_by_the_clipper_registry_in_one_line() -> None:
    # the config does not know the modes (that would import torch); the registry refuses it
    from andrea_diag.clip.modes import make_clipper

    with pytest.raises(UserError, match="unknown clip mode 'sometimes'"):
        make_clipper("sometimes")


def test_importing_the_config_imports_no_torch_and_nothing_of_the_clip_package() -> None:
    import subprocess
    import sys

    # the config is a leaf: clip modes are checked by their registry, where they are used
    code = "import andrea_diag.config, sys; assert 'torch' not in sys.modules, 'torch'; " \
        "assert 'andrea_diag.clip' not in sys.modules, 'clip'"  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-500:]


def test_every_preset_carries_its_run_defaults_and_120m_alone_defaults_the_shadow_off() -> None:
    from andrea_diag.config import PRESETS, ProbeConfig

    for name, preset in PRESETS.items():
        cfg = RunConfig(size=name).resolve()
        assert (cfg.steps, cfg.micro_batch, cfg.accum, cfg.seq_len) == (
            preset.steps, preset.micro_batch, preset.accum, preset.seq_len,
        )  # fmt: skip
        assert cfg.probes.shadow is preset.shadow
    assert [n for n, p in PRESETS.items() if not p.shadow] == ["120m"]  # behaviour kept
    assert ProbeConfig().resolve(steps=None).shadow is True  # no size (SpikeMonitor): on


def test_v2_recipe_is_adamw_with_decay_and_warmup() -> None:
    cfg = RunConfig(recipe="v2").resolve().recipe_cfg
    assert (cfg.optimizer, cfg.weight_decay) == ("adamw", 0.1) and cfg.warmup_updates > 0
    v1 = RunConfig(recipe="v1").resolve().recipe_cfg
    assert (v1.optimizer, v1.weight_decay, v1.warmup_updates) == ("adam", 0.0, 0)


def test_ladder_rungs_have_the_stated_shapes_and_counts_in_increasing_order() -> None:
    # the counts config.py states for the capacity ladder (the model itself is checked above)
    want = {"12m": 17529600, "30m": 34396160, "60m": 60706560, "120m": 98820096}
    assert {n: MODEL_PRESETS[n].n_params() for n in want} == want
    shapes = {n: (MODEL_PRESETS[n].d_model, MODEL_PRESETS[n].n_layer) for n in ("30m", "60m")}
    assert shapes == {"30m": (512, 8), "60m": (640, 10)}
    assert MODEL_PRESETS["tiny"].n_params() < MODEL_PRESETS["tiny2"].n_params() == 1970208
