"""Lock-in detection: does the model's text collapse onto one token after it had learned?

**Sampling** is the page's illustration and the verdict's "repetitive" test, not the lock-in
evidence (that is the held-out distribution, ``train/evaluation.py``). Every ``every`` updates
(``cfg.lockin_every``; by default the run's length, so once, at the last update: a sample event
costs a few decoding passes, 5-10% of every update on the GPU at the old cadence of 8 a run,
issue 20), at the run's last update (``total_steps``) and, if that was missed, once more at
``close()``, the probe continues fixed
prompts (one per source, ~16 tokens) for ``n_new`` (32) tokens, greedily and at temperature 1
with a generator seeded from ``(seed, update)``, so samples are reproducible and the training
RNG is untouched. All prompts and both modes run as one batch ``(2·n_sources, T)`` per token,
under ``torch.no_grad()`` and ``model.eval()`` (each module's own mode restored after: a part
the user keeps in eval mode stays so). Our GPT decodes itself (``GPT.generate_batch``,
KV-cached); any other model is called on the whole context for every token. Prompts of
different lengths are cut to the shortest (keeping their last tokens). Each sample becomes a
``samples.jsonl`` row: ``update, source, mode, text, distinct_1/2/3, longest_run,
top_token_share, max_logit, mean_entropy`` over the generated tokens only:

- ``distinct_n``: unique n-grams / n-grams (1.0 = no repetition);
- ``longest_run``: the longest stretch of one token repeated back to back;
- ``top_token_share``: count of the most frequent token / ``n_new``;
- ``max_logit``: the largest logit seen while generating; ``mean_entropy``: mean next-token
  entropy (nats, temperature 1).

Metric columns at sampling updates: ``lockin/top_token_share`` (max over sources, greedy),
``lockin/distinct_1`` (min over sources, greedy), ``lockin/mean_entropy`` (mean, greedy).

**Verdict** at ``close()``: :func:`andrea_diag.probes.verdict.run_verdict`, where every verdict
(``healthy``, ``never-learned``, ``diverged``, ``locked-in``, ``repetitive-throughout``,
``non-finite``, ``still-learning``), its thresholds and their precedence are defined. It judges
the held-out ``eval_loss`` and distribution columns of the run's ``metrics.jsonl`` when the run
evaluated, else the training losses this probe kept, plus these samples; ``summary["lockin"]``
holds ``verdict``, ``collapse``, ``reasons`` and the numbers. :func:`judge_tables` gives the same
verdict from a run directory's tables (``andrea-diag report`` re-judges old runs with it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch

from andrea_diag import metrics
from andrea_diag.model import GPT, decode_batch
from andrea_diag.probes.base import ProbeState, UpdateContext
from andrea_diag.probes.shape import block_size_of, vocab_size_of
from andrea_diag.probes.verdict import DIST_COLUMNS, THRESHOLDS, run_verdict, text_stats
from andrea_diag.record import read_jsonl


def _last_logits(model: torch.nn.Module, idx: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, vocab) logits of the last position, for a model that is not ours.

    The model is called as is; its output may be logits, have ``.logits`` (Hugging Face) or be
    a tuple whose first item is the logits.
    """
    out = model(idx.contiguous())  # a slice of the context: a model may .view() it
    if hasattr(out, "logits"):
        out = out.logits
    elif isinstance(out, (tuple, list)):
        out = out[0]
    return out[:, -1]  # (B, vocab)


# A model class may set this attribute to True to say that its ``generate_batch(prompts, n_new,
# temperatures, generator)`` follows :meth:`andrea_diag.model.GPT.generate_batch`. A method of
# that name alone says nothing: transformers 5 models have one with another signature.
DECODES_ITSELF = "andrea_diag_generate_batch"


def decodes_itself(model: torch.nn.Module) -> bool:
    """Whether the lock-in probe may call ``model.generate_batch`` (ours, or declared so)."""
    return isinstance(model, GPT) or getattr(model, DECODES_ITSELF, False) is True


