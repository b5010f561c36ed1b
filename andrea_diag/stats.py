"""Intervals for seeds: a Wilson interval for a rate, a bootstrap interval for a mean.

    >>> wilson(1, 3)                       # 1 of 3 seeds collapsed
    Interval(estimate=0.333..., lo=0.0614..., hi=0.792..., n=3)
    >>> bootstrap_mean([0.39, 0.26, -0.05, -0.10])   # paired gaps, one per seed

Both return an :class:`Interval`; a finding may call a difference real only when its interval
excludes 0 (:meth:`Interval.excludes_zero`). scipy has both (``binomtest(...).proportion_ci``,
``scipy.stats.bootstrap``) but is not a dependency, and the two formulas are a few lines of
numpy plus the standard library's normal quantile, so they live here.

*Small samples.* The percentile bootstrap under-covers with few seeds: with 3 all-positive gaps
its lower end is the smallest gap (each resample that repeats it has probability 1/27 > 2.5%).
The interval says "with these seeds"; it is not a substitute for more of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

CONFIDENCE = 0.95
N_BOOT = 10_000  # resamples: the percentile's Monte Carlo error is well under the seeds' spread
BOOT_SEED = 0  # a fixed resampling seed: the same records give the same interval every time


@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided interval; ``lo``/``hi`` are NaN when it has none."""

    estimate: float
    lo: float
    hi: float
    n: int

    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0  # NaN compares False: no interval, no call

    def above(self, other: Interval) -> bool:
        """Non-overlapping and higher: this interval's low end is above the other's high end."""
        return self.lo > other.hi

    def text(self, digits: int = 2) -> str:
        if math.isnan(self.estimate):
            return "n/a"
        if math.isnan(self.lo):
            return f"{self.estimate:.{digits}f} (no interval, n={self.n})"
        return f"{self.estimate:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


NONE = Interval(math.nan, math.nan, math.nan, 0)


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2)  # 1.959964 for 95%


def wilson(k: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson score interval for ``k`` successes in ``n`` trials (Wilson 1927).

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0/n or n/n.
    """
    if n <= 0:
        return NONE
    if not 0 <= k <= n:
        raise ValueError(f"wilson: need 0 <= k <= n, got k={k}, n={n}")
    z = _z(confidence)
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # clamp rounding at the ends: 0/n must give exactly 0, n/n exactly 1
    return Interval(p, max(0.0, center - half), min(1.0, center + half), n)


def bootstrap_mean(
    values: Sequence[float],
    confidence: float = CONFIDENCE,
    n_boot: int = N_BOOT,
    seed: int = BOOT_SEED,
) -> Interval:
    """Percentile bootstrap interval of the mean of ``values`` (NaNs dropped).

    Fewer than two values give the mean without an interval: one seed cannot show a spread.
    """
    x = np.asarray([v for v in values if v is not None], dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return NONE
    mean = float(x.mean())
    if len(x) < 2:
        return Interval(mean, math.nan, math.nan, len(x))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)  # (n_boot,)
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return Interval(mean, float(lo), float(hi), len(x))
