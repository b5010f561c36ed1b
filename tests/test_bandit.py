"""Tests for the bandit mixer: phase lengths, weights, determinism, and the exp3 policy.

pytest tests/test_bandit.py -q
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from andrea_diag.config import SOURCE_NAMES
from andrea_diag.data.bandit import MIN_SHIFT, PHASE_LENGTHS, Mixer
from andrea_diag.errors import UserError

N = 1200  # the pilot's run length


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31))
def test_seeded_schedule_properties(seed):
    phases = Mixer(seed).schedule(N)
    assert phases[0].start == 1 and phases[-1].end >= N
    for prev, cur in itertools.pairwise(phases):
        assert cur.start == prev.end + 1 and cur.index == prev.index + 1  # contiguous
    for p in phases:
        assert p.length in PHASE_LENGTHS
        assert tuple(p.weights) == SOURCE_NAMES
        assert math.isclose(sum(p.weights.values()), 1.0, abs_tol=1e-12)
        assert all(w > 0 for w in p.weights.values())
    for prev, cur in itertools.pairwise(phases):  # every boundary is a genuine shock
        assert cur.dominant != prev.dominant
        assert sum(abs(cur.weights[n] - prev.weights[n]) for n in SOURCE_NAMES) >= MIN_SHIFT


def test_lengths_cover_the_menu():
    lengths = {p.length for p in Mixer(0).schedule(5000)}
    assert lengths == set(PHASE_LENGTHS)


def test_same_seed_same_schedule_different_seed_differs():
    a = [p.to_dict() for p in Mixer(7).schedule(N)]
    b = [p.to_dict() for p in Mixer(7).schedule(N)]
    c = [p.to_dict() for p in Mixer(8).schedule(N)]
    assert a == b and a != c


def test_query_order_does_not_matter():
    fwd = Mixer(3)
    back = Mixer(3)
    late = back.phase_at(900)  # jump ahead first
    assert fwd.phase_at(900) == late
    assert [fwd.phase_at(u).weights for u in range(1, 300)] == [
        back.phase_at(u).weights for u in range(1, 300)
    ]


def test_boundaries_and_is_boundary_agree():
    m = Mixer(1)
    bounds = m.boundaries(N)
    assert bounds == [p.start for p in m.schedule(N)[1:] if p.start <= N]
    assert [u for u in range(1, N + 1) if m.is_boundary(u)] == bounds
    assert not m.is_boundary(1)
    for u in bounds:
        assert m.phase_at(u).index == m.phase_at(u - 1).index + 1


def test_seeded_observe_is_noop():
    m = Mixer(0)
    before = [p.to_dict() for p in m.schedule(200)]
    fresh = Mixer(0)
    for u in range(1, 200):
        fresh.observe(u, {"repo-docs": 9.0, "gutenberg": 1.0, "hermes3-general": 1.0})
    assert [p.to_dict() for p in fresh.schedule(200)] == before


def _run_exp3(losses, n=150, seed=0, **kw):
    m = Mixer(seed, policy="exp3", **kw)
    for u in range(1, n + 1):
        m.phase_at(u)
        m.observe(u, losses)
    return m


def test_exp3_shifts_weight_to_higher_loss_source():
    m = _run_exp3({"repo-docs": 2.0, "gutenberg": 4.0, "hermes3-general": 2.0})
    first, last = m.phase_at(1), m.phase_at(150)
    assert math.isclose(first.weights["gutenberg"], 1 / 3)  # starts uniform
    assert last.dominant == "gutenberg"
    assert last.weights["gutenberg"] > 0.6
    assert min(last.weights.values()) >= m.gamma / 3 - 1e-12  # exploration floor
    for p in m.schedule(150):
        assert math.isclose(sum(p.weights.values()), 1.0, abs_tol=1e-12)


def test_exp3_follows_a_change_of_losses():
    m = Mixer(0, policy="exp3")
    for u in range(1, 301):
        m.phase_at(u)
        hard = "repo-docs" if u <= 150 else "hermes3-general"
        m.observe(u, {n: (5.0 if n == hard else 2.0) for n in SOURCE_NAMES})
    assert m.phase_at(140).dominant == "repo-docs"
    assert m.phase_at(300).dominant == "hermes3-general"


def test_exp3_weights_change_only_at_boundaries_and_share_lengths():
    m = _run_exp3({"repo-docs": 3.0, "gutenberg": 1.0, "hermes3-general": 2.0}, n=400)
    assert m.boundaries(400) == Mixer(0).boundaries(400)  # same boundaries as seeded
    for u in range(2, 401):
        if not m.is_boundary(u):
            assert m.phase_at(u).weights == m.phase_at(u - 1).weights


def test_exp3_ignores_nonfinite_losses():
    a = _run_exp3({"repo-docs": 2.0, "gutenberg": 2.0, "hermes3-general": 2.0})
    b = Mixer(0, policy="exp3")
    for u in range(1, 151):
        b.phase_at(u)
        b.observe(u, {"repo-docs": 2.0, "gutenberg": 2.0, "hermes3-general": 2.0})
        b.observe(u, {"gutenberg": float("nan"), "repo-docs": float("inf")})
    assert [p.to_dict() for p in a.schedule(150)] == [p.to_dict() for p in b.schedule(150)]


def test_bad_policy_is_user_error():
    with pytest.raises(UserError, match="unknown mixer"):
        Mixer(0, policy="ucb")
    with pytest.raises(UserError):
        Mixer(0, policy="exp3", gamma=1.5)


def test_a_sharper_mixer_keeps_the_boundaries_and_lets_one_source_dominate_each_phase():
    tops: dict[float, list[float]] = {1.0: [], 4.0: []}
    rarest: dict[float, list[float]] = {1.0: [], 4.0: []}
    for seed in range(20):
        assert Mixer(seed, sharpness=4.0).boundaries(N) == Mixer(seed).boundaries(N)
        for k in tops:
            phases = Mixer(seed, sharpness=k).schedule(N)
            for p in phases:
                w = sorted(p.weights.values())
                tops[k].append(w[-1])
                rarest[k].append(w[0])
            for prev, cur in itertools.pairwise(phases):  # still a shock at every boundary
                assert cur.dominant != prev.dominant
                assert sum(abs(cur.weights[n] - prev.weights[n]) for n in SOURCE_NAMES) >= MIN_SHIFT
    mean = {k: sum(v) / len(v) for k, v in tops.items()}
    assert mean[1.0] < 0.5 < 0.7 < mean[4.0]  # the seeds' mixer: about half; sharp: ~70%
    assert sorted(rarest[4.0])[len(rarest[4.0]) // 2] < 0.05 < min(rarest[1.0])
    assert Mixer(0, sharpness=4.0).describe()["sharpness"] == 4.0
    assert Mixer(0).describe()["sharpness"] == 1.0


@pytest.mark.parametrize("bad", [0.0, -1.0, 0.1, 0.49, math.inf, math.nan])
def test_a_mixer_sharpness_too_flat_for_a_boundary_shift_or_not_a_number_is_refused(bad):
    with pytest.raises(UserError, match=r"mixer sharpness must be at least 0\.5"):
        Mixer(0, sharpness=bad)


def test_the_lowest_allowed_sharpness_still_shifts_every_boundary_by_the_minimum():
    phases = Mixer(0, sharpness=0.5).schedule(1200)
    for a, b in itertools.pairwise(phases):
        shift = sum(abs(a.weights[n] - b.weights[n]) for n in a.weights)
        assert shift >= MIN_SHIFT - 1e-12


def test_a_mixer_restored_from_a_checkpoint_before_the_knob_reads_as_the_seeds_mixer():
    from andrea_diag.train.state_codec import decode, encode

    tree, tensors = encode(Mixer(0))
    restored = decode(_without_key(tree, "sharpness"), tensors)
    assert "sharpness" not in vars(restored)  # as an old checkpoint gives it back
    # a phase drawn after the restore, and the schedule's record, use the seeds' weights
    far = restored.phase_at(2000)
    assert far.weights == Mixer(0).phase_at(2000).weights
    assert restored.describe()["sharpness"] == 1.0


def _without_key(state, key):
    """``state`` with every mapping's ``key`` removed (an older object's encoded attributes)."""
    if isinstance(state, dict):
        return {k: _without_key(v, key) for k, v in state.items() if k != key}
    if isinstance(state, list):
        return [_without_key(v, key) for v in state]
    return state