@torch.no_grad()
def sample_batch(
    model: torch.nn.Module,
    prompts: torch.Tensor,
    n_new: int,
    temperatures: Sequence[float],
    generator: torch.Generator,
    block_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Continue every prompt row (B, T) under each temperature (0 = greedy), in one batch.

    Returns (tokens (B·n_t, n_new), max_logit (B·n_t,), mean_entropy (B·n_t,)); rows are
    ordered temperature-major: all prompts at temperatures[0], then at temperatures[1] ...

    The toolkit's own GPT (or a model that declares :data:`DECODES_ITSELF`) decodes itself,
    with its KV cache; any other model is re-run on its whole (block-limited) context for every
    new token, which is slower but needs nothing from it but ``model(idx)``.
    ``block_size``: the position limit when the caller knows it (else read from the model).
    """
    if decodes_itself(model):
        return model.generate_batch(prompts, n_new, temperatures, generator)
    limit = block_size or block_size_of(model)

    def step(idx: torch.Tensor) -> torch.Tensor:
        return _last_logits(model, idx if limit is None else idx[:, -limit:])  # (R, vocab)

    return decode_batch(step, prompts, n_new, temperatures, generator)


def restore_modes(model: torch.nn.Module, modes: list[tuple[torch.nn.Module, bool]]) -> None:
    """Every module back in the train/eval mode ``modes`` holds for it: ``model.train(True)``
    alone also set the submodules the user keeps in eval mode (a frozen backbone, a BatchNorm
    or dropout turned off) to train mode, which changed the rest of the user's training."""
    model.train(modes[0][1])  # the model's own train() first: an override of it still runs
    for module, mode in modes:
        module.training = mode


class LockInProbe(ProbeState):
    """Periodic batched samples + the loss trajectory -> lock-in verdict at close."""

    name = "lockin"
    columns: ClassVar[tuple[metrics.Column, ...]] = (
        metrics.LOCKIN_TOP_TOKEN_SHARE, metrics.LOCKIN_DISTINCT_1, metrics.LOCKIN_MEAN_ENTROPY,
    )  # fmt: skip
    summary_key = "lockin"
    transient = ("model", "tokenizer", "recorder")  # the run's own, passed in again
    # samples the weights of its own update: the pipelined loop steps again only after it
    pipeline_safe = True

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
        block_size: int | None = None,
    ) -> None:
        """``vocab_size``/``block_size``: the model's, when the caller knows them (else read
        from the model: :func:`andrea_diag.probes.shape.vocab_size_of` and ``block_size_of``)."""
        self.model = model
        self.unigram_entropy = unigram_entropy
        self.prompts = {
            k: torch.as_tensor(v).reshape(-1).long() for k, v in (prompts or {}).items()
        }
        self.prompts = {k: v for k, v in self.prompts.items() if v.numel()}
        self.tokenizer = tokenizer
        self.every, self.total_steps = max(1, int(every)), total_steps
        self.n_new, self.seed = n_new, seed
        self.vocab_size = vocab_size or vocab_size_of(model)
        self.block_size = block_size or block_size_of(model)
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
        limit = self.block_size
        keep = min(v.numel() for v in self.prompts.values())
        if limit is not None:
            keep = max(1, min(keep, limit - self.n_new))
        prompts = torch.stack([self.prompts[n][-keep:] for n in names]).to(device)  # (S, T)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + update)
        modes = [(m, m.training) for m in self.model.modules()]
        self.model.eval()
        try:
            toks, max_logit, ent = sample_batch(
                self.model, prompts, self.n_new, (0.0, 1.0), gen, block_size=limit
            )
        finally:
            restore_modes(self.model, modes)
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
        """Sample the final state, then ``{"lockin": run_verdict(...) + sampling facts}``."""
        if self._closed is not None:
            return self._closed
        if self.updates and self.updates[-1] not in self._sampled_at:
            self.sample_now(self.updates[-1])  # the final state is what a reader samples
        if self.vocab_size is None:
            verdict = {"verdict": "insufficient-data", "collapse": False,
                       "reasons": ["unknown vocabulary size"]}  # fmt: skip
        else:
            verdict = run_verdict(
                self.updates,
                self.losses,
                self.samples,
                self.vocab_size,
                thresholds=self.thresholds,
                unigram_entropy=self.unigram_entropy,
                **_run_record(run_dir),
            )
        if not self.prompts:
            verdict["reasons"].append("no prompts: verdict from the loss trajectory only")
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


def _run_record(run_dir: Path) -> dict[str, Any]:
    """:func:`record_inputs` of the run's ``metrics.jsonl`` (complete at close: every row is
    flushed). The held-out evaluation runs after the probes within an update, so its columns
    reach the verdict through the metrics file, as does the loop's ``nonfinite`` flag."""
    return record_inputs(read_jsonl(Path(run_dir) / "metrics.jsonl"))


def record_inputs(df: pd.DataFrame) -> dict[str, Any]:
    """The verdict's inputs from a metrics table: ``eval_updates``, ``eval_losses``, ``eval_dist``
    (:data:`DIST_COLUMNS` -> values, absent columns left out) and ``nonfinite_updates``.

    A loop without these columns (a user's own, a test, a run recorded before them) gives no
    evaluations, no distribution statistics and zero.
    """
    out: dict[str, Any] = {"eval_updates": [], "eval_losses": [], "eval_dist": {},
                           "nonfinite_updates": 0}  # fmt: skip
    if df.empty or "update" not in df:
        return out
    if "nonfinite" in df:
        out["nonfinite_updates"] = int(df["nonfinite"].fillna(False).astype(bool).sum())
    elif "applied" in df:  # the monitor records only whether the update was applied
        out["nonfinite_updates"] = int(df["applied"].eq(False).sum())
    if "eval_loss" not in df:
        return out
    ev = df[df["eval_loss"].notna()]
    out["eval_updates"] = [int(u) for u in ev["update"]]
    out["eval_losses"] = [float(v) for v in ev["eval_loss"]]
    out["eval_dist"] = {
        c: [None if pd.isna(v) else float(v) for v in ev[c]] for c in DIST_COLUMNS if c in ev
    }
    return out


def judge_tables(
    metrics: pd.DataFrame,
    samples: pd.DataFrame | Sequence[Mapping[str, Any]],
    vocab_size: int,
    unigram_entropy: float | None = None,
) -> dict[str, Any]:
    """The verdict of a recorded run, from its tables alone (``andrea-diag report`` re-judges
    old run directories with the current code): the training loss, the evaluations and the
    greedy samples, with today's :data:`THRESHOLDS`."""
    m = metrics if "update" in metrics and "loss" in metrics else pd.DataFrame()
    losses = [None if pd.isna(v) else float(v) for v in m["loss"]] if len(m) else []
    rows = samples.to_dict("records") if isinstance(samples, pd.DataFrame) else list(samples)
    return run_verdict(
        [int(u) for u in m["update"]] if len(m) else [],
        losses,
        rows,
        vocab_size,
        unigram_entropy=unigram_entropy,
        **record_inputs(metrics),
    )
