"""Run verdicts: the one place they are defined (pure functions, no model, no I/O, no torch).

:func:`run_verdict` judges one run from its loss trajectory and the lock-in probe's sample rows;
the probe (``lockin.py``) writes the result to ``summary["lockin"]``, and the report and the sweep
read the verdict names and :data:`COLLAPSE_VERDICTS` from here. Every number is in
:data:`THRESHOLDS` (the summary repeats them).

**Loss trajectory.** The held-out evaluation loss (``eval_loss`` at ``eval_updates``) when at
least ``min_evals`` finite evaluations exist: a fixed held-out mixture does not move with the
bandit's source weights. Otherwise the training loss, which does: a phase of the hardest source
lifts it by about a nat (the gpu-sweep arms), so the training-loss divergence test asks for the
rise to outlast the bandit's longest phase, and smooths it by a trailing median.

**Verdicts, in precedence order** (the first that applies wins):

1. ``non-finite``: at least ``nonfinite_updates`` non-finite updates (a skipped update: an inf or
   NaN loss or gradient), or a non-finite final loss (training or held-out);
2. ``never-learned``: the smoothed loss never reached the *learned level*
   ``min(learned_frac · ln V, H1 - unigram_margin)`` (H1: the data's unigram entropy, when
   known). A model near the uniform or unigram loss has not used context; its text is
   repetitive by construction, so its repetition is not a lock-in;
3. ``diverged``: the last ``diverge_hold`` (smoothed) points all sit at least ``diverge_nats``
   above the minimum the loss had reached before them (eval: 0.3 nat for the last 3
   evaluations; training loss: 1.0 nat for the last 42 updates);
4. ``locked-in``: learned, then the greedy text became repetitive: the last sample event is
   repetitive, an earlier one in the good phase was not, and the top-token share rose by
   ``rise`` or distinct-1 fell by ``distinct_drop`` against the best earlier event;
5. ``repetitive-throughout``: learned, but every judged sample event, from the first to the
   last, was repetitive (never diverse, so nothing was lost: not a lock-in, but not healthy);
6. ``healthy``: none of the above.

``insufficient-data`` (not a collapse) when the trajectory is too short (fewer than
``min_losses`` finite training losses and no usable evaluation), or when the loss learned and did
not diverge but fewer than two greedy sample events exist, or none at/after the good phase.

**Samples.** A *sample event* is one update's greedy rows (one per prompt source). Its
repetition is the *median over sources* of ``top_token_share`` and of ``distinct_1``: the median,
not the max, because the repo-docs prompt continues URLs (``github.com/master/en/en/...``) in
every healthy arm, so its own share alone sat at 0.4-0.5. An event is *repetitive* when its share
is ``>= top_share`` or its distinct-1 is ``<= distinct_low`` (a loop of a few tokens, which the
top-token share misses). Judged events: those at/after the good-phase start (the first update the
smoothed loss reached the learned level); when only the last is, the earlier ones too.

**Collapse** = ``diverged``, ``locked-in`` or ``non-finite`` (:data:`COLLAPSE_VERDICTS`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# Every number the verdicts use, with the reason for its value.
THRESHOLDS: dict[str, float] = {
    # trajectory
    "smooth": 5,  # trailing-median window, training loss: one odd batch is not a level
    # evaluations: none. The held-out set is fixed, so an evaluation has no batch-sampling
    # noise to remove, and a median would lag a divergence at the end of the run by an evaluation
    "smooth_eval": 1,
    "min_losses": 10,  # fewer finite training losses (and no eval): insufficient-data
    "min_evals": 5,  # fewer finite evaluations: too few for a minimum and a hold; use training
    # non-finite
    "nonfinite_updates": 1,  # any non-finite loss: the run met inf/NaN
    # gradient-only skips (finite loss: fp16 loss-scale overflow) count above this share only
    "grad_only_skip_share": 0.02,
    # never-learned
    "learned_frac": 0.8,  # learned: smoothed loss <= 0.8 ln V (7.23 nats at V = 8449)
    "unigram_margin": 0.5,  # ... and <= H1 - 0.5: beating the unigram loss means using context
    # diverged
    "diverge_nats": 1.0,  # training loss: the bandit's mix moves it by ~1 nat, so more than that
    "diverge_hold": 42,  # ... for 42 updates, the bandit's longest phase: not one hard phase
    # held-out: on a stand-in for it (the gpu-sweep's per-source training losses, equal weights,
    # 5-update means every 12 updates) no healthy arm held more than 0.19 above its minimum for
    # 3 evaluations, at any point of the run; 12m lr 1e-2 unclipped ended 0.56 above
    "diverge_nats_eval": 0.3,
    "diverge_hold_eval": 3,  # ... for the last 3 evaluations (~6% of a 50-evaluation run)
    # locked-in / repetitive
    "top_share": 0.5,  # repetitive: half of the 32 greedy tokens are one token (healthy <= 0.12)
    "distinct_low": 0.125,  # ... or <= 4 distinct tokens in 32: a loop of 2-4 tokens
    "rise": 0.2,  # locked-in: top-token share up by >= 0.2 from the best good-phase event
    "distinct_drop": 0.2,  # ... or distinct-1 down by >= 0.2 (healthy text ends at 0.5-0.8)
}

# Precedence order (first applies first); insufficient-data is outside the taxonomy: no call.
VERDICTS = (
    "non-finite",
    "never-learned",
    "diverged",
    "locked-in",
    "repetitive-throughout",
    "healthy",
    "insufficient-data",
)
COLLAPSE_VERDICTS = ("diverged", "locked-in", "non-finite")  # the run learned and lost it
LOCKED_VERDICTS = ("locked-in",)  # the report's "locked in:" list


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


def _finite(updates: Sequence[int], values: Sequence[float | None]) -> list[tuple[int, float]]:
    """(update, value) pairs of the finite values."""
    return [
        (int(u), float(v))
        for u, v in zip(updates, values, strict=True)
        if v is not None and math.isfinite(v)
    ]


def _is_nonfinite(v: float | None) -> bool:
    """inf or NaN; None is "not measured", not non-finite."""
    return v is not None and not math.isfinite(v)


def _nonfinite_reasons(
    losses: Sequence[float | None],
    eval_losses: Sequence[float | None] | None,
    nonfinite_updates: int,
    th: Mapping[str, float],
) -> tuple[int, list[str]]:
    """(count of non-finite updates, reasons for the non-finite verdict; empty: not non-finite)."""
    # a non-finite training loss skips its update, so it is one; the caller's count may add
    # updates whose gradient alone was non-finite (fp16 overflow): take the larger
    n_loss = sum(_is_nonfinite(v) for v in losses)
    n = max(int(nonfinite_updates), n_loss)
    # GradScaler skips an overflowed update by design and lowers its scale: a few such
    # gradient-only skips (finite loss) are fp16 working, not a run meeting inf/NaN
    grad_only_allowed = th["grad_only_skip_share"] * len(losses)
    reasons = []
    if n_loss >= th["nonfinite_updates"] or (
        n - n_loss >= th["nonfinite_updates"] and n - n_loss > grad_only_allowed
    ):
        reasons.append(f"{n} non-finite update{'s' * (n != 1)} (skipped)")
    for name, seq in (("training", losses), ("held-out", eval_losses or [])):
        last = next((v for v in reversed(seq) if v is not None), None)
        if _is_nonfinite(last):
            reasons.append(f"final {name} loss is {last}")
    return n, reasons


def _trajectory(
    updates: Sequence[int],
    losses: Sequence[float | None],
    eval_updates: Sequence[int] | None,
    eval_losses: Sequence[float | None] | None,
    th: Mapping[str, float],
) -> tuple[str, list[int], np.ndarray, float, int]:
    """(kind "eval"/"train", updates, smoothed losses, divergence margin, hold) of the judged loss."""
    evals = _finite(eval_updates or [], eval_losses or []) if eval_losses is not None else []
    if len(evals) >= th["min_evals"]:
        ups, vals = zip(*evals, strict=True)
        sm = smoothed(vals, int(th["smooth_eval"]))
        return "eval", list(ups), sm, th["diverge_nats_eval"], int(th["diverge_hold_eval"])
    pairs = _finite(updates, losses)
    ups_t = [u for u, _ in pairs]
    sm = smoothed([v for _, v in pairs], int(th["smooth"]))
    return "train", ups_t, sm, th["diverge_nats"], int(th["diverge_hold"])


def _divergence(
    ups: list[int], sm: np.ndarray, margin: float, hold: int, what: str
) -> tuple[dict[str, Any], str | None]:
    """The numbers of the divergence test, and its reason when the run diverged (else None)."""
    if sm.size <= hold:  # no "before" to compare the held tail with
        return {"running_min": None, "rise_above_min": None}, None
    i = int(np.argmin(sm[:-hold]))
    lo, final = float(sm[i]), float(sm[-1])
    tail = sm[-hold:]
    nums = {"running_min": lo, "running_min_update": ups[i], "rise_above_min": final - lo}
    if not bool(np.all(tail >= lo + margin)):
        return nums, None
    unit = "evaluations" if what.startswith("held-out") else "updates"
    return nums, (
        f"{what} ended at {final:.2f}, {final - lo:.2f} nats above its minimum "
        f"{lo:.2f} (update {ups[i]}), and stayed >= {lo + margin:.2f} (minimum + {margin:g}) "
        f"for the last {hold} {unit} (updates {ups[-hold]}-{ups[-1]})"
    )


def event_scores(samples: Sequence[Mapping[str, Any]]) -> dict[int, tuple[float, float]]:
    """update -> (median top_token_share, median distinct_1) over that update's greedy rows."""
    rows: dict[int, list[tuple[float, float]]] = {}
    for s in samples:
        if s.get("mode") == "greedy" and s.get("top_token_share") is not None:
            d1 = s.get("distinct_1")
            rows.setdefault(int(s["update"]), []).append(
                (float(s["top_token_share"]), math.nan if d1 is None else float(d1))
            )
    out = {}
    for u, r in rows.items():
        d1s = [d for _, d in r if math.isfinite(d)]
        out[u] = (float(np.median([s for s, _ in r])), float(np.median(d1s)) if d1s else math.nan)
    return dict(sorted(out.items()))


