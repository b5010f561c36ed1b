"""Tests for per-update batches: determinism across arms, record/replay, outlier injection.

pytest tests/test_data_batches.py -q
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from andrea_diag.config import SOURCE_NAMES
from andrea_diag.data import (
    BatchPlan,
    Mixer,
    make_outlier_batch,
    outlier_generator,
    prepare_data,
    tokens_hash,
)
from andrea_diag.errors import UserError

M, A, T = 4, 2, 32


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    # Small corpora and vocab: batches do not care about the tokenizer's size.
    return prepare_data(cache_dir=tmp_path_factory.mktemp("cache"), vocab_size=1000,
                        target_bytes=100_000)  # fmt: skip


def plan(data, seed=0, policy="seeded"):
    return BatchPlan(data, Mixer(seed, policy), seed=seed, micro_batch=M, accum=A, seq_len=T)


def test_shapes_and_contents(data):
    b = plan(data).batch(1)
    assert b.tokens.shape == (A, M, T + 1) and b.tokens.dtype == torch.int64
    assert b.source_idx.shape == (A, M) and b.offsets.shape == (A, M)
    assert len(b.hash) == 16 and b.hash == tokens_hash(b.tokens)
    assert not b.injected.any()
    for a in range(A):  # every sequence really is a slice of its source stream
        for i in range(M):
            s = data.streams[SOURCE_NAMES[int(b.source_idx[a, i])]]
            o = int(b.offsets[a, i])
            assert torch.equal(b.tokens[a, i], s[o : o + T + 1])


def test_same_seed_update_same_batch_regardless_of_global_rng(data):
    torch.manual_seed(123)
    b1 = plan(data).batch(17)
    torch.manual_seed(999)  # another arm may use the global RNG differently (dropout, init)
    torch.rand(50)
    b2 = plan(data).batch(17)
    assert torch.equal(b1.tokens, b2.tokens) and b1.hash == b2.hash
    before = torch.get_rng_state()
    plan(data).batch(3)
    assert torch.equal(torch.get_rng_state(), before)  # and drawing batches never consumes it


def test_independent_plans_identical_across_arms(data):
    arm1, arm2 = plan(data), plan(data)
    order = list(range(1, 121))
    h1 = [arm1.batch(u).hash for u in order]
    h2 = [arm2.batch(u).hash for u in reversed(order)][::-1]  # any query order
    assert h1 == h2
    assert len(set(h1)) == len(h1)  # different updates, different batches
    assert [plan(data, seed=1).batch(u).hash for u in order] != h1


def test_sources_follow_phase_weights(data):
    p = BatchPlan(data, Mixer(0), seed=0, micro_batch=64, accum=4, seq_len=8)
    b = p.batch(1)
    freq = torch.bincount(b.source_idx.reshape(-1), minlength=3).double() / 256
    w = torch.tensor([b.weights[n] for n in SOURCE_NAMES])
    assert (freq - w).abs().max() < 0.12
    assert b.phase == 0 and math.isclose(sum(b.weights.values()), 1.0)


def test_replay_equals_recording(data, tmp_path):
    rec = plan(data)
    recorded = [rec.batch(u) for u in range(1, 61)]
    path = rec.save(tmp_path / "plan.json")
    rep = BatchPlan.load(path, data)
    for b in recorded:
        r = rep.batch(b.update)
        assert torch.equal(r.tokens, b.tokens) and r.hash == b.hash
        assert r.phase == b.phase and r.weights == pytest.approx(b.weights)
        assert rep.is_boundary(b.update) == rec.is_boundary(b.update)
    with pytest.raises(UserError, match="no update 61"):
        rep.batch(61)


def test_exp3_record_then_replay(data, tmp_path):
    rec = plan(data, policy="exp3")
    hashes = {}
    for u in range(1, 90):
        b = rec.batch(u)
        hashes[u] = b.hash
        # Arm 1's losses steer the mixer: hermes3-general looks hardest.
        rec.observe(u, {"repo-docs": 2.0, "gutenberg": 2.0, "hermes3-general": 6.0})
    assert rec.batch(89).weights["hermes3-general"] > 0.6
    rec.save(tmp_path / "exp3.json")
    rep = BatchPlan.load(tmp_path / "exp3.json", data)
    for u in range(1, 90):
        rep.observe(u, {"repo-docs": 9.0})  # later arms' losses change nothing
        assert rep.batch(u).hash == hashes[u]


def test_replay_detects_changed_data(data, tmp_path):
    rec = plan(data)
    rec.batch(1)
    path = rec.save(tmp_path / "p.json")
    d = json.loads(path.read_text())
    d["records"][0]["offsets"][0] += 1  # the recording no longer matches the streams
    path.write_text(json.dumps(d))
    with pytest.raises(UserError, match="differs from the recording"):
        BatchPlan.load(path, data).batch(1)
    d["data_key"] = "0" * 64
    path.write_text(json.dumps(d))
    with pytest.raises(UserError, match="different data"):
        BatchPlan.load(path, data)
    with pytest.raises(UserError, match="does not exist"):
        BatchPlan.load(tmp_path / "missing.json", data)


def test_a_prefetched_batch_is_the_one_drawn_at_its_turn_and_recorded_then(data, tmp_path):
    ahead, plain = plan(data), plan(data)
    for u in range(1, 41):  # the trainer's order: batch(u), prefetch(u + 1) before the read
        a, b = ahead.batch(u), plain.batch(u)
        assert torch.equal(a.tokens, b.tokens) and a.hash == b.hash and a.phase == b.phase
        assert list(ahead.records) == list(plain.records) == list(range(1, u + 1))
        ahead.prefetch(u + 1, last=40)
    assert ahead.to_dict() == plain.to_dict()  # nothing drawn past the last update, either
    assert ahead.mixer.describe() == plain.mixer.describe()
    path = plain.save(tmp_path / "plan.json")
    rep, ref = BatchPlan.load(path, data), BatchPlan.load(path, data)
    for u in range(1, 41):  # a replaying arm prefetches too
        assert rep.batch(u).hash == ref.batch(u).hash
        rep.prefetch(u + 1, last=40)


def test_prefetch_draws_nothing_an_unobserved_loss_could_change(data, monkeypatch):
    from andrea_diag.data import batches

    drawn = []
    real = batches.draw_sequences
    monkeypatch.setattr(batches, "draw_sequences", lambda *a, **k: drawn.append(a) or real(*a, **k))
    exp3 = plan(data, policy="exp3")
    exp3.batch(1)
    exp3.prefetch(2, last=10)  # exp3's next phase depends on losses not yet observed
    seeded = plan(data)
    seeded.batch(1)
    seeded.prefetch(12, last=11)  # past the run
    assert len(drawn) == 2
    seeded.prefetch(2, last=11)
    assert len(drawn) == 3 and seeded.batch(2).update == 2 and len(drawn) == 3  # handed over
    seeded.prefetch(3, last=11)
    seeded.batch(4)  # not the prefetched update: drawn anew, the prefetched one dropped
    assert len(drawn) == 5 and sorted(seeded.records) == [1, 2, 4]


def test_a_bad_replayed_record_fails_at_its_own_update_not_at_the_prefetch(data, tmp_path):
    rec = plan(data)
    for u in (1, 2):
        rec.batch(u)
    path = rec.save(tmp_path / "p.json")
    d = json.loads(path.read_text())
    d["records"][1]["offsets"][0] += 1
    path.write_text(json.dumps(d))
    rep = BatchPlan.load(path, data)
    rep.batch(1)
    rep.prefetch(2, last=2)  # no error here: update 1's row is still recorded first
    with pytest.raises(UserError, match="differs from the recording"):
        rep.batch(2)


def test_seq_len_longer_than_a_stream_is_user_error(data):
    short = {n: s[:20] for n, s in data.streams.items()}
    with pytest.raises(UserError, match="fewer than seq_len"):
        BatchPlan(short, Mixer(0), seed=0, micro_batch=2, accum=1, seq_len=T).batch(1)


def test_outlier_batch(data):
    b = plan(data).batch(5)
    rare = data.rare_token_ids(64)
    o1 = make_outlier_batch(b, outlier_generator(0, 5), data.vocab_size, rare, n_sequences=2)
    o2 = make_outlier_batch(b, outlier_generator(0, 5), data.vocab_size, rare, n_sequences=2)
    assert torch.equal(o1.tokens, o2.tokens) and o1.hash == o2.hash != b.hash  # same in every arm
    assert int(o1.injected.sum()) == 2 and o1.injected.any(dim=1).sum() == 1  # one microbatch
    assert torch.isin(o1.tokens[o1.injected], rare).all()
    assert torch.equal(o1.tokens[~o1.injected], b.tokens[~o1.injected])
    assert not b.injected.any()  # the original batch is untouched
    o3 = make_outlier_batch(b, outlier_generator(0, 5), data.vocab_size)  # default pool
    assert (o3.tokens[o3.injected] >= data.vocab_size - 256).all()


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("offsets", (-1,), "does not fit"),
        ("offsets", (10**12,), "does not fit"),
        ("source_idx", (7,), "not one of the plan's cuts"),
        ("source_idx", (-1,), "not one of the plan's cuts"),
        ("offsets", (1.5,), "not one of the plan's cuts"),
        ("offsets", (True,), "not one of the plan's cuts"),
        ("source_idx", [0], "where 8 are drawn"),
        ("offsets", "00000000", "not lists"),
        ("phase", "1", "phase '1'"),
        ("weights", [0.5], "weights"),
        ("weights", (None,), "not numbers"),
    ],
)
def test_a_replayed_record_with_cuts_outside_the_streams_is_a_user_error(
    data, tmp_path, field, value, why
):
    """A plan is a run directory's file: its cuts are checked before any index is taken."""
    rec = plan(data)
    rec.batch(1)
    path = rec.save(tmp_path / "p.json")
    d = json.loads(path.read_text())
    if isinstance(value, tuple):  # one entry replaced
        d["records"][0][field][0] = value[0]
    else:  # the whole list
        d["records"][0][field] = value
    path.write_text(json.dumps(d))
    with pytest.raises(UserError, match=f"update 1 is damaged: .*{why}"):
        BatchPlan.load(path, data).batch(1)


