"""The seed statistics (on scipy.stats) against values computed by hand."""

from __future__ import annotations

import math

import pytest

from andrea_diag.stats import (
    MIN_PAIRS,
    bootstrap_mean,
    detectable_gap,
    fisher,
    fisher_detectable,
    fixed_sequence,
    holm,
    insufficient,
    paired_test,
    seeds_needed,
    sign_flip_p,
    t_interval,
    wilson,
)

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


def test_sign_flip_p_of_6_positive_pairs_is_2_of_64() -> None:
    # all 2^6 = 64 sign patterns; only all-plus and all-minus are as extreme: 2/64
    assert sign_flip_p([0.03, 0.01, 0.02, 0.04, 0.02, 0.03]) == pytest.approx(2 / 64, abs=1e-12)


def test_one_sided_sign_flip_p_counts_only_the_claimed_side() -> None:
    """The replication's one-sided test: the share of the 64 sign patterns of [+1 x5, -1]
    whose mean is at least the observed one (7 of 64: no minus sign, or one), counted here by
    enumeration, against the two-sided 14 of 64."""
    gaps = [1, 1, 1, 1, 1, -1]
    mean = sum(gaps) / 6
    patterns = [[g * (1 - 2 * ((k >> i) & 1)) for i, g in enumerate(gaps)] for k in range(64)]
    at_least = sum(sum(p) / 6 >= mean - 1e-12 for p in patterns)
    assert sign_flip_p(gaps, alternative="greater") == pytest.approx(at_least / 64)
    assert sign_flip_p(gaps, alternative="less") == pytest.approx(
        sum(sum(p) / 6 <= mean + 1e-12 for p in patterns) / 64
    )
    assert sign_flip_p([0.4], alternative="greater") == 0.5
    assert sign_flip_p([0.4], alternative="less") == 1.0
    with pytest.raises(ValueError, match="alternative"):
        sign_flip_p(gaps, alternative="bigger")


def test_min_pairs_is_the_smallest_n_whose_sign_flip_test_can_reach_005() -> None:
    # every gap on one side is the most extreme pattern: p = 2 / 2^n
    assert sign_flip_p([0.1] * (MIN_PAIRS - 1)) == pytest.approx(2 / 32)  # 0.0625: never < 0.05
    p = sign_flip_p([0.1] * MIN_PAIRS)
    assert p == pytest.approx(2 / 64) and p < 0.05
    assert MIN_PAIRS == 6


def test_sign_flip_p_counts_the_patterns_at_least_as_extreme() -> None:
    # five +1 and one -1: sum 4; |sum| >= 4 needs at most one minus sign: 1 + 6 = 7 of 64
    # patterns per side, two-sided 14/64
    assert sign_flip_p([1, 1, 1, 1, 1, -1]) == pytest.approx(14 / 64)
    assert sign_flip_p([0.0, 0.0, 0.0]) == 1.0 and math.isnan(sign_flip_p([]))
    assert sign_flip_p([0.4]) == 1.0 and paired_test([0.4]).n == 1  # one seed: no evidence


def test_sign_flip_p_above_16_pairs_is_monte_carlo_with_a_fixed_seed() -> None:
    gaps = [0.01 * (i % 3 + 1) for i in range(20)]  # 20 positive gaps: 2^20 patterns
    p = sign_flip_p(gaps)
    # no random pattern of 10,000 reaches the observed one: (0 + 1) / (10,000 + 1) per side
    assert p == pytest.approx(2 / 10_001) and sign_flip_p(gaps) == p
    assert not paired_test(gaps).exact and paired_test(gaps[:16]).exact


def test_t_interval_matches_the_hand_computed_one() -> None:
    # {1, 2, 3}: mean 2, sd 1, se 1/sqrt(3); t(0.975, 2) = 4.302653 -> 2 -/+ 2.484138
    got = t_interval([1.0, 2.0, 3.0])
    assert (got.estimate, got.n) == (2.0, 3)
    assert got.lo == pytest.approx(-0.484138, abs=1e-6)
    assert got.hi == pytest.approx(4.484138, abs=1e-6)
    assert math.isnan(t_interval([0.3]).lo) and t_interval([0.2, 0.2]).lo == 0.2


