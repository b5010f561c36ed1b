"""Wilson and bootstrap intervals against values computed by hand."""

from __future__ import annotations

import math

import pytest

from andrea_diag.stats import Interval, bootstrap_mean, wilson

# Wilson: center = (p + z²/2n) / (1 + z²/n), half = z/(1 + z²/n) · sqrt(p(1-p)/n + z²/4n²),
# z = 1.959964, z² = 3.841459. With n = 3: 1 + z²/3 = 2.280486, z²/6 = 0.640243.
#   0/3: center = 0.640243 / 2.280486 = 0.280749; half = (z/2.280486)·(z/6) = 0.280749
#        -> [0, 0.561497]
#   3/3: the mirror image -> [0.438503, 1]
#   1/3: center = (0.333333 + 0.640243) / 2.280486 = 0.426916;
#        half = 0.859451 · sqrt(0.074074 + 0.106707) = 0.859451 · 0.425183 = 0.365424
#        -> [0.061492, 0.792340]
#   5/10: center = (0.5 + 0.192073) / 1.384146 = 0.5; half = 1.415990 · sqrt(0.025 + 0.009604)
#        = 1.415990 · 0.186020 = 0.263407 -> [0.236593, 0.763407]
WILSON_BY_HAND = [
    (0, 3, 0.0, 0.561497),
    (3, 3, 0.438503, 1.0),
    (1, 3, 0.061492, 0.792340),
    (5, 10, 0.236593, 0.763407),
]


@pytest.mark.parametrize(("k", "n", "lo", "hi"), WILSON_BY_HAND)
def test_wilson_matches_the_hand_computed_interval(k: int, n: int, lo: float, hi: float) -> None:
    got = wilson(k, n)
    assert got.estimate == pytest.approx(k / n)
    assert got.lo == pytest.approx(lo, abs=1e-6)
    assert got.hi == pytest.approx(hi, abs=1e-6)
    assert got.n == n


def test_wilson_of_no_trials_has_no_interval_and_a_bad_count_is_refused() -> None:
    assert math.isnan(wilson(0, 0).estimate)
    with pytest.raises(ValueError):
        wilson(4, 3)


def test_bootstrap_of_two_values_spans_both() -> None:
    # {0, 1}: resample means are 0, 0.5, 1 with probability 1/4, 1/2, 1/4, so the 2.5% and
    # 97.5% quantiles are 0 and 1 exactly (each end holds 25% of the mass)
    got = bootstrap_mean([0.0, 1.0])
    assert (got.estimate, got.lo, got.hi, got.n) == (0.5, 0.0, 1.0, 2)


def test_bootstrap_of_three_values_ends_at_the_extremes() -> None:
    # {1, 2, 3}: P(mean = 1) = P(mean = 3) = 1/27 = 3.7% > 2.5%, so the ends are 1 and 3;
    # the mean is 2
    got = bootstrap_mean([1.0, 2.0, 3.0])
    assert (got.estimate, got.lo, got.hi) == (2.0, 1.0, 3.0)
    assert got.excludes_zero()


def test_bootstrap_of_a_constant_is_that_constant_and_of_one_value_has_no_interval() -> None:
    assert bootstrap_mean([0.2, 0.2, 0.2]).lo == pytest.approx(0.2)
    one = bootstrap_mean([0.39])
    assert one.estimate == 0.39 and math.isnan(one.lo) and not one.excludes_zero()
    assert math.isnan(bootstrap_mean([]).estimate)
    assert bootstrap_mean([1.0, float("nan"), 3.0]).n == 2  # NaN (a crashed arm) dropped


def test_bootstrap_is_reproducible_and_straddles_zero_for_mixed_signs() -> None:
    gaps = [0.39, 0.26, -0.05, -0.10]  # pilot 4, 120m (training loss): no call with 4 seeds
    a, b = bootstrap_mean(gaps), bootstrap_mean(gaps)
    assert a == b
    assert a.lo < 0 < a.hi and not a.excludes_zero()


def test_interval_above_needs_no_overlap() -> None:
    assert Interval(0.9, 0.6, 1.0, 5).above(Interval(0.1, 0.0, 0.5, 5))
    assert not Interval(0.9, 0.4, 1.0, 5).above(Interval(0.1, 0.0, 0.5, 5))
