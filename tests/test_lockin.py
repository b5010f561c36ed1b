"""Lock-in: fires on a learned-then-repetitive model, not on a healthy or never-learned one."""

from __future__ import annotations

import json
import math

import torch

from andrea_diag.config import ModelConfig
from andrea_diag.model import GPT
from andrea_diag.probes.base import UpdateContext
from andrea_diag.probes.lockin import LockInProbe, lockin_verdict, text_stats
from andrea_diag.record import Recorder

V = 32


def _successor_gpt() -> GPT:
    """A tiny GPT whose next token is (t + 1) mod V: diverse text, one clear prediction."""
    torch.manual_seed(0)
    model = GPT(ModelConfig("t", d_model=V, n_layer=1, n_head=2, block_size=64, vocab_size=V))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".proj." in name:  # blocks add nothing to the residual stream
                p.zero_()
        model.wpe.weight.zero_()
        model.wte.weight.copy_(torch.eye(V))
        model.ln_f.weight.fill_(1.0)
        model.ln_f.bias.zero_()
        x = model.ln_f(torch.eye(V))  # (V, V) LN of each one-hot
        model.lm_head.weight.copy_(torch.roll(x, 1, dims=0))  # row t+1 matches LN(e_t)
    return model


def _force_repetition(model: GPT, token: int = 7) -> None:
    """One token's logit dominates whatever the context (the degenerate attractor)."""
    with torch.no_grad():
        u = torch.ones(V) / math.sqrt(V)  # orthogonal to every centred LN output
        model.ln_f.weight.zero_()
        model.ln_f.bias.copy_(u)
        model.lm_head.weight[token] += 10 * u


def _run(tmp_path, losses, force_at=None):
    model = _successor_gpt()
    prompts = {"a": torch.arange(16) % V, "b": (torch.arange(20) * 3) % V}
    probe = LockInProbe(model, prompts, every=10, total_steps=len(losses), n_new=32, seed=0)
    rec = Recorder(tmp_path / "run", {"kind": "test"})
    model.train()
    for u, loss in enumerate(losses, start=1):
        if force_at == u:
            _force_repetition(model)
        row = {"update": u, "loss": loss}
        ctx = UpdateContext(
            u,
            model,
            None,
            [],
            [],
            loss,
            torch.zeros(0),
            torch.zeros(0),
            None,
            rec,
            row,  # type: ignore[arg-type]
        )
        probe.after_clip(ctx)
        probe.after_step(ctx)
    out = probe.close(tmp_path / "run")["lockin"]
    rec.close(out)
    assert model.training  # train mode restored after sampling
    samples = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    return out, samples


def _learned(n=40):
    """Loss drops from ln V to ~1.5 over the first half (the good phase)."""
    return [math.log(8449) - (math.log(8449) - 1.5) * min(1.0, u / 20) for u in range(1, n + 1)]


def test_lockin_fires_on_a_model_forced_into_repetition_after_learning(tmp_path):
    out, samples = _run(tmp_path, _learned(), force_at=35)
    assert out["verdict"] == "locked-in"
    assert out["sample_updates"] == [10, 20, 30, 40]
    last = [s for s in samples if s["update"] == 40]
    assert {(s["source"], s["mode"]) for s in last} == {
        ("a", "greedy"),
        ("a", "temp1"),
        ("b", "greedy"),
        ("b", "temp1"),
    }
    assert all(s["top_token_share"] > 0.9 and s["longest_run"] >= 30 for s in last)
    assert out["final_score"] > 0.9 and out["baseline_score"] < 0.1


def test_lockin_does_not_fire_on_a_healthy_model(tmp_path):
    out, samples = _run(tmp_path, _learned())
    assert out["verdict"] == "healthy"
    greedy = [s for s in samples if s["mode"] == "greedy"]
    assert all(s["distinct_1"] == 1.0 for s in greedy)  # successor text never repeats


def test_repetitive_model_whose_loss_stayed_near_uniform_never_learned(tmp_path):
    stuck = [math.log(8449) - 0.01 * (u % 3) for u in range(1, 41)]
    out, _ = _run(tmp_path, stuck, force_at=1)
    assert out["verdict"] == "never-learned"


def test_verdict_needs_enough_history():
    assert lockin_verdict([1, 2], [9.0, 9.0], [], 8449)["verdict"] == "insufficient-data"
    ups = list(range(1, 41))
    one_event = [{"update": 40, "mode": "greedy", "top_token_share": 1.0}]
    assert lockin_verdict(ups, _learned(), one_event, 8449)["verdict"] == "insufficient-data"


def test_text_stats_on_a_known_sequence():
    s = text_stats([1, 2, 2, 2, 3, 1, 2])
    assert s["distinct_1"] == 3 / 7 and s["longest_run"] == 3
    assert s["distinct_2"] == 4 / 6  # (1,2) and (2,2) each repeat
    assert s["top_token_share"] == 4 / 7


def test_sampling_leaves_the_global_rng_alone(tmp_path):
    model = _successor_gpt()
    probe = LockInProbe(model, {"a": torch.arange(16)}, every=1, n_new=8)
    state = torch.random.get_rng_state()
    rows = probe.sample_now(1)
    assert torch.equal(state, torch.random.get_rng_state())
    assert len(rows) == 2 and rows[0]["text"] == " ".join(str(t % V) for t in range(16, 24))


def test_cached_decoding_matches_the_full_forward():
    """The lock-in sampler's KV cache mirrors GPT.forward (guards against model.py drift)."""
    from andrea_diag.config import MODEL_PRESETS
    from andrea_diag.probes.lockin import _GPTCache

    torch.manual_seed(0)
    model = GPT(MODEL_PRESETS["tiny"]).eval()
    idx = torch.randint(0, 8449, (3, 12))
    with torch.no_grad():
        cache = _GPTCache(model)
        got = [cache.step(idx[:, :8])] + [cache.step(idx[:, t : t + 1]) for t in range(8, 12)]
        want = [model(idx[:, : t + 1])[:, -1] for t in range(7, 12)]
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w, atol=1e-5, rtol=1e-5)


def test_a_model_stuck_at_the_unigram_loss_never_learned_even_if_text_turns_repetitive():
    """6.1 nats is far below 0.8 ln V, but a unigram model (H1 = 6.2) has not used context."""
    ups = list(range(1, 41))
    losses = [8.5 - 2.4 * min(1.0, u / 10) for u in ups]  # drops to 6.1 and stays
    events = [
        {"update": 10, "mode": "greedy", "top_token_share": 0.2},
        {"update": 40, "mode": "greedy", "top_token_share": 0.9},
    ]
    assert lockin_verdict(ups, losses, events, 8449)["verdict"] == "locked-in"
    out = lockin_verdict(ups, losses, events, 8449, unigram_entropy=6.2)
    assert out["verdict"] == "never-learned"
    assert out["learned_level"] == 6.2 - 0.5
