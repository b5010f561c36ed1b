"""The lock-in verdict and the text statistics it reads (pure functions, no model, no I/O).

The verdict's rules and thresholds are documented in ``lockin.py``'s module docstring, which is
where the probe that samples the text lives; ``THRESHOLDS`` below is the single source of the
numbers (the summary repeats them).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

THRESHOLDS: dict[str, float] = {
    "learned_frac": 0.8,  # good phase: smoothed loss <= 0.8 · ln V
    "top_share": 0.5,  # locked-in: greedy top-token share of the final samples >= 0.5
    "rise": 0.2,  # ... and at least 0.2 above the earlier minimum
    "smooth": 5,  # trailing-median window for the loss trajectory
    "min_losses": 10,
    "unigram_margin": 0.5,  # learned: smoothed loss <= unigram entropy - 0.5 (uses context)
}
VERDICTS = ("healthy", "never-learned", "locked-in", "insufficient-data")


def text_stats(tokens: Sequence[int]) -> dict[str, float]:
    """distinct_1/2/3, longest_run, top_token_share of one generated token sequence."""
    toks = list(tokens)
    out: dict[str, float] = {}
    for n in (1, 2, 3):
        grams = [tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)]
        out[f"distinct_{n}"] = len(set(grams)) / len(grams) if grams else float("nan")
    run = best = 0
    for i, t in enumerate(toks):
        run = run + 1 if i and t == toks[i - 1] else 1
        best = max(best, run)
    out["longest_run"] = best
    out["top_token_share"] = Counter(toks).most_common(1)[0][1] / len(toks) if toks else math.nan
    return out


def smoothed(losses: Sequence[float], window: int) -> np.ndarray:
    """Trailing median over ``window`` finite values (robust to single-batch noise)."""
    x = np.asarray([v for v in losses if v is not None and math.isfinite(v)], dtype=np.float64)
    if x.size == 0:
        return x
    return np.array([np.median(x[max(0, i - window + 1) : i + 1]) for i in range(x.size)])


def lockin_verdict(
    updates: Sequence[int],
    losses: Sequence[float],
    samples: Sequence[Mapping[str, Any]],
    vocab_size: int,
    thresholds: Mapping[str, float] = THRESHOLDS,
    unigram_entropy: float | None = None,
) -> dict[str, Any]:
    """The lock-in verdict from the loss trajectory and the sample rows (see module doc).

    With ``unigram_entropy`` (the data's context-free token entropy, nats), "learned" also
    requires beating it by ``unigram_margin``: a model at the unigram loss predicts the most
    frequent token everywhere, so its greedy text is repetitive by construction, not locked in.
    """
    th = {**THRESHOLDS, **thresholds}
    uniform = math.log(vocab_size)
    learned_level = th["learned_frac"] * uniform
    if unigram_entropy is not None and math.isfinite(unigram_entropy):
        learned_level = min(learned_level, unigram_entropy - th["unigram_margin"])
    pairs = [
        (u, v) for u, v in zip(updates, losses, strict=True) if v is not None and math.isfinite(v)
    ]
    out: dict[str, Any] = {
        "uniform_loss": uniform,
        "unigram_entropy": unigram_entropy,
        "learned_level": learned_level,
        "good_phase_start": None,
        "min_smoothed_loss": None,
        "final_score": None,
        "baseline_score": None,
        "repetitive": None,
    }
    if len(pairs) < th["min_losses"]:
        return {"verdict": "insufficient-data", **out}
    sm = smoothed([v for _, v in pairs], int(th["smooth"]))
    out["min_smoothed_loss"] = float(sm.min())
    good = np.nonzero(sm <= learned_level)[0]
    if good.size == 0:
        return {"verdict": "never-learned", **out}
    start = pairs[int(good[0])][0]
    out["good_phase_start"] = start
    score: dict[int, float] = {}
    for s in samples:
        if s.get("mode") == "greedy" and s.get("top_token_share") is not None:
            u = int(s["update"])
            score[u] = max(score.get(u, 0.0), float(s["top_token_share"]))
    events = sorted(score)
    if len(events) < 2 or events[-1] < start:
        return {"verdict": "insufficient-data", **out}
    last = events[-1]
    earlier = [u for u in events[:-1] if u >= start] or events[:-1]
    baseline = min(score[u] for u in earlier)
    out["final_score"], out["baseline_score"] = score[last], baseline
    repetitive = score[last] >= th["top_share"]
    out["repetitive"] = repetitive
    if repetitive and score[last] - baseline >= th["rise"]:
        return {"verdict": "locked-in", **out}
    if repetitive:  # repetitive, but already so in the good phase: no learned-then-lost diversity
        out["reason"] = "greedy text repetitive throughout the good phase (no rise)"
    return {"verdict": "healthy", **out}
