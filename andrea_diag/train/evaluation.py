"""Held-out evaluation every N updates: the basis of every comparison between arms.

    ev = HeldOutEvaluator(eval_set(data.streams, seq_len, seed), every=24, steps=1200,
                          device=device, autocast=precision.autocast)
    row |= ev.maybe_evaluate(update, model)   # {} between evaluations

Columns on evaluation updates (absent otherwise): ``eval_loss_<source>`` (token-weighted mean
cross-entropy of that source's fixed held-out sequences) and ``eval_loss`` (their uniform mean:
a fixed mixture, so it does not move with the bandit). One forward pass of
``S × EVAL_SEQUENCES`` sequences, no gradient, one host sync per evaluation.

The same logits, over every position of the set, also give the *predictive distribution's*
shape, the lock-in verdict's evidence (probes/verdict.py), with no further forward pass:

- ``eval_argmax_share[_<source>]``: the share of positions whose argmax is the single most
  frequent predicted token (of that source; overall: of all positions together). A model that
  locked onto one token predicts it everywhere: the share goes to 1;
- ``eval_entropy[_<source>]``: the mean predictive entropy (nats, temperature 1);
- ``eval_top1_prob[_<source>]``: the mean probability of the argmax token.

Overall entropy and top-1 probability are the uniform mean over sources (every source has the
same number of positions, so it is also the mean over all positions).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from andrea_diag import metrics
from andrea_diag.data.heldout import EvalSet, eval_set, split_point
from andrea_diag.train.components import Evaluator


def build_evaluator(
    cfg: Any, data: Any, device: torch.device, precision: Any, recorder: Any
) -> Evaluator:
    """The run's evaluator (none when ``eval_every`` is 0); its eval set goes on record."""
    if not cfg.eval_every:
        return Evaluator()
    es = eval_set(data.streams, cfg.seq_len, cfg.seed)
    recorder.write(
        "eval_set.json",
        {
            "sources": list(es.sources),
            "offsets": {n: o.tolist() for n, o in zip(es.sources, es.offsets, strict=True)},
            "seq_len": cfg.seq_len,
            "heldout_from": {n: split_point(data.streams[n].numel()) for n in es.sources},
        },
    )
    return HeldOutEvaluator(es, cfg.eval_every, cfg.steps, device, precision.autocast)


def distribution_stats(logits: torch.Tensor) -> torch.Tensor:
    """(S, N, V) logits of S sources -> (3, S + 1): argmax share, mean entropy, mean top-1
    probability per source, then overall (the module doc defines each); fp32, on their device."""
    s, n, v = logits.shape
    rows, argmaxes = [], []
    for i in range(s):  # one source at a time: one (N, V) fp32 copy alive, not S of them
        logp = torch.log_softmax(logits[i].float(), dim=-1)  # (N, V)
        p = logp.exp()
        top1, arg = p.max(dim=-1)  # (N,)
        share = torch.bincount(arg, minlength=v).max() / n
        rows.append(torch.stack([share, -(p * logp).sum(-1).mean(), top1.mean()]))
        argmaxes.append(arg)
    per = torch.stack(rows, dim=1)  # (3, S)
    overall = per.mean(dim=1)  # entropy and top-1: every source has N positions
    overall[0] = torch.bincount(torch.cat(argmaxes), minlength=v).max() / (s * n)
    return torch.cat([per, overall[:, None]], dim=1)


class HeldOutEvaluator(Evaluator):
    """Evaluate on the fixed held-out set every ``every`` updates and at the last one."""

    # the columns maybe_evaluate returns (andrea_diag.metrics declares them, owner "evaluator")
    columns: ClassVar[tuple[metrics.Column, ...]] = (
        metrics.EVAL_LOSS, metrics.EVAL_LOSS_SOURCE, metrics.EVAL_ARGMAX_SHARE,
        metrics.EVAL_ARGMAX_SHARE_SOURCE, metrics.EVAL_ENTROPY, metrics.EVAL_ENTROPY_SOURCE,
        metrics.EVAL_TOP1_PROB, metrics.EVAL_TOP1_PROB_SOURCE,
    )  # fmt: skip

    def __init__(
        self,
        evalset: EvalSet,
        every: int,
        steps: int,
        device: torch.device,
        autocast: Callable[[], AbstractContextManager[Any]],
    ) -> None:
        self.tokens = evalset.tokens.to(device)  # (S, K, T+1)
        self.sources = evalset.sources
        self.every, self.steps, self.autocast = every, steps, autocast
        self.seconds = 0.0  # wall clock spent evaluating (the summary's cost check)
        self.n_evals = 0

    def due(self, update: int) -> bool:
        return self.every > 0 and (update % self.every == 0 or update == self.steps)

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        t0 = time.perf_counter()
        s, k, t1 = self.tokens.shape
        flat = self.tokens.reshape(s * k, t1)  # (S·K, T+1)
        was_training = model.training
        model.eval()
        try:
            with self.autocast():
                logits = model(flat[:, :-1].contiguous())  # (S·K, T, V); may be .view()ed
            tok = F.cross_entropy(
                logits.float().reshape(-1, logits.size(-1)), flat[:, 1:].reshape(-1),
                reduction="none",
            ).view(s, k * (t1 - 1))  # fmt: skip
            shape = distribution_stats(logits.reshape(s, k * (t1 - 1), -1))  # (3, S + 1)
        finally:
            model.train(was_training)
        per_source = tok.mean(dim=1)  # (S,) every sequence has T supervised tokens
        host = torch.cat([per_source, shape.flatten()]).tolist()  # host sync: once per evaluation
        values, w = host[:s], s + 1
        share, entropy, top1 = (host[s + i * w : s + (i + 1) * w] for i in range(3))
        out = {f"eval_loss_{n}": v for n, v in zip(self.sources, values, strict=True)}
        out["eval_loss"] = sum(values) / len(values)
        for name, row in (("argmax_share", share), ("entropy", entropy), ("top1_prob", top1)):
            out.update({f"eval_{name}_{n}": v for n, v in zip(self.sources, row[:-1], strict=True)})
            out[f"eval_{name}"] = row[-1]
        self.seconds += time.perf_counter() - t0
        self.n_evals += 1
        return out

    def maybe_evaluate(self, update: int, model: torch.nn.Module) -> dict[str, Any]:
        return self.evaluate(model) if self.due(update) else {}

    def summary(self, wall_s: float) -> dict[str, Any]:
        """How often and at what cost: the issue's budget is 5% of a run's time."""
        return {
            "eval": {
                "every": self.every,
                "n_evals": self.n_evals,
                "sequences_per_source": int(self.tokens.shape[1]),
                "wall_s": self.seconds,
                "share_of_run": self.seconds / wall_s if wall_s > 0 else None,
            }
        }

    def state_dict(self) -> dict[str, Any]:
        return {"n_evals": self.n_evals}  # seconds are wall clock: not part of a resume

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n_evals = int(state.get("n_evals", 0))
