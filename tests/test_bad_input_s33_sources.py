"""A ``--source`` file that is binary from its first block is refused before the whole file is
read: a 3 GB sparse ``.jsonl`` took 3.5 GB of memory and 15 s to be called "contains NUL
bytes" (session 33's audit). A NUL past the first block is still found, in the whole file.

    pytest tests/test_bad_input_s33_sources.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from andrea_diag.data import corpus, whole_file
from andrea_diag.errors import UserError


@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
def test_a_sparse_source_is_refused_from_its_first_block_unread(
    tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / f"x{suffix}"
    with big.open("wb") as f:
        f.truncate(3 << 30)  # 3 GiB of holes: costs nothing to make

    def never(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("the whole file was read")

    monkeypatch.setattr(corpus, "read_whole", never)
    with pytest.raises(UserError, match=r"contains NUL bytes: a binary file, not text"):
        corpus.load_override("gutenberg", big)


def test_a_nul_past_the_first_block_is_still_found(tmp_path: Path) -> None:
    late = tmp_path / "late.txt"
    late.write_bytes(b"text " * (corpus.HEAD_BYTES // 5 + 10) + b"\0 more")
    assert whole_file.read_whole(late, "s", 1).index(b"\0") > corpus.HEAD_BYTES
    with pytest.raises(UserError, match=r"contains NUL bytes"):
        corpus._source_text(late, "gutenberg")


def test_a_text_source_reads_whole(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("héllo " * 20_000)
    assert corpus._source_text(text, "gutenberg") == "héllo " * 20_000


def test_a_pickled_npy_source_is_named_as_such_with_no_advice_to_unpickle(tmp_path: Path) -> None:
    import numpy as np

    from andrea_diag.data.token_ids import _from_npy

    obj = tmp_path / "obj.npy"
    np.save(obj, np.array([{"a": 1}, "x"], dtype=object), allow_pickle=True)
    with pytest.raises(UserError) as e:
        _from_npy(obj.read_bytes(), obj, "gutenberg")
    assert (
        e.value.message
        == f"source gutenberg: {str(obj)!r} holds Python objects (pickled data), not token ids"
    )
    assert "allow_pickle" not in e.value.message + (e.value.hint or "")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link"])
def test_a_folder_source_names_a_text_file_that_is_not_a_regular_file(
    tmp_path: Path, kind: str
) -> None:
    import os

    folder = tmp_path / "texts"
    folder.mkdir()
    odd = folder / "a.txt"
    if kind == "fifo":
        os.mkfifo(odd)
    else:
        odd.symlink_to("/dev/zero")
    with pytest.raises(UserError) as e:
        corpus.load_override("gutenberg", folder)
    assert e.value.message == f"source gutenberg: {str(odd)!r} is not a regular file"


def test_a_link_to_nothing_in_a_folder_source_is_passed_over(tmp_path: Path) -> None:
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("some words " * 200)
    (folder / ".#notes.md").symlink_to("user@host.1234:1700000000")  # an editor's lock file
    source = corpus.load_override("gutenberg", folder)
    assert source.documents == ("some words " * 200,)