def test_gather_cuts_the_same_tokens_as_indexing_each_stream(data):
    """The numpy slices hand back exactly ``stream[offset : offset + T + 1]`` per sequence."""
    from andrea_diag.data.batches import gather_tokens

    p = plan(data)
    b = p.batch(3)
    want = torch.stack(
        [
            p.streams[s][o : o + T + 1]
            for s, o in zip(
                b.source_idx.reshape(-1).tolist(), b.offsets.reshape(-1).tolist(), strict=True
            )
        ]
    ).view(A, M, T + 1)
    got = gather_tokens(p.streams, b.source_idx, b.offsets, T)
    assert got.dtype == torch.int64 and torch.equal(got, want)
    small = [s.to(torch.int32) for s in p.streams]  # a narrower stream dtype widens to int64
    assert torch.equal(gather_tokens(small, b.source_idx, b.offsets, T), want)


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("micro_batch", "4", "is damaged"),
        ("accum", 0, "is damaged"),
        ("seq_len", -1, "is damaged"),
        ("seed", None, "is damaged"),
        ("micro_batch", M * 2, "was recorded for"),
        ("seed", 7, "was recorded for"),
    ],
)
def test_a_plan_whose_seed_or_shape_is_not_the_runs_is_a_user_error(
    data, tmp_path, field, value, why
):
    """The replaying arms of a cascade load the first arm's plan from the run directory: a
    header that is not an integer shape, or not the run's own, is refused before any batch."""
    rec = plan(data)
    rec.batch(1)
    path = rec.save(tmp_path / "p.json")
    d = json.loads(path.read_text())
    d[field] = value
    path.write_text(json.dumps(d))
    with pytest.raises(UserError, match=why):
        BatchPlan.load(path, data, like=rec)


@pytest.mark.parametrize(
    "update",
    [float("inf"), 1.7, "1", None, 0, True],
    ids=["inf", "float", "str", "null", "0", "bool"],
)
def test_a_recorded_update_that_is_no_whole_number_from_one_is_one_line(data, tmp_path, update):
    """Before: Infinity raised OverflowError (a traceback at --resume), 1.7 was read as 1 and
    "1" as 1."""
    rec = plan(data)
    rec.batch(1)
    path = rec.save(tmp_path / "p.json")
    d = json.loads(path.read_text())
    d["records"][0]["update"] = update
    path.write_text(json.dumps(d))
    with pytest.raises(UserError, match="a record without a whole update number from 1"):
        BatchPlan.load(path, data)
