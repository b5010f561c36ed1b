"""Tests for the 8449-token byte-level BPE, its cache and the encoded streams.

    pytest tests/test_tokenizer.py -q

The default-size tokenizer is trained once per session (a few seconds) into a fresh cache.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from andrea_diag.config import SOURCE_NAMES, VOCAB_SIZE
from andrea_diag.data import EOT, prepare_data
from andrea_diag.data.corpus import build_sources
from andrea_diag.data.tokenizer import data_key, train_tokenizer
from andrea_diag.errors import UserError


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    cache = tmp_path_factory.mktemp("tok-cache")
    return cache, prepare_data(cache_dir=cache)


def test_exact_vocab_size(fresh):
    _, data = fresh
    assert data.trained
    assert data.tokenizer.get_vocab_size() == VOCAB_SIZE == 8449
    assert data.tokenizer.token_to_id(EOT) is not None  # the special token is inside the 8449


def test_cache_reused_without_retraining(fresh):
    cache, data = fresh
    files = sorted(p for p in cache.rglob("*") if p.is_file())
    streams = {f"{n}.npy" for n in SOURCE_NAMES}
    sidecars = {f"{n}.json" for n in streams}  # length + checksum of each stream
    assert {p.name for p in files} == {"tokenizer.json", *streams, *sidecars}
    before = {p: p.stat().st_mtime_ns for p in files}
    again = prepare_data(cache_dir=cache)
    assert not again.trained
    assert {p: p.stat().st_mtime_ns for p in files} == before  # nothing rewritten
    assert again.key == data.key
    for n in SOURCE_NAMES:
        assert torch.equal(again.streams[n], data.streams[n])


def test_env_var_cache_dir(fresh, monkeypatch):
    cache, _data = fresh
    monkeypatch.setenv("ANDREA_DIAG_CACHE", str(cache))
    assert not prepare_data().trained  # same folder found through the environment


def test_streams_shape_and_separators(fresh):
    _, data = fresh
    for name in SOURCE_NAMES:
        s = data.streams[name]
        assert s.dim() == 1 and s.dtype == torch.int64
        assert int(s.max()) < VOCAB_SIZE and int(s.min()) >= 0
        n_docs = len(data.sources[name].documents)
        assert int((s == data.eot_id).sum()) == n_docs  # one separator after each document
    json.dumps(data.describe())
    d = data.describe()["sources"]
    assert d["gutenberg"]["n_tokens"] == data.streams["gutenberg"].numel()
    generated = [n for n, s in data.sources.items() if s.generated]
    assert data.describe()["generated_sources"] == generated


def test_decodes_back_to_source_text(fresh):
    _, data = fresh
    doc = data.sources["repo-docs"].documents[0]
    assert data.decode(data.encode(doc)) == doc


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_round_trip_any_text(fresh, text):
    _, data = fresh
    assert data.decode(data.encode(text)) == text


def test_rare_ids_exclude_special(fresh):
    _, data = fresh
    rare = data.rare_token_ids(300)
    assert rare.numel() == 300 and data.eot_id not in rare.tolist()
    counts = data.token_counts
    assert counts[rare].max() <= counts.float().median()


def test_key_depends_on_bytes_and_vocab():
    force = {"gutenberg": "generated", "hermes3-general": "generated"}  # the seed moves them
    a = build_sources(force, seed=0, target_bytes=20_000)
    b = build_sources(force, seed=1, target_bytes=20_000)
    assert data_key(a) != data_key(b)
    assert data_key(a, 8449) != data_key(a, 1000)


def test_small_vocab_knob_and_too_small_corpus():
    tiny = build_sources(seed=0, target_bytes=20_000)
    assert train_tokenizer(tiny, vocab_size=600).get_vocab_size() == 600
    with pytest.raises(UserError, match="too small"):
        train_tokenizer(tiny, vocab_size=VOCAB_SIZE)


def test_override_flows_through_prepare(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    (books / "one.txt").write_text(
        "It was a dark and stormy night; the rain fell in torrents. " * 400
    )
    kw = {"cache_dir": tmp_path / "cache", "vocab_size": 700, "target_bytes": 40_000}
    base = prepare_data(**kw)
    over = prepare_data({"gutenberg": str(books), "hermes3-general": "generated"}, **kw)
    assert over.key != base.key  # different bytes, different cache folder
    assert over.tokenizer_path.parent != base.tokenizer_path.parent
    desc = over.describe()["sources"]["gutenberg"]
    assert desc["generated"] is False and desc["origin"].startswith("override: ")
    assert over.describe()["generated_sources"] == ["hermes3-general"]
    assert over.decode(over.streams["gutenberg"][:6]).startswith("It was a dark")
