"""Lock-in: fires on a learned-then-repetitive model, not on a healthy or never-learned one."""

from __future__ import annotations

import contextlib
import json
import math

import pytest
import torch

from andrea_diag.config import MODEL_PRESETS, ModelConfig
from andrea_diag.data.heldout import EvalSet
from andrea_diag.model import GPT
from andrea_diag.probes.base import UpdateContext
from andrea_diag.probes.lockin import LockInProbe, sample_batch
from andrea_diag.probes.verdict import run_verdict, text_stats
from andrea_diag.record import Recorder
from andrea_diag.train.evaluation import HeldOutEvaluator

V = 32


def _successor_gpt(sharpness: float = 1.0) -> GPT:
    """A tiny GPT whose next token is (t + 1) mod V: diverse text, one clear prediction
    (``sharpness`` scales its logits: 0.1 gives p(t + 1) ~ 0.5, entropy ~2 nats)."""
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
        model.lm_head.weight.copy_(sharpness * torch.roll(x, 1, dims=0))  # row t+1: LN(e_t)
    return model


def _force_repetition(model: GPT, token: int = 7) -> None:
    """One token's logit dominates whatever the context (the degenerate attractor)."""
    with torch.no_grad():
        u = torch.ones(V) / math.sqrt(V)  # orthogonal to every centred LN output
        model.ln_f.weight.zero_()
        model.ln_f.bias.copy_(u)
        model.lm_head.weight[token] += 10 * u


def _eval_set(tokens: torch.Tensor) -> EvalSet:
    """Held-out sequences (S=2, K=2, T+1=17) for the real evaluator."""
    return EvalSet(tokens.reshape(2, 2, 17), torch.zeros(2, 2, dtype=torch.long), ("a", "b"))


SUCCESSOR_TEXT = _eval_set(torch.arange(68) % V)  # what the successor model predicts well
ONE_TOKEN_TEXT = _eval_set(torch.full((68,), 7))  # what the forced model predicts well


def _run(tmp_path, losses, force_at=None, evalset=SUCCESSOR_TEXT):
    """Train-shaped loop: the probe after every update, the real held-out evaluator every 2."""
    model = _successor_gpt(sharpness=0.1)  # not certain: a collapse can lower its entropy
    prompts = {"a": torch.arange(16) % V, "b": (torch.arange(20) * 3) % V}
    probe = LockInProbe(model, prompts, every=10, total_steps=len(losses), n_new=32, seed=0)
    ev = HeldOutEvaluator(evalset, 2, len(losses), torch.device("cpu"), contextlib.nullcontext)
    rec = Recorder(tmp_path / "run", {"kind": "test"})
    model.train()
    for u, loss in enumerate(losses, start=1):
        if force_at == u:
            _force_repetition(model)
        row = {"update": u, "loss": loss, "nonfinite": False}
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
        row |= ev.maybe_evaluate(u, model)
        rec.log(row)
    rec.flush()
    out = probe.close(tmp_path / "run")["lockin"]
    rec.close(out)
    assert model.training  # train mode restored after sampling and evaluating
    samples = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    return out, samples


def _learned(n=40):
    """Loss drops from ln V to ~1.5 over the first half (the good phase)."""
    return [math.log(8449) - (math.log(8449) - 1.5) * min(1.0, u / 20) for u in range(1, n + 1)]


def test_lockin_fires_on_a_model_forced_into_repetition_after_learning(tmp_path):
    out, samples = _run(tmp_path, _learned(), force_at=35)
    assert out["verdict"] == "locked-in", out["reasons"]
    assert out["sample_updates"] == [10, 20, 30, 40]
    last = [s for s in samples if s["update"] == 40]
    assert {(s["source"], s["mode"]) for s in last} == {
        ("a", "greedy"),
        ("a", "temp1"),
        ("b", "greedy"),
        ("b", "temp1"),
    }
    assert all(s["top_token_share"] > 0.9 and s["longest_run"] >= 30 for s in last)
    # the evidence: the held-out distribution, at the evaluations after the forcing
    assert out["collapsed_evals"] == 3 and out["final_argmax_share"] == 1.0
    assert out["best_argmax_share"] < 0.1 and out["final_entropy"] < out["best_entropy"] - 1
    assert "held-out distribution collapsed at the last 3 evaluations" in out["reasons"][1]


def test_lockin_does_not_fire_on_a_healthy_model(tmp_path):
    out, samples = _run(tmp_path, _learned())
    assert out["verdict"] == "healthy", out["reasons"]
    greedy = [s for s in samples if s["mode"] == "greedy"]
    assert all(s["distinct_1"] == 1.0 for s in greedy)  # successor text never repeats


