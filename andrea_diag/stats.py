"""Paired statistics for seeds, on ``scipy.stats`` (the one module that calls it).

    >>> t = paired_test([0.03, 0.01, 0.02, 0.04, 0.02, 0.03])  # 6 paired gaps, all above 0
    >>> t.p                        # exact sign-flip test: 2 of the 64 sign patterns as extreme
    0.03125
    >>> wilson(1, 3).text()        # 1 of 3 seeds collapsed
    '0.33 [0.06, 0.79]'
    >>> round(fisher(3, 8, 0, 8), 6)  # collapse 3/8 unclipped against 0/8 clipped
    0.2

What each claim uses:

- a paired gap (unclipped minus clipped held-out loss, one per seed): the exact sign-flip
  permutation test (all 2^n sign patterns up to ``EXACT_MAX_PAIRS``, Monte Carlo with a fixed
  seed above), a t-interval and a BCa bootstrap interval of the mean, n and the sd;
- a collapse rate against another: Fisher's exact test (valid at any n; Wilson intervals are
  for display, their overlap is no test);
- several rungs: a fixed-sequence test from the largest rung (:func:`fixed_sequence`), and
  Holm-adjusted p-values (:func:`holm`) for reading one rung on its own;
- power: the smallest mean gap the seeds detect at 80% power (:func:`detectable_gap`) and the
  seeds a given gap would need (:func:`seeds_needed`), neither below the fewest pairs at which
  the exact test can reject at all (:func:`min_pairs`).

No claim from fewer than ``MIN_PAIRS`` pairs: :func:`insufficient` says so instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats as st

CONFIDENCE = 0.95
# two-sided; written out, as 1 - CONFIDENCE is 0.050000000000000044, and "p < ALPHA" would then
# call a p of exactly 0.05 significant
ALPHA = 0.05
POWER = 0.80
# The smallest n at which an exact two-sided sign-flip test can reach p < 0.05: with every
# gap on one side, p = 2 / 2^n, and 2/32 = 0.0625 at n = 5 but 2/64 = 0.03125 at n = 6.
# Below it no pattern of seeds can show anything, so no threshold is stated. (min_pairs() is
# the same rule for any alpha and side; a test pins MIN_PAIRS == min_pairs().)
MIN_PAIRS = 6
EXACT_MAX_PAIRS = 16  # 2^16 = 65,536 sign patterns: exact up to here, Monte Carlo above
N_RESAMPLES = 10_000  # Monte Carlo p-values and bootstrap: error well under the seeds' spread
SEED = 0  # a fixed resampling seed: the same records give the same numbers every time
TARGET_GAP = 0.02  # nats: the gap whose seed count the page states ("would need N seeds")
MAX_SEEDS = 1_000_000  # seeds_needed gives up (None) beyond this
ALTERNATIVES = ("two-sided", "greater", "less")  # scipy's names for the sides of a test


@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided interval; ``lo``/``hi`` are NaN when it has none."""

    estimate: float
    lo: float
    hi: float
    n: int

    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0  # NaN compares False: no interval, no call

    def text(self, digits: int = 2) -> str:
        if math.isnan(self.estimate):
            return "n/a"
        if math.isnan(self.lo):
            return f"{self.estimate:.{digits}f} (no interval, n={self.n})"
        return f"{self.estimate:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


NONE = Interval(math.nan, math.nan, math.nan, 0)


def _finite(values: Sequence[float | None]) -> np.ndarray:
    x = np.asarray([v for v in values if v is not None], dtype=float)
    return x[np.isfinite(x)]  # NaN: a crashed arm, dropped


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)  # vectorized statistic for permutation_test / bootstrap


