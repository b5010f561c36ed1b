"""Lock-in detection: does the model's text collapse onto one token after it had learned?

**Sampling.** Every ``every`` updates (``cfg.lockin_every``), at the run's last update
(``total_steps``) and, if that was missed, once more at ``close()``, the probe continues fixed
prompts (one per source, ~16 tokens) for ``n_new`` (32) tokens, greedily and at temperature 1
with a generator seeded from ``(seed, update)``, so samples are reproducible and the training
RNG is untouched. All prompts and both modes run as one batch ``(2·n_sources, T)`` per token,
under ``torch.no_grad()`` and ``model.eval()`` (train mode restored after). Our GPT decodes
itself (``GPT.generate_batch``, KV-cached); any other model is called on the whole context for
every token. Prompts of different lengths are cut to the shortest (keeping their last tokens).
Each sample becomes a ``samples.jsonl`` row: ``update, source, mode, text, distinct_1/2/3,
longest_run, top_token_share, max_logit, mean_entropy`` over the generated tokens only:

- ``distinct_n``: unique n-grams / n-grams (1.0 = no repetition);
- ``longest_run``: the longest stretch of one token repeated back to back;
- ``top_token_share``: count of the most frequent token / ``n_new``;
- ``max_logit``: the largest logit seen while generating; ``mean_entropy``: mean next-token
  entropy (nats, temperature 1).

Metric columns at sampling updates: ``lockin/top_token_share`` (max over sources, greedy),
``lockin/distinct_1`` (min over sources, greedy), ``lockin/mean_entropy`` (mean, greedy).

**Verdict** (:func:`lockin_verdict`, thresholds in :data:`THRESHOLDS` and in the summary):

1. ``insufficient-data``: fewer than ``min_losses`` (10) finite losses;
2. ``never-learned``: the smoothed loss (trailing median of 5) never reached
   ``learned_frac · ln V`` (0.8 · ln 8449 ≈ 7.23): a model that stayed near the uniform loss
   did not learn, however repetitive its text (the pilot's lr ≥ 3e-3 arms). When the data's
   unigram entropy H1 is known (the training loop passes it), the level is also capped at
   ``H1 - unigram_margin`` (0.5 nats): a unigram-level model greedily repeats the most frequent
   token by construction, so reaching H1 is not "learned" either;
3. otherwise the *good phase* starts at the first update the smoothed loss reached that level.
   ``insufficient-data`` when fewer than two sample events exist, or none at/after the good
   phase start;
4. ``locked-in``: the last sample event is at/after the good phase start, its repetition score
   (max over sources of the greedy ``top_token_share``) is ≥ ``top_share`` (0.5), and it rose
   by ≥ ``rise`` (0.2) over the lowest score of the earlier events (those in the good phase when
   there are any, else all earlier ones): "learned, then locked in";
5. ``healthy`` otherwise; ``repetitive`` (True when the last score is above ``top_share``
   without the rise, e.g. an early model that says "the the the" from the start) flags text
   that is repetitive but was never diverse in the good phase.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from andrea_diag.model import decode_batch
from andrea_diag.probes.base import ProbeState, UpdateContext
from andrea_diag.probes.verdict import THRESHOLDS, lockin_verdict, text_stats


def _last_logits(model: torch.nn.Module, idx: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, vocab) logits of the last position, for a model that is not ours.

    The model is called as is; its output may be logits, have ``.logits`` (Hugging Face) or be
    a tuple whose first item is the logits.
    """
    out = model(idx)
    if hasattr(out, "logits"):
        out = out.logits
    elif isinstance(out, (tuple, list)):
        out = out[0]
    return out[:, -1]  # (B, vocab)


def _block_size(model: torch.nn.Module) -> int | None:
    cfg = getattr(model, "cfg", None) or getattr(model, "config", None)
    for attr in ("block_size", "n_positions", "max_position_embeddings"):
        if cfg is not None and getattr(cfg, attr, None):
            return int(getattr(cfg, attr))
    return None


