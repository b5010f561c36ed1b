"""Parity review (s28b): the seed statistics (``andrea_diag/stats.py``) against scipy 1.17.

Every test and interval was already scipy's own call (binomtest's Wilson interval, bootstrap's
BCa, permutation_test's sign flips, ttest_1samp's interval, fisher_exact), and agreed with it on
every input scipy takes. What did not hold was around them: the "seeds that would suffice"
(floored at the two-sided 0.05 minimum whatever alpha and side it was asked for, two-sided only,
a crash on a NaN or overflowing gap), a power figure below the fewest pairs the exact test can
reject with, ``ALPHA`` one rounding above 0.05, and a misspelt side passed when no value was left.

    pytest tests/test_parity_s28b_stats.py -q -p no:cacheprovider
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as st

from andrea_diag import stats


def _scipy_sign_flip(x: list[float], alternative: str) -> float:
    """scipy's own exact sign-flip p (permutation_test, permutation_type="samples")."""
    res = st.permutation_test((np.asarray(x),), lambda a, axis=-1: np.mean(a, axis=axis),
                              permutation_type="samples", vectorized=True, n_resamples=np.inf,
                              alternative=alternative)  # fmt: skip
    return float(res.pvalue)


@pytest.mark.parametrize(
    ("alpha", "alternative", "fewest"),
    [(0.05, "two-sided", 6), (0.05, "greater", 5), (0.05, "less", 5), (0.01, "two-sided", 8),
     (0.01, "greater", 7), (0.1, "two-sided", 5)],
)  # fmt: skip
def test_min_pairs_is_the_fewest_pairs_at_which_scipys_exact_test_can_reject(
    alpha: float, alternative: str, fewest: int
) -> None:
    """The smallest p of n pairs is every gap on the tested side; one pair fewer never gets
    below alpha, in scipy's own test."""
    assert stats.min_pairs(alpha, alternative) == fewest
    side = -1.0 if alternative == "less" else 1.0
    assert _scipy_sign_flip([side * 0.1] * fewest, alternative) < alpha
    assert _scipy_sign_flip([side * 0.1] * (fewest - 1), alternative) >= alpha
    assert stats.min_pairs() == stats.MIN_PAIRS  # the pages' constant is the same rule


def test_alpha_is_005_exactly_so_a_p_of_005_is_not_below_it() -> None:
    """``ALPHA = 1 - CONFIDENCE`` was 0.050000000000000044: "p < 0.05" called p = 0.05
    significant."""
    assert stats.ALPHA == 0.05 and stats.CONFIDENCE == 1 - stats.ALPHA
    assert stats.fixed_sequence([0.05]) == 0


def test_seeds_needed_never_goes_below_the_exact_tests_minimum_at_its_alpha() -> None:
    """No spread: any gap is detected from the first n the test can reject at; at alpha 0.01
    that is 8 pairs (2/256), not the 0.05 floor of 6."""
    assert stats.seeds_needed(0.0, alpha=0.01) == 8
    assert stats.seeds_needed(0.0) == 6


def test_a_one_sided_seed_count_uses_the_one_sided_quantile_and_floor() -> None:
    """The smallest n with (t_{0.95, n-1} + t_{0.80, n-1}) * sd / sqrt(n) <= gap, from 5."""
    sd, gap = 0.05, 0.02
    n = 5
    while (st.t.ppf(0.95, n - 1) + st.t.ppf(0.80, n - 1)) * sd / math.sqrt(n) > gap:
        n += 1
    assert stats.seeds_needed(sd, gap, alternative="greater") == n == 41
    assert stats.seeds_needed(sd, gap) == 52  # two-sided needs more
    assert stats.seeds_needed(0.0, alternative="greater") == 5


@pytest.mark.parametrize(("sd", "gap"), [(0.1, math.nan), (1e200, 1e-200)])
def test_seeds_needed_of_an_unknown_or_overflowing_ratio_is_none(sd: float, gap: float) -> None:
    """A NaN gap was a ValueError and a ratio past the float range an OverflowError (floor of
    NaN / inf); both are "unknown" or "more than any feasible number": None."""
    assert stats.seeds_needed(sd, gap) is None


def test_no_gap_is_detectable_below_the_pairs_the_exact_test_can_reject_with() -> None:
    """Five pairs: the two-sided sign-flip test's smallest p is 2/32, so no gap is detected at
    any power; the t formula gave 1.66 sd. A one-sided test at 0.05 rejects from 5."""
    assert math.isnan(stats.detectable_gap(0.01, 5))
    assert stats.detectable_gap(0.01, 6) == pytest.approx(0.014248, abs=1e-6)
    one_sided = (st.t.ppf(0.95, 4) + st.t.ppf(0.80, 4)) * 0.01 / math.sqrt(5)
    assert stats.detectable_gap(0.01, 5, alternative="greater") == pytest.approx(one_sided)


def test_a_misspelt_side_is_refused_even_when_no_value_is_left() -> None:
    """It returned NaN for an empty or all-NaN list, and the call passed unnoticed."""
    for values in ([], [math.nan]):
        with pytest.raises(ValueError, match="alternative must be"):
            stats.sign_flip_p(values, alternative="greater-than")
    with pytest.raises(ValueError, match="alternative must be"):
        stats.seeds_needed(0.05, alternative="one-sided")