def wilson(k: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson score interval for ``k`` successes in ``n`` trials (for display): scipy's
    ``binomtest(k, n).proportion_ci(method="wilson")``, two-sided; no trials, no interval
    (scipy refuses n = 0)."""
    if n <= 0:
        return NONE
    if not 0 <= k <= n:
        raise ValueError(f"wilson: need 0 <= k <= n, got k={k}, n={n}")
    ci = st.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return Interval(k / n, float(ci.low), float(ci.high), n)


def bootstrap_mean(values: Sequence[float | None], confidence: float = CONFIDENCE) -> Interval:
    """BCa bootstrap interval of the mean (``scipy.stats.bootstrap``, fixed seed).

    Where it differs from scipy's, deliberately: None and non-finite values are dropped
    (scipy's interval would be NaN); one value has no interval (scipy refuses it); identical
    values have a zero-width one (scipy's BCa is NaN there, with a DegenerateDataWarning)."""
    x = _finite(values)
    if len(x) == 0:
        return NONE
    mean = float(x.mean())
    if len(x) < 2:
        return Interval(mean, math.nan, math.nan, 1)
    if np.ptp(x) == 0:
        return Interval(mean, mean, mean, len(x))  # every resample is the same: BCa undefined
    res = st.bootstrap((x,), _mean, confidence_level=confidence, n_resamples=N_RESAMPLES,
                       method="BCa", vectorized=True, rng=np.random.default_rng(SEED))  # fmt: skip
    ci = res.confidence_interval
    return Interval(mean, float(ci.low), float(ci.high), len(x))


def t_interval(values: Sequence[float | None], confidence: float = CONFIDENCE) -> Interval:
    """Student-t interval of the mean: ``ttest_1samp`` on the gaps, which is ``ttest_rel`` on
    the two arms' losses. None and non-finite values are dropped (scipy's would be NaN);
    identical values give scipy's zero-width interval, without its precision-loss warning."""
    x = _finite(values)
    if len(x) < 2:
        return NONE if len(x) == 0 else Interval(float(x[0]), math.nan, math.nan, 1)
    mean = float(x.mean())
    if np.ptp(x) == 0:
        return Interval(mean, mean, mean, len(x))  # sd 0: the t statistic is undefined
    ci = st.ttest_1samp(x, 0.0).confidence_interval(confidence)
    return Interval(mean, float(ci.low), float(ci.high), len(x))


def _check_alternative(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be two-sided, greater or less, not {alternative!r}")


def sign_flip_p(values: Sequence[float | None], alternative: str = "two-sided") -> float:
    """p-value of the sign-flip permutation test of mean 0 (``permutation_test``,
    ``permutation_type="samples"`` on one sample): exact up to ``EXACT_MAX_PAIRS`` values,
    Monte Carlo with ``N_RESAMPLES`` fixed-seed patterns above. ``alternative``: "two-sided"
    (the ladder's tests), or "greater" / "less" for a one-sided test fixed beforehand (a
    pre-registered replication).

    scipy's p in every case it takes, zero gaps kept (a zero is a pattern that ties both ways,
    unlike ``wilcoxon``'s default zero_method), two-sided = twice the smaller one-sided p,
    capped at 1. Where it differs, deliberately: None and non-finite values (a crashed arm) are
    dropped, where scipy's p would be NaN; no value left is NaN; one value gets scipy's formula
    over its two sign patterns (1, or 0.5 on the claimed side), where scipy refuses a sample
    of one.

    >>> sign_flip_p([0.1, 0.2, 0.3]), sign_flip_p([0.1, 0.2, 0.3], alternative="greater")
    (0.25, 0.125)"""
    _check_alternative(alternative)  # before any data rule: a misspelt side is refused always
    x = _finite(values)
    if len(x) == 0:
        return math.nan
    if not np.any(x):
        return 1.0  # all zero: every sign pattern ties
    if len(x) == 1:  # its two sign patterns: equally extreme, or one of them on the claimed side
        claimed = {"two-sided": False, "greater": x[0] > 0, "less": x[0] < 0}[alternative]
        return 0.5 if claimed else 1.0
    exact = len(x) <= EXACT_MAX_PAIRS
    res = st.permutation_test((x,), _mean, permutation_type="samples", vectorized=True,
                              n_resamples=np.inf if exact else N_RESAMPLES,
                              alternative=alternative, rng=np.random.default_rng(SEED))  # fmt: skip
    return float(res.pvalue)


def min_pairs(alpha: float = ALPHA, alternative: str = "two-sided") -> int:
    """The fewest pairs at which the exact sign-flip test can reach p < ``alpha`` at all.

    Its smallest p is that of every gap on one side: 1/2^n one-sided and, as scipy doubles the
    smaller tail, 2/2^n two-sided. ``MIN_PAIRS`` is this at the default (2/64 < 0.05); a
    one-sided test at 0.05 needs 5 (1/32), a two-sided one at 0.01 needs 8 (2/256).

    >>> min_pairs(), min_pairs(alternative="greater"), min_pairs(0.01)
    (6, 5, 8)"""
    _check_alternative(alternative)
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    tails = 2 if alternative == "two-sided" else 1
    n = 1
    while tails / 2**n >= alpha:  # exact powers of two: no rounding in the comparison
        n += 1
    return n


def _t_quantiles(n: int, alpha: float, power: float, alternative: str) -> float:
    df = n - 1
    crit = 1 - alpha / 2 if alternative == "two-sided" else 1 - alpha
    return float(st.t.ppf(crit, df) + st.t.ppf(power, df))


def detectable_gap(sd: float, n: int, alpha: float = ALPHA, power: float = POWER,
                   alternative: str = "two-sided") -> float:  # fmt: skip
    """The smallest mean gap that ``n`` pairs with spread ``sd`` detect at ``power``.

    t-based: (t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n) (t_{1-alpha} one-sided), the
    paired t-test's power (within 1% of the exact noncentral-t answer at n >= 6; the sign-flip
    test has a little less at the smallest n). NaN without a spread, and below
    :func:`min_pairs`: there the sign-flip test the claims use cannot reject, whatever the gap
    (the t formula would still give a number)."""
    _check_alternative(alternative)
    if n < max(2, min_pairs(alpha, alternative)) or not math.isfinite(sd):
        return math.nan
    return _t_quantiles(n, alpha, power, alternative) * sd / math.sqrt(n)


def seeds_needed(sd: float, gap: float = TARGET_GAP, alpha: float = ALPHA,
                 power: float = POWER, alternative: str = "two-sided") -> int | None:  # fmt: skip
    """Pairs needed to detect a mean ``gap`` with spread ``sd``: the fewest at which
    :func:`detectable_gap` reaches it, never below :func:`min_pairs` (``alpha`` and
    ``alternative`` are the test's). None when the spread or the gap is unknown, the gap is not
    positive, or the answer exceeds ``MAX_SEEDS``."""
    _check_alternative(alternative)
    if not (math.isfinite(sd) and gap > 0):  # NaN compares False: an unknown gap too
        return None
    floor = min_pairs(alpha, alternative)
    z = float(st.norm.ppf(1 - alpha / 2 if alternative == "two-sided" else 1 - alpha))
    # the normal approximation needs fewer seeds than the t one: start from it, step up
    root = (z + float(st.norm.ppf(power))) * sd / gap  # Python floats: inf when it overflows
    start = root * root  # not root ** 2, which raises OverflowError past the float range
    if not start <= MAX_SEEDS:
        return None
    n = max(floor, math.floor(start))
    while n <= MAX_SEEDS:
        if detectable_gap(sd, n, alpha, power, alternative) <= gap:
            return n
        n += 1
    return None


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted among the tests)."""
    p = [float(v) for v in pvalues]
    tested = sorted((v, i) for i, v in enumerate(p) if math.isfinite(v))
    out = [math.nan] * len(p)
    running, m = 0.0, len(tested)
    for rank, (v, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * v))  # monotone: never below an earlier one
        out[i] = running
    return out


def fixed_sequence(pvalues: Sequence[float], alpha: float = ALPHA) -> int:
    """How many of the hypotheses, tested in the given order each at ``alpha``, are rejected:
    the sequence stops at the first p >= alpha (or NaN). This keeps the family-wise error at
    ``alpha`` without adjusting, because a later test is only looked at after every earlier
    one was rejected."""
    k = 0
    for p in pvalues:
        if not p < alpha:
            break
        k += 1
    return k


def fisher(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided p-value of Fisher's exact test of k1/n1 against k2/n2 (NaN if an n is 0)."""
    if n1 <= 0 or n2 <= 0:
        return math.nan
    return float(st.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]).pvalue)


def fisher_detectable(n: int, alpha: float = ALPHA) -> int | None:
    """The fewest collapses of ``n`` seeds that Fisher's test tells from 0 of ``n``."""
    return next((k for k in range(1, n + 1) if fisher(k, n, 0, n) < alpha), None)


@dataclass(frozen=True)
class PairedTest:
    """What the seeds' paired gaps say: n, mean, sd, sign-flip p, t and BCa intervals, power."""

    n: int
    mean: float
    sd: float
    p: float
    t: Interval
    bca: Interval
    detectable: float  # the smallest mean gap these seeds detect at 80% power (NaN below 6)
    seeds_for_target: int | None  # pairs a TARGET_GAP would need

    @property
    def exact(self) -> bool:
        return self.n <= EXACT_MAX_PAIRS

    @property
    def enough(self) -> bool:
        return self.n >= MIN_PAIRS

    def positive(self, alpha: float = ALPHA) -> bool:
        """Enough pairs, p below alpha, and the mean above 0."""
        return self.enough and self.p < alpha and self.mean > 0

    def text(self) -> str:
        how = "exact" if self.exact else f"{N_RESAMPLES:,} random patterns"
        return (f"gap {self.mean:+.3f} nats, n = {self.n}, sd {self.sd:.3f}, sign-flip "
                f"p = {p_text(self.p)} ({how}), 95% t {_ends(self.t)}, BCa {_ends(self.bca)}")  # fmt: skip


def _ends(iv: Interval) -> str:
    return "n/a" if math.isnan(iv.lo) else f"[{iv.lo:+.3f}, {iv.hi:+.3f}]"


def paired_test(gaps: Sequence[float | None]) -> PairedTest:
    """Every statistic of one set of paired gaps (None and non-finite values dropped); the p
    is two-sided, and the power figures are for the two-sided test at ``ALPHA``."""
    x = _finite(gaps)
    n = len(x)
    sd = float(np.std(x, ddof=1)) if n >= 2 else math.nan
    return PairedTest(
        n=n, mean=float(x.mean()) if n else math.nan, sd=sd, p=sign_flip_p(x),
        t=t_interval(x), bca=bootstrap_mean(x), detectable=detectable_gap(sd, n),
        seeds_for_target=seeds_needed(sd),
    )  # fmt: skip


def p_text(p: float) -> str:
    """A p-value to two significant digits ("0.031", "0.0078", "1")."""
    return "n/a" if not math.isfinite(p) else f"{p:.2g}"


def insufficient(counts: dict[str, int], needs: str = "a threshold") -> str:
    """``insufficient seeds: 2 pairs at 12m, 30m (a threshold needs ≥ 6)`` for the places
    (rungs, cells) whose pair count is below ``MIN_PAIRS``; grouped by count."""
    by_n: dict[int, list[str]] = {}
    for where, n in counts.items():
        by_n.setdefault(int(n), []).append(where)
    parts = [f"{n} pair{'s' * (n != 1)} at {', '.join(w)}" for n, w in sorted(by_n.items())]
    return f"insufficient seeds: {'; '.join(parts)} ({needs} needs ≥ {MIN_PAIRS})"