def test_a_model_repetitive_from_its_first_sample_is_named_not_called_healthy(tmp_path):
    """The loss learned (its held-out text is the forced token), the text never was diverse:
    no collapse against its own best phase, so not a lock-in, and not healthy either."""
    out, _ = _run(tmp_path, _learned(), force_at=1, evalset=ONE_TOKEN_TEXT)
    assert out["verdict"] == "repetitive-throughout" and out["collapse"] is False
    assert out["final_score"] > 0.9 and out["collapsed_evals"] == 0


def test_repetitive_model_whose_loss_stayed_near_uniform_never_learned(tmp_path):
    stuck = [math.log(8449) - 0.01 * (u % 3) for u in range(1, 41)]
    out, _ = _run(tmp_path, stuck, force_at=1)
    assert out["verdict"] == "never-learned"


def test_the_evaluator_measures_the_distribution_on_every_held_out_position():
    model = _successor_gpt(sharpness=0.1)
    ev = HeldOutEvaluator(SUCCESSOR_TEXT, 1, 1, torch.device("cpu"), contextlib.nullcontext)
    row = ev.evaluate(model)
    assert row["eval_argmax_share_a"] == pytest.approx(2 / 32)  # 32 positions, 16 tokens twice
    assert 0.3 < row["eval_top1_prob"] < 0.7 and row["eval_entropy"] > 1.0
    before = row["eval_loss"]
    _force_repetition(model)
    row = ev.evaluate(model)
    assert row["eval_argmax_share"] == row["eval_argmax_share_b"] == 1.0
    assert row["eval_loss"] > before + 5  # the successor targets are now wrong everywhere
    assert row["eval_top1_prob"] > 0.99 and row["eval_entropy"] < 0.1
    assert set(row) == {f"eval_{k}{s}" for k in ("loss", "argmax_share", "entropy", "top1_prob")
                        for s in ("", "_a", "_b")}  # fmt: skip


def test_verdict_needs_enough_history():
    assert run_verdict([1, 2], [9.0, 9.0], [], 8449)["verdict"] == "insufficient-data"


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


def _greedy_by_full_forward(model: torch.nn.Module, prompts: torch.Tensor, n_new: int, limit: int):
    """Reference decoder: re-run the whole (block-limited) context for every token, no cache."""
    idx, logits_seen = prompts, []
    with torch.no_grad():
        for _ in range(n_new):
            logits = model(idx[:, -limit:])[:, -1].float()  # (B, vocab)
            logits_seen.append(logits)
            idx = torch.cat([idx, logits.argmax(-1, keepdim=True)], dim=1)
    logits = torch.stack(logits_seen, dim=1)  # (B, n_new, vocab)
    logp = torch.log_softmax(logits, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1).mean(-1)  # (B,)
    return idx[:, prompts.size(1) :], logits.amax((1, 2)), entropy


@pytest.mark.parametrize("prompt_len", [16, 120])  # 120 + 16 > block 128: the sliding window
def test_gpt_cached_greedy_generation_equals_full_reforward_decoding(prompt_len):
    torch.manual_seed(0)
    model = GPT(MODEL_PRESETS["tiny"]).eval()
    with torch.no_grad():  # sharper logits than the 0.02 init, so greedy picks are clear-cut
        model.lm_head.weight.mul_(50)
    prompts = torch.randint(0, model.cfg.vocab_size, (3, prompt_len))
    gen = torch.Generator().manual_seed(0)
    toks, max_logit, entropy = model.generate_batch(prompts, 16, (0.0,), gen)
    want_toks, want_max, want_ent = _greedy_by_full_forward(model, prompts, 16, 128)
    assert toks.shape == (3, 16) and len(set(toks.flatten().tolist())) > 3  # not a constant
    assert torch.equal(toks, want_toks)
    assert torch.allclose(max_logit, want_max, atol=1e-5, rtol=1e-5)
    assert torch.allclose(entropy, want_ent, atol=1e-5, rtol=1e-5)


class _ForeignSuccessor(torch.nn.Module):
    """Not a GPT: no generate_batch, a tuple output, a 20-token window in ``config``.

    Predicts (last token + 1) mod V and records the context lengths it was called with.
    """

    def __init__(self) -> None:
        super().__init__()
        self.config = type("Cfg", (), {"n_positions": 20, "vocab_size": V})()
        self.scale = torch.nn.Parameter(torch.tensor(10.0))
        self.seen_lengths: list[int] = []

    def forward(self, idx: torch.Tensor) -> tuple[torch.Tensor]:
        self.seen_lengths.append(idx.size(1))
        nxt = (idx + 1) % V  # (B, T)
        return (self.scale * torch.nn.functional.one_hot(nxt, V).float(),)  # (B, T, V)