@torch.no_grad()
def sample_batch(
    model: torch.nn.Module,
    prompts: torch.Tensor,
    n_new: int,
    temperatures: Sequence[float],
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Continue every prompt row (B, T) under each temperature (0 = greedy), in one batch.

    Returns (tokens (B·n_t, n_new), max_logit (B·n_t,), mean_entropy (B·n_t,)); rows are
    ordered temperature-major: all prompts at temperatures[0], then at temperatures[1] ...

    A model with a ``generate_batch`` of this signature decodes itself (our GPT, with its KV
    cache); any other model is re-run on its whole (block-limited) context for every new token,
    which is slower but needs nothing from it but ``model(idx)``.
    """
    generate = getattr(model, "generate_batch", None)
    if callable(generate):
        return generate(prompts, n_new, temperatures, generator)
    limit = _block_size(model)

    def step(idx: torch.Tensor) -> torch.Tensor:
        return _last_logits(model, idx if limit is None else idx[:, -limit:])  # (R, vocab)

    return decode_batch(step, prompts, n_new, temperatures, generator)


def _vocab_size(model: torch.nn.Module) -> int | None:
    cfg = getattr(model, "cfg", None) or getattr(model, "config", None)
    v = getattr(cfg, "vocab_size", None) if cfg is not None else None
    if v:
        return int(v)
    get_out = getattr(model, "get_output_embeddings", None)
    head = get_out() if callable(get_out) else getattr(model, "lm_head", None)
    return int(head.weight.shape[0]) if head is not None and hasattr(head, "weight") else None


class LockInProbe(ProbeState):
    """Periodic batched samples + the loss trajectory -> lock-in verdict at close."""

    name = "lockin"
    summary_key = "lockin"
    transient = ("model", "tokenizer", "recorder")  # the run's own, passed in again

    def __init__(
        self,
        model: torch.nn.Module,
        prompts: Mapping[str, torch.Tensor] | None = None,
        tokenizer: Any = None,
        every: int = 30,
        total_steps: int | None = None,
        n_new: int = 32,
        seed: int = 0,
        vocab_size: int | None = None,
        thresholds: Mapping[str, float] | None = None,
        unigram_entropy: float | None = None,
    ) -> None:
        self.model = model
        self.unigram_entropy = unigram_entropy
        self.prompts = {
            k: torch.as_tensor(v).reshape(-1).long() for k, v in (prompts or {}).items()
        }
        self.prompts = {k: v for k, v in self.prompts.items() if v.numel()}
        self.tokenizer = tokenizer
        self.every, self.total_steps = max(1, int(every)), total_steps
        self.n_new, self.seed = n_new, seed
        self.vocab_size = vocab_size or _vocab_size(model)
        self.thresholds = {**THRESHOLDS, **(thresholds or {})}
        self.updates: list[int] = []
        self.losses: list[float] = []
        self.samples: list[dict[str, Any]] = []
        self._sampled_at: set[int] = set()
        self.recorder: Any = None
        self._closed: dict[str, Any] | None = None

    def _decode(self, toks: list[int]) -> str:
        if self.tokenizer is not None:
            try:
                return self.tokenizer.decode(toks)
            except Exception:  # a tokenizer that rejects ids must not kill the run
                pass
        return " ".join(map(str, toks))

    def sample_now(self, update: int) -> list[dict[str, Any]]:
        """Sample every prompt greedily and at temperature 1; record and return the rows."""
        if not self.prompts or update in self._sampled_at:
            return []
        self._sampled_at.add(update)
        names = list(self.prompts)
        device = next(self.model.parameters()).device
        limit = _block_size(self.model)
        keep = min(v.numel() for v in self.prompts.values())
        if limit is not None:
            keep = max(1, min(keep, limit - self.n_new))
        prompts = torch.stack([self.prompts[n][-keep:] for n in names]).to(device)  # (S, T)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + update)
        was_training = self.model.training
        self.model.eval()
        try:
            toks, max_logit, ent = sample_batch(self.model, prompts, self.n_new, (0.0, 1.0), gen)
        finally:
            self.model.train(was_training)
        toks_l, ml, me = toks.tolist(), max_logit.tolist(), ent.tolist()  # host sync
        rows = []
        for r, seq in enumerate(toks_l):
            mode = "greedy" if r < len(names) else "temp1"
            src = names[r % len(names)]
            row = {
                "update": update,
                "source": src,
                "mode": mode,
                "text": self._decode(seq),
                **text_stats(seq),
                "max_logit": ml[r],
                "mean_entropy": me[r],
                "tokens": seq,
            }
            rows.append(row)
            if self.recorder is not None:
                self.recorder.sample(row)
        self.samples.extend(rows)
        return rows

    def after_clip(self, ctx: UpdateContext) -> None:
        return None

    def after_step(self, ctx: UpdateContext) -> None:
        self.recorder = ctx.recorder
        loss = ctx.row.get("loss", ctx.loss)
        self.updates.append(ctx.update)
        self.losses.append(float(loss) if loss is not None else math.nan)
        due = ctx.update % self.every == 0 or ctx.update == self.total_steps
        if due and self.prompts:
            greedy = [r for r in self.sample_now(ctx.update) if r["mode"] == "greedy"]
            if greedy:
                ctx.row["lockin/top_token_share"] = max(r["top_token_share"] for r in greedy)
                ctx.row["lockin/distinct_1"] = min(r["distinct_1"] for r in greedy)
                ctx.row["lockin/mean_entropy"] = float(np.mean([r["mean_entropy"] for r in greedy]))

    def close(self, run_dir: Path, results: Mapping[str, Any] | None = None) -> dict[str, Any]:
        if self._closed is not None:
            return self._closed
        if self.updates and self.updates[-1] not in self._sampled_at:
            self.sample_now(self.updates[-1])  # the final state is what a reader samples
        if self.vocab_size is None:
            verdict = {"verdict": "insufficient-data", "reason": "unknown vocabulary size"}
        else:
            verdict = lockin_verdict(
                self.updates,
                self.losses,
                self.samples,
                self.vocab_size,
                self.thresholds,
                unigram_entropy=self.unigram_entropy,
            )
        if not self.prompts:
            verdict["reason"] = "no prompts: verdict from the loss trajectory only"
        self._closed = {
            "lockin": {
                **verdict,
                "n_sample_events": len(self._sampled_at),
                "sample_updates": sorted(self._sampled_at),
                "every": self.every,
                "n_new": self.n_new,
                "thresholds": self.thresholds,
            }
        }
        return self._closed