def _repetitive(score: tuple[float, float], th: Mapping[str, float]) -> bool:
    """One sample event's (share, distinct-1) is repetitive (see the module doc)."""
    share, d1 = score
    return share >= th["top_share"] or (math.isfinite(d1) and d1 <= th["distinct_low"])


def _text_verdict(
    scores: dict[int, tuple[float, float]], start: int, th: Mapping[str, float]
) -> tuple[str, dict[str, Any], str]:
    """(verdict, numbers, reason) from the sample events of a run that learned and held."""
    events = list(scores)
    if len(events) < 2 or events[-1] < start:
        why = f"{len(events)} greedy sample event(s), the last at/after the good phase: {start}"
        return "insufficient-data", {}, why
    last = events[-1]
    earlier = [u for u in events[:-1] if u >= start] or events[:-1]
    (share, d1), rep = scores[last], _repetitive(scores[last], th)
    base = min(earlier, key=lambda u: scores[u][0])  # the least repetitive earlier event
    base_share = scores[base][0]
    base_d1 = max((scores[u][1] for u in earlier), default=math.nan)
    nums = {"final_score": share, "baseline_score": base_share, "final_distinct_1": d1,
            "baseline_distinct_1": base_d1, "repetitive": rep,
            "judged_sample_updates": [*earlier, last]}  # fmt: skip
    now = f"greedy top-token share {share:.2f}, distinct-1 {d1:.2f} at update {last}"
    rule = f"share >= {th['top_share']:g} or distinct-1 <= {th['distinct_low']:g}"
    diverse_before = [u for u in earlier if not _repetitive(scores[u], th)]
    rose = share - base_share >= th["rise"] or base_d1 - d1 >= th["distinct_drop"]
    if rep and diverse_before and rose:
        why = (
            f"{now}: repetitive ({rule}) after diverse text earlier in the good phase (best "
            f"share {base_share:.2f} at update {base}, best distinct-1 {base_d1:.2f}; a rise "
            f">= {th['rise']:g} or a fall >= {th['distinct_drop']:g})"
        )
        return "locked-in", nums, why
    if rep and not diverse_before:
        lowest = min(scores[u][0] for u in nums["judged_sample_updates"])
        why = (
            f"greedy text repetitive ({rule}) at every one of {len(earlier) + 1} sample events, "
            f"updates {earlier[0]}-{last} (lowest share {lowest:.2f}): it was never diverse"
        )
        return "repetitive-throughout", nums, why
    return "healthy", nums, f"{now}: {'repetitive without a rise' if rep else 'not repetitive'}"