def test_lockin_probe_samples_a_foreign_model_through_plain_calls(tmp_path):
    model = _ForeignSuccessor()
    probe = LockInProbe(model, {"a": torch.arange(16), "b": torch.arange(3, 19)}, n_new=8)
    assert not hasattr(model, "generate_batch") and probe.vocab_size == V
    rows = probe.sample_now(1)
    assert [(r["source"], r["mode"]) for r in rows] == [
        ("a", "greedy"),
        ("b", "greedy"),
        ("a", "temp1"),
        ("b", "temp1"),
    ]
    # prompts cut to 20 - 8 = 12 tokens, so the last prompt token is the same; greedy continues
    assert rows[0]["tokens"] == [(15 + i) % V for i in range(1, 9)]
    assert rows[1]["tokens"] == [(18 + i) % V for i in range(1, 9)]
    assert len(model.seen_lengths) == 8 and max(model.seen_lengths) <= 20  # one call per token
    assert all(r["max_logit"] == 10.0 for r in rows)
    assert probe.close(tmp_path)["lockin"]["n_sample_events"] == 1


def test_foreign_fallback_decodes_like_the_gpt_it_wraps():
    """The uncached fallback and GPT.generate_batch agree on the same weights and seed."""

    class Wrapped(torch.nn.Module):  # hides GPT.generate_batch from the probe
        def __init__(self, gpt: GPT) -> None:
            super().__init__()
            self.gpt = gpt

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            return self.gpt(idx)

    model = _successor_gpt().eval()
    prompts = torch.stack([torch.arange(10), torch.arange(5, 15)])
    own = sample_batch(model, prompts, 12, (0.0, 1.0), torch.Generator().manual_seed(3))
    fallback = sample_batch(
        Wrapped(model), prompts, 12, (0.0, 1.0), torch.Generator().manual_seed(3)
    )
    assert torch.equal(own[0], fallback[0])  # greedy and temperature-1 tokens alike
    assert torch.allclose(own[1], fallback[1]) and torch.allclose(own[2], fallback[2])


def test_a_model_stuck_at_the_unigram_loss_never_learned_even_if_it_collapses():
    """6.1 nats is far below 0.8 ln V, but a unigram model (H1 = 6.2) has not used context."""
    ups = list(range(1, 41))
    losses = [8.5 - 2.4 * min(1.0, u / 10) for u in ups]  # drops to 6.1 and stays
    ev_ups = list(range(4, 41, 4))
    ev = {"eval_updates": ev_ups, "eval_losses": [6.1 if u < 28 else 6.5 for u in ev_ups],
          "eval_dist": {"eval_argmax_share": [0.1 if u < 28 else 0.9 for u in ev_ups],
                        "eval_entropy": [6.0 if u < 28 else 1.0 for u in ev_ups]}}  # fmt: skip
    assert run_verdict(ups, losses, [], 8449, **ev)["verdict"] == "locked-in"
    out = run_verdict(ups, losses, [], 8449, unigram_entropy=6.2, **ev)
    assert out["verdict"] == "never-learned"
    assert out["learned_level"] == 6.2 - 0.5


def test_a_generate_batch_of_another_signature_is_not_called_but_a_declared_one_is():
    """transformers 5 models carry their own ``generate_batch``: having a method of that name
    must not route the probe to it; the ``andrea_diag_generate_batch`` marker does."""

    class Foreign(_ForeignSuccessor):
        def generate_batch(self, inputs, generation_config=None, **kwargs):  # HF's shape
            raise AssertionError("the probe called a foreign generate_batch")

    prompts = torch.stack([torch.arange(10), torch.arange(5, 15)])
    toks, _, _ = sample_batch(Foreign(), prompts, 4, (0.0,), torch.Generator().manual_seed(0))
    assert toks[0].tolist() == [10, 11, 12, 13]  # the generic path: (last + 1) mod V

    class Declared(_ForeignSuccessor):
        andrea_diag_generate_batch = True

        def generate_batch(self, prompts, n_new, temperatures, generator):
            rows = prompts.size(0) * len(temperatures)
            return torch.full((rows, n_new), 3), torch.zeros(rows), torch.zeros(rows)

    toks, _, _ = sample_batch(Declared(), prompts, 4, (0.0,), torch.Generator().manual_seed(0))
    assert toks.tolist() == [[3] * 4, [3] * 4]