def test_bca_bootstrap_of_small_samples_ends_at_the_extremes() -> None:
    # scipy.stats.bootstrap(method="BCa", seed 0): {0, 1} -> [0, 1], {1, 2, 3} -> [1, 3]
    got = bootstrap_mean([0.0, 1.0])
    assert (got.estimate, got.lo, got.hi, got.n) == (0.5, 0.0, 1.0, 2)
    got = bootstrap_mean([1.0, 2.0, 3.0])
    assert (got.estimate, got.lo, got.hi) == (2.0, 1.0, 3.0)


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


def test_holm_adjusts_step_down_and_stays_monotone() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> 0.06 (monotone)
    got = holm([0.01, 0.04, 0.03, 0.005])
    assert got == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # an untested rung (NaN) is not counted: two tests, 0.02 * 2 = 0.04 and 0.3
    got = holm([0.02, math.nan, 0.3])
    assert got[0] == pytest.approx(0.04) and math.isnan(got[1]) and got[2] == pytest.approx(0.3)


def test_fixed_sequence_stops_at_the_first_non_rejection() -> None:
    assert fixed_sequence([0.01, 0.03, 0.2, 0.001]) == 2  # the last p is never looked at
    assert fixed_sequence([0.06, 0.001]) == 0
    assert fixed_sequence([0.01, math.nan]) == 1


def test_fisher_exact_on_3_of_8_against_0_of_8_is_02() -> None:
    # margins 8/8 and 3/13: P(k) = C(8,k) C(8,3-k) / C(16,3) = 56, 224, 224, 56 (/560) for
    # k = 0..3; the tables as unlikely as k = 3 are k = 3 and k = 0: 0.1 + 0.1
    assert fisher(3, 8, 0, 8) == pytest.approx(0.2)
    assert math.isnan(fisher(0, 0, 1, 2))


def test_fisher_with_8_seeds_per_arm_tells_5_collapses_from_none() -> None:
    # 4/8 vs 0/8: 2 * C(8,4)/C(16,4) = 2 * 70/1820 = 0.077; 5/8: 2 * 56/4368 = 0.026
    assert fisher(4, 8, 0, 8) == pytest.approx(140 / 1820)
    assert fisher_detectable(8) == 5


def test_power_matches_the_hand_calculation() -> None:
    # n = 6: t(0.975, 5) = 2.570582, t(0.80, 5) = 0.919544; 3.490126 * 0.01 / sqrt(6) = 0.014248
    assert detectable_gap(0.01, 6) == pytest.approx(0.014248, abs=1e-6)
    # sd = gap = 0.02 (effect size 1): n = 9 gives (2.306004 + 0.888890) / 3 = 1.065 > 1,
    # n = 10 gives (2.262157 + 0.883029) / sqrt(10) = 0.9946 <= 1
    assert seeds_needed(0.02, 0.02) == 10
    assert seeds_needed(0.0) == MIN_PAIRS  # no spread: the floor is the sign test's minimum
    assert seeds_needed(math.nan) is None and math.isnan(detectable_gap(0.01, 1))


def test_paired_test_reports_n_sd_p_and_both_intervals() -> None:
    t = paired_test([0.03, 0.01, 0.02, 0.04, 0.02, 0.03, float("nan")])
    assert t.n == 6 and t.enough and t.positive()
    # mean 0.025; squared deviations (1e-6) 25 + 225 + 25 + 225 + 25 + 25 = 550; / 5 -> 110
    assert t.sd == pytest.approx(math.sqrt(110e-6))
    assert t.t.lo < t.mean < t.t.hi and t.bca.lo < t.mean < t.bca.hi
    assert t.detectable == pytest.approx(detectable_gap(t.sd, 6))
    assert not paired_test([0.1] * 5).positive()  # p = 0.0625 and too few pairs


def test_insufficient_names_each_short_place_with_its_count() -> None:
    assert insufficient({"12m": 5}) == "insufficient seeds: 5 pairs at 12m (a threshold needs ≥ 6)"
    got = insufficient({"120m": 2, "12m": 2, "30m": 1}, "a call")
    assert got == "insufficient seeds: 1 pair at 30m; 2 pairs at 120m, 12m (a call needs ≥ 6)"
