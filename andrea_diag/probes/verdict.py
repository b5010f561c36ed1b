"""Run verdicts: the one place they are defined (pure functions, no model, no I/O, no torch).

:func:`run_verdict` judges one run from its held-out evaluations (loss and the shape of the
predictive distribution, ``train/evaluation.py``), its training loss and the lock-in probe's
greedy samples; the probe (``lockin.py``) writes the result to ``summary["lockin"]``, and
``andrea-diag report`` judges a run directory again with this code (``lockin.judge_tables``).
The report, the sweep and the findings read the verdict names, :data:`COLLAPSE_VERDICTS` and
:func:`loss_collapse_reason` from here. Every number is in :data:`THRESHOLDS` (the summary
repeats them).

**Loss trajectory.** The held-out evaluation loss (``eval_loss`` at ``eval_updates``) when at
least ``min_evals`` finite evaluations exist: a fixed held-out mixture does not move with the
bandit's source weights. Otherwise the training loss, which does: a phase of the hardest source
lifts it by about a nat, so the training-loss divergence test asks for the rise to outlast the
bandit's longest phase, and smooths it by a trailing median.

**Verdicts, in precedence order** (the first that applies wins):

1. ``non-finite``: at least ``nonfinite_updates`` non-finite updates, or a non-finite final loss;
2. ``never-learned``: the loss never reached the *learned level*
   ``min(learned_frac · ln V, H1 - unigram_margin)`` (H1: the data's unigram entropy, when
   known). A model near the uniform or unigram loss has not used context; its text is
   repetitive by construction, so its repetition is not a lock-in;
3. ``locked-in``: all of (a) learned; (b) the held-out loss of the last ``lockin_hold_evals``
   evaluations all sit ``lockin_rise_nats`` or more above the minimum it had reached before
   them; (c) the held-out *distribution collapsed*: at each of the last ``collapse_evals`` (or
   more) consecutive evaluations the argmax share rose by ``collapse_share_rise`` and the mean
   entropy fell by ``collapse_entropy_drop`` against the arm's own best phase (the medians over
   the learned evaluations up to that minimum whose loss is within ``best_phase_nats`` of it).
   This is what the seeds describe: one token's logit dominates the softmax after the model had
   learned, measured over every held-out position, not on one greedy sample;
4. ``diverged``: the last ``diverge_hold`` points all sit at least ``diverge_nats`` above the
   minimum the loss had reached before them (held-out: 0.3 nat for the last 3 evaluations;
   training loss: 1.0 nat for the last 42 updates), with no collapse of the distribution;
5. ``still-learning``: the held-out loss is still falling at the end (the last evaluation is
   within ``falling_tol`` of the minimum and ``falling_nats`` below the evaluation
   ``falling_lookback`` before it) and the final greedy text is repetitive. Short runs of small
   models write repetitive greedy text: that is undertraining, not a collapse (healthy for
   collapse: not in :data:`COLLAPSE_VERDICTS`);
6. ``repetitive-throughout``: learned, no collapse of the distribution, the loss no longer
   falling, and every judged greedy sample event (at/after the good phase) repetitive;
7. ``healthy``: none of the above.

``insufficient-data`` (not a collapse) when the trajectory is too short (fewer than
``min_losses`` finite training losses and no usable evaluation), or when the run learned and
did not diverge but carries no held-out distribution statistics (``eval_argmax_share`` and
``eval_entropy`` at ``min_evals`` evaluations or more): a run recorded before them, or one
without evaluations. Its reasons say which evidence is missing.

**Samples** (an illustration, and the "repetitive" test only). A *sample event* is one update's
greedy rows (one per prompt source); its repetition is the *median over sources* of
``top_token_share`` and ``distinct_1`` (the repo-docs prompt continues URLs in every healthy
arm, so its own share alone sat at 0.4-0.5). An event is *repetitive* when its share is
``>= top_share`` or its distinct-1 is ``<= distinct_low`` (a loop of a few tokens).

**Collapse** = ``diverged``, ``locked-in`` or ``non-finite`` (:data:`COLLAPSE_VERDICTS`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from andrea_diag.probes.trajectory import (  # the loss-trajectory tests, split out for size
    FALLBACK_DIVERGE_NATS,
    _divergence,
    _finite,
    _nonfinite_reasons,
    _trajectory,
    loss_collapse_reason,
    smoothed,
)

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
    # locked-in: the held-out loss rose and stayed up (a lock-in costs loss: a collapsed softmax
    # is wrong on every position whose target is not the dominant token) ...
    "lockin_rise_nats": 0.1,  # ... by more than the wobble of a learned arm: at most 0.05
    # nats above its running minimum in tests/fixtures/lockin/tiny-300-lr3e-3-none.json
    "lockin_hold_evals": 3,  # ... at each of the last 3 evaluations
    # ... and the distribution collapsed against the best phase, at each of the last 3 evaluations
    "collapse_evals": 3,
    # against the best phase's medians: the same healthy tiny arm wobbles by 0.19-0.37 in share
    # and 5.7-6.6 nats in entropy between evaluations (the bandit's phase moves calibration),
    # so one evaluation is never enough: 3 in a row, with the loss up
    "collapse_share_rise": 0.15,  # argmax share up by 0.15 (of all held-out positions)
    "collapse_entropy_drop": 0.25,  # mean entropy down by 0.25 nats while the loss went up
    "best_phase_nats": 0.1,  # best phase: learned evaluations within 0.1 nat of the minimum
    # still-learning: the held-out loss is still falling at the end
    "falling_tol": 0.02,  # the last evaluation within 0.02 nat of the minimum ...
    "falling_nats": 0.01,  # ... and 0.01 nat below the evaluation ...
    "falling_lookback": 3,  # ... 3 evaluations before it
    # repetitive greedy text (samples)
    "top_share": 0.5,  # repetitive: half of the 32 greedy tokens are one token (healthy <= 0.12)
    "distinct_low": 0.125,  # ... or <= 4 distinct tokens in 32: a loop of 2-4 tokens
}

# Precedence order (first applies first); insufficient-data is outside the taxonomy: no call.
VERDICTS = (
    "non-finite",
    "never-learned",
    "locked-in",
    "diverged",
    "still-learning",
    "repetitive-throughout",
    "healthy",
    "insufficient-data",
)
COLLAPSE_VERDICTS = ("diverged", "locked-in", "non-finite")  # the run learned and lost it
LOCKED_VERDICTS = ("locked-in",)  # the report's "locked in:" list
__all__ = [
    "COLLAPSE_VERDICTS", "DIST_COLUMNS", "FALLBACK_DIVERGE_NATS", "LOCKED_VERDICTS",
    "THRESHOLDS", "VERDICTS", "event_scores", "learned_level", "loss_collapse_reason",
    "recorded_collapse_reason", "run_verdict", "smoothed", "text_stats",
]  # fmt: skip
# the held-out distribution statistics the lock-in test reads (train/evaluation.py's columns)
DIST_COLUMNS = ("eval_argmax_share", "eval_entropy", "eval_top1_prob")


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


def _dist_series(
    ups: list[int],
    eval_updates: Sequence[int] | None,
    eval_dist: Mapping[str, Sequence[float | None]] | None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """(argmax share, entropy) at the judged evaluations ``ups``; None when any is missing."""
    if not eval_dist or eval_updates is None:
        return None
    cols = []
    for key in DIST_COLUMNS[:2]:
        by_update = dict(_finite(eval_updates, eval_dist.get(key) or [None] * len(eval_updates)))
        if not all(u in by_update for u in ups):
            return None
        cols.append(np.array([by_update[u] for u in ups]))
    return cols[0], cols[1]


def _lockin(
    ups: list[int],
    sm: np.ndarray,
    dist: tuple[np.ndarray, np.ndarray],
    good: np.ndarray,
    th: Mapping[str, float],
) -> tuple[dict[str, Any], str | None]:
    """The numbers of the lock-in test (module doc, 3), and its reason when it holds."""
    share, ent = dist
    hold, n_col = int(th["lockin_hold_evals"]), int(th["collapse_evals"])
    if sm.size <= max(hold, n_col):
        return {}, None
    i = int(np.argmin(sm[:-hold]))  # the minimum before the held tail
    lo = float(sm[i])
    best = [j for j in range(i + 1) if j >= good[0] and sm[j] <= lo + th["best_phase_nats"]]
    b_share, b_ent = float(np.median(share[best])), float(np.median(ent[best]))
    up = share - b_share >= th["collapse_share_rise"]
    down = b_ent - ent >= th["collapse_entropy_drop"]
    collapsed = up & down
    collapsed[: i + 1] = False  # a collapse is after the best phase
    run = 0
    while run < collapsed.size and collapsed[-1 - run]:
        run += 1
    risen = bool(np.all(sm[-hold:] >= lo + th["lockin_rise_nats"]))
    nums = {"best_phase_updates": [ups[j] for j in best], "best_argmax_share": b_share,
            "best_entropy": b_ent, "final_argmax_share": float(share[-1]),
            "final_entropy": float(ent[-1]), "collapsed_evals": run}  # fmt: skip
    if not (risen and run >= n_col):
        return nums, None
    return nums, (
        f"held-out distribution collapsed at the last {run} evaluations (updates "
        f"{ups[-run]}-{ups[-1]}): argmax share {share[-1]:.2f} (best phase {b_share:.2f}, "
        f"a rise >= {th['collapse_share_rise']:g}), mean entropy {ent[-1]:.2f} nats (best "
        f"phase {b_ent:.2f}, a fall >= {th['collapse_entropy_drop']:g}), while the held-out "
        f"loss stayed >= {lo + th['lockin_rise_nats']:.2f} (minimum {lo:.2f} at update "
        f"{ups[i]} + {th['lockin_rise_nats']:g}) for the last {hold} evaluations"
    )


def _falling(ups: list[int], sm: np.ndarray, th: Mapping[str, float]) -> tuple[bool, str]:
    """Is the held-out loss still falling at the end (module doc, 5)? And the sentence."""
    k = int(th["falling_lookback"])
    if sm.size <= k:
        return False, f"{sm.size} evaluations: too few to say whether the loss still falls"
    drop, gap = float(sm[-1 - k] - sm[-1]), float(sm[-1] - sm.min())
    falling = gap <= th["falling_tol"] and drop >= th["falling_nats"]
    return falling, (
        f"held-out loss {'still falling' if falling else 'no longer falling'} at the end: "
        f"{sm[-1]:.3f} at update {ups[-1]}, {drop:+.3f} nats since update {ups[-1 - k]}, "
        f"{gap:.3f} above its minimum (falling: within {th['falling_tol']:g} of the minimum "
        f"and >= {th['falling_nats']:g} below {k} evaluations before)"
    )


def _text_verdict(
    scores: dict[int, tuple[float, float]], start: int, falling: bool, th: Mapping[str, float]
) -> tuple[str, dict[str, Any], str]:
    """(verdict, numbers, reason) of a learned run that neither locked in nor diverged."""
    if not scores:
        return "healthy", {}, "no greedy samples: repetition not judged"
    judged = [u for u in scores if u >= start] or [max(scores)]
    last = judged[-1]
    (share, d1), rep = scores[last], _repetitive(scores[last], th)
    nums = {"final_score": share, "final_distinct_1": d1, "repetitive": rep,
            "judged_sample_updates": judged}  # fmt: skip
    rule = f"share >= {th['top_share']:g} or distinct-1 <= {th['distinct_low']:g}"
    now = f"greedy top-token share {share:.2f}, distinct-1 {d1:.2f} at update {last}"
    if rep and falling:
        return "still-learning", nums, f"{now}: repetitive ({rule}) while the loss still falls"
    if rep and all(_repetitive(scores[u], th) for u in judged):
        why = (
            f"greedy text repetitive ({rule}) at every one of {len(judged)} sample event(s), "
            f"updates {judged[0]}-{last}, with no collapse of the held-out distribution"
        )
        return "repetitive-throughout", nums, why
    return "healthy", nums, f"{now}: {'repetitive, not throughout' if rep else 'not repetitive'}"


def learned_level(
    vocab_size: int, unigram_entropy: float | None, th: Mapping[str, float] = THRESHOLDS
) -> float:
    """The loss a run must reach to count as learned: min(learned_frac · ln V, H1 - margin)."""
    level = th["learned_frac"] * math.log(vocab_size)
    if unigram_entropy is not None and math.isfinite(unigram_entropy):
        level = min(level, unigram_entropy - th["unigram_margin"])
    return level


def recorded_collapse_reason(
    lockin: Mapping[str, Any], final_loss: float, losses: Mapping[str, Sequence[Any]]
) -> str | None:
    """Why a recorded run counts as collapsed (None: it did not), the report's one rule.

    ``lockin``: the run's ``summary["lockin"]``; a judged verdict (not ``insufficient-data``)
    decides alone. Else: a lock-in verdict name, a non-finite ``final_loss``, or
    :func:`loss_collapse_reason` of ``losses`` (per-source columns, else ``{"loss": ...}``)."""
    verdict = str(lockin.get("verdict", "")).lower()
    if "collapse" in lockin and verdict != "insufficient-data":
        return f"verdict {lockin.get('verdict')}" if lockin["collapse"] else None
    if verdict in LOCKED_VERDICTS:
        return "lock-in verdict"
    if not math.isfinite(final_loss):
        return "final loss is not finite"
    return loss_collapse_reason(losses)


def run_verdict(
    updates: Sequence[int],
    losses: Sequence[float | None],
    samples: Sequence[Mapping[str, Any]],
    vocab_size: int,
    *,
    eval_updates: Sequence[int] | None = None,
    eval_losses: Sequence[float | None] | None = None,
    eval_dist: Mapping[str, Sequence[float | None]] | None = None,
    nonfinite_updates: int = 0,
    thresholds: Mapping[str, float] | None = None,
    unigram_entropy: float | None = None,
) -> dict[str, Any]:
    """The run's verdict (see the module doc for the definitions and their precedence).

    ``updates``/``losses``: the training loss per update; ``samples``: the lock-in probe's rows
    (``update``, ``mode``, ``top_token_share``, ``distinct_1``); ``eval_updates``/``eval_losses``:
    the held-out evaluations, judged instead of the training loss when there are enough;
    ``eval_dist``: :data:`DIST_COLUMNS` -> values at ``eval_updates`` (the lock-in evidence);
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
        "rise_above_min": None, "final_score": None, "final_distinct_1": None,
        "repetitive": None,
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
    dist = _dist_series(ups, eval_updates, eval_dist) if kind == "eval" else None
    if dist is not None:
        lock_nums, locked = _lockin(ups, sm, dist, good, th)
        out.update(lock_nums)
        if locked:
            return done("locked-in", learned, locked)
    if diverged:
        return done("diverged", learned, diverged)
    if dist is None:
        return done("insufficient-data", learned, _held(out, what, margin, hold, kind, sm.size),
                    "lock-in not judged: no held-out distribution statistics (eval_argmax_share, "
                    f"eval_entropy) at the {'evaluations' if kind == 'eval' else 'updates'} "
                    "judged (a run recorded before them, or one without evaluations)")  # fmt: skip
    falling, falls = _falling(ups, sm, th)
    verdict, text_nums, why = _text_verdict(event_scores(samples), start, falling, th)
    out.update(text_nums, still_falling=falling)
    return done(verdict, learned, _held(out, what, margin, hold, kind, sm.size), falls, why)


def _held(out: Mapping[str, Any], what: str, margin: float, hold: int, kind: str, n: int) -> str:
    """The sentence of a divergence test that did not fire."""
    rise, unit = out["rise_above_min"], "evaluations" if kind == "eval" else "updates"
    if rise is None:
        return f"divergence not judged: {n} smoothed points, the test holds {hold} {unit}"
    if rise >= margin:
        return (
            f"{what} ended {rise:.2f} nats above its minimum but did not stay >= "
            f"minimum + {margin:g} for the last {hold} {unit}: not diverged"
        )
    return f"{what} ended {rise:.2f} nats above its minimum (< {margin:g})"