def learned_level(
    vocab_size: int, unigram_entropy: float | None, th: Mapping[str, float] = THRESHOLDS
) -> float:
    """The loss a run must reach to count as learned: min(learned_frac · ln V, H1 - margin)."""
    level = th["learned_frac"] * math.log(vocab_size)
    if unigram_entropy is not None and math.isfinite(unigram_entropy):
        level = min(level, unigram_entropy - th["unigram_margin"])
    return level


def run_verdict(
    updates: Sequence[int],
    losses: Sequence[float | None],
    samples: Sequence[Mapping[str, Any]],
    vocab_size: int,
    *,
    eval_updates: Sequence[int] | None = None,
    eval_losses: Sequence[float | None] | None = None,
    nonfinite_updates: int = 0,
    thresholds: Mapping[str, float] | None = None,
    unigram_entropy: float | None = None,
) -> dict[str, Any]:
    """The run's verdict (see the module doc for the definitions and their precedence).

    ``updates``/``losses``: the training loss per update; ``samples``: the lock-in probe's rows
    (``update``, ``mode``, ``top_token_share``, ``distinct_1``); ``eval_updates``/``eval_losses``:
    the held-out evaluations, judged instead of the training loss when there are enough;
    ``nonfinite_updates``: skipped updates counted by the caller. Returns ``verdict``,
    ``collapse`` (verdict in :data:`COLLAPSE_VERDICTS`), ``reasons`` (sentences with the
    numbers) and the numbers themselves.
    """
    th = {**THRESHOLDS, **(thresholds or {})}
    level = learned_level(vocab_size, unigram_entropy, th)
    out: dict[str, Any] = {
        "uniform_loss": math.log(vocab_size), "unigram_entropy": unigram_entropy,
        "learned_level": level, "trajectory": None, "good_phase_start": None,
        "min_smoothed_loss": None, "final_smoothed_loss": None, "running_min": None,
        "rise_above_min": None, "final_score": None, "baseline_score": None,
        "final_distinct_1": None, "baseline_distinct_1": None, "repetitive": None,
    }  # fmt: skip

    def done(verdict: str, *reasons: str) -> dict[str, Any]:
        """The result: collapse follows from the verdict, never set on its own."""
        return {"verdict": verdict, "collapse": verdict in COLLAPSE_VERDICTS,
                "reasons": list(reasons), **out}  # fmt: skip

    out["n_nonfinite"], bad = _nonfinite_reasons(losses, eval_losses, nonfinite_updates, th)
    if bad:
        return done("non-finite", *bad)
    kind, ups, sm, margin, hold = _trajectory(updates, losses, eval_updates, eval_losses, th)
    what = "held-out loss" if kind == "eval" else "smoothed training loss"
    out["trajectory"] = kind
    if kind == "train" and sm.size < th["min_losses"]:
        return done("insufficient-data", f"{sm.size} finite losses (< {th['min_losses']:g})")
    out["min_smoothed_loss"], out["final_smoothed_loss"] = float(sm.min()), float(sm[-1])
    good = np.nonzero(sm <= level)[0]
    if good.size == 0:
        basis = f"{th['learned_frac']:g} ln V = {th['learned_frac'] * out['uniform_loss']:.2f}"
        if unigram_entropy is not None:
            h1 = unigram_entropy - th["unigram_margin"]
            basis = (
                f"the lower of {basis} and unigram entropy - {th['unigram_margin']:g} = {h1:.2f}"
            )
        return done(
            "never-learned",
            f"best {what} {sm.min():.2f} never reached the learned level {level:.2f}, {basis}",
        )
    out["good_phase_start"] = start = ups[int(good[0])]
    learned = f"learned: {what} <= {level:.2f} from update {start}"
    nums, diverged = _divergence(ups, sm, margin, hold, what)
    out.update(nums, diverge_margin=margin, diverge_hold=hold)
    if diverged:
        return done("diverged", learned, diverged)
    verdict, text_nums, why = _text_verdict(event_scores(samples), start, th)
    out.update(text_nums)
    rise, unit = out["rise_above_min"], "evaluations" if kind == "eval" else "updates"
    if rise is None:
        held = f"divergence not judged: {sm.size} smoothed points, the test holds {hold} {unit}"
    elif rise >= margin:
        held = (
            f"{what} ended {rise:.2f} nats above its minimum but did not stay >= "
            f"minimum + {margin:g} for the last {hold} {unit}: not diverged"
        )
    else:
        held = f"{what} ended {rise:.2f} nats above its minimum (< {margin:g})"
    return done(verdict, learned, held, why)


def lockin_verdict(
    updates: Sequence[int],
    losses: Sequence[float],
    samples: Sequence[Mapping[str, Any]],
    vocab_size: int,
    thresholds: Mapping[str, float] = THRESHOLDS,
    unigram_entropy: float | None = None,
) -> dict[str, Any]:
    """:func:`run_verdict` on the training loss alone (the lock-in probe's original signature)."""
    return run_verdict(
        updates,
        losses,
        samples,
        vocab_size,
        thresholds=thresholds,
        unigram_entropy=unigram_entropy,
    )
