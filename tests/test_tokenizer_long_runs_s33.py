"""A source with one very long run of characters (a 1 MB line of ``x``) held ``cascade`` in the
BPE trainer's merge loop, in Rust, past SIGTERM. The trainer now sees such a run in
``MAX_RUN`` pieces (data/tokenizer.py); the pinned corpora have none, so their tokenizer is
unchanged, and the stream still encodes the whole text, bit for bit.

    pytest tests/test_tokenizer_long_runs_s33.py -q
"""

from __future__ import annotations

import re

import pytest

from andrea_diag.data.corpus import Source
from andrea_diag.data.pinned import manifest, pinned_source
from andrea_diag.data.tokenizer import MAX_RUN, train_tokenizer, training_pieces


@pytest.mark.parametrize("run", ["x", " ", "!", "7", "é", "\n"])
def test_no_piece_holds_a_run_longer_than_the_cap(run: str) -> None:
    doc = "head words " + run * (3 * MAX_RUN + 17) + " tail"
    pieces = training_pieces(doc)
    assert "".join(pieces) == doc  # nothing dropped or added
    longest = max(len(m) for p in pieces for m in re.findall(r"\S+|\s+", p))
    assert longest <= MAX_RUN


def test_the_pinned_corpora_reach_the_trainer_uncut() -> None:
    for name in manifest():
        text = pinned_source(name, None)
        assert text is not None
        for doc in text.documents:
            assert training_pieces(doc) == [doc], name


def test_a_source_with_a_long_line_trains_and_round_trips() -> None:
    words = " ".join(f"word{i % 97} and more text" for i in range(4000))
    long_line = "x" * (40 * MAX_RUN)
    src = Source("s", (words, long_line, words[::-1]), origin="test", generated=False)
    tok = train_tokenizer({"s": src}, vocab_size=400)
    ids = tok.encode(long_line, add_special_tokens=False).ids
    assert tok.decode(ids) == long_line
    assert len(ids) < len(long_line)  # merges were learned from the pieces


def test_only_a_source_cut_into_pieces_gets_another_cache_key() -> None:
    import hashlib
    import json

    from andrea_diag.data.tokenizer import RECIPE_VERSION, data_key

    def old_key(sources: dict) -> str:  # the key before pieces: what caches hold today
        payload = {"recipe": RECIPE_VERSION, "vocab_size": 400,
                   "sources": {n: s.sha256 for n, s in sources.items()}}  # fmt: skip
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    plain = {"s": Source("s", ("plain words " * 50,), origin="t", generated=False)}
    cut = {"s": Source("s", ("x" * (2 * MAX_RUN),), origin="t", generated=False)}
    assert data_key(plain, 400) == old_key(plain)  # kept: old caches and resumes still match
    assert data_key(cut, 400) != old_key(cut)  # trained otherwise now: not an old cache's
