"""The data cache is verified before it is trusted (issue 10, item 6).

    pytest tests/test_data_cache.py -q

An interrupted run, a full disk or a crash can leave a truncated ``tokenizer.json`` or token
stream behind; a read-only or foreign cache folder cannot be written at all. Each case must end
in the same data as a fresh build, with one warning line and never a traceback. Tiny sources
(40 KB each, a 700-token BPE) keep every rebuild well under a second.
"""

from __future__ import annotations

import errno
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from andrea_diag.config import SOURCE_NAMES
from andrea_diag.data import prepare_data
from andrea_diag.data import tokenizer as tokmod
from andrea_diag.data.corpus import build_sources
from andrea_diag.data.tokenizer import (
    load_or_encode_streams,
    load_or_train_tokenizer,
    train_tokenizer,
)

SMALL = {"vocab_size": 700, "target_bytes": 40_000}


def _prepare(cache: Path):
    return prepare_data(cache_dir=cache, **SMALL)


def _warnings(caplog) -> list[str]:
    """The data layer's warning lines, each checked to be one line."""
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "andrea_diag.data" and r.levelno >= logging.WARNING
    ]
    assert all("\n" not in line for line in lines), lines
    return lines


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _mtimes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def _assert_same_data(got, ref) -> None:
    assert got.key == ref.key
    assert got.tokenizer.to_str() == ref.tokenizer.to_str()
    for name in SOURCE_NAMES:
        assert torch.equal(got.streams[name], ref.streams[name]), name


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A clean build into its own cache: the reference every rebuilt cache must equal."""
    cache = tmp_path_factory.mktemp("fresh-cache")
    data = _prepare(cache)
    assert data.trained
    return data


@pytest.fixture
def copied(fresh, tmp_path):
    """A private copy of the fresh cache (cache dir, data folder) for a test to damage."""
    cache = tmp_path / "cache"
    folder = cache / fresh.tokenizer_path.parent.name
    shutil.copytree(fresh.tokenizer_path.parent, folder)
    return cache, folder


def test_fresh_cache_has_sidecars(fresh):
    folder = fresh.tokenizer_path.parent
    for name in SOURCE_NAMES:
        meta = json.loads((folder / f"{name}.npy.json").read_bytes())
        assert meta["n_tokens"] == fresh.streams[name].numel() and meta["dtype"] == "int32"
        assert meta["tokenizer_sha256"] == fresh.describe()["tokenizer"]["sha256"]
    assert fresh.describe()["tokenizer"]["sha256"] == tokmod.file_sha256(fresh.tokenizer_path)


def test_truncated_tokenizer_is_retrained_identically(fresh, copied, caplog):
    cache, folder = copied
    path = folder / "tokenizer.json"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    again = _prepare(cache)
    assert again.trained
    _assert_same_data(again, fresh)
    assert path.read_bytes() == fresh.tokenizer_path.read_bytes()  # rewritten, byte-identical
    (line,) = _warnings(caplog)
    assert "tokenizer.json" in line and "retraining" in line and "do not parse" in line


@pytest.mark.parametrize(
    "damage",
    [b"", b"\x00\xff\xfe garbage \x80" * 50, b"{}", b'{"version": "1.0", "model"'],
    ids=["empty", "binary", "json-not-tokenizer", "cut-json"],
)
def test_corrupt_tokenizer_is_retrained(fresh, copied, caplog, damage):
    cache, folder = copied
    (folder / "tokenizer.json").write_bytes(damage)
    again = _prepare(cache)
    assert again.trained
    _assert_same_data(again, fresh)
    assert _files(folder) == _files(fresh.tokenizer_path.parent)
    assert len(_warnings(caplog)) == 1


def test_wrong_vocab_size_tokenizer_is_retrained(fresh, copied, caplog):
    cache, folder = copied
    other = train_tokenizer(fresh.sources, vocab_size=600)  # parses fine, wrong size
    (folder / "tokenizer.json").write_text(other.to_str())
    again = _prepare(cache)
    assert again.trained and again.vocab_size == 700
    _assert_same_data(again, fresh)
    (line,) = _warnings(caplog)
    assert "600 tokens" in line


def _truncate(path: Path) -> None:
    """Half the file, its sidecar left as it was (stale): an interrupted write or a full disk."""
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # same length, valid .npy header: only the checksum sees it
    path.write_bytes(bytes(data))


def _drop_sidecar(path: Path) -> None:
    path.with_name(path.name + ".json").unlink()


def _garbage_sidecar(path: Path) -> None:
    path.with_name(path.name + ".json").write_bytes(b'{"format": "andrea-di')


@pytest.mark.parametrize(
    "damage", [_truncate, _flip_byte, _drop_sidecar, _garbage_sidecar], ids=lambda f: f.__name__
)
def test_damaged_stream_is_reencoded(fresh, copied, caplog, damage):
    cache, folder = copied
    damage(folder / "gutenberg.npy")
    again = _prepare(cache)
    assert not again.trained  # the tokenizer was fine
    _assert_same_data(again, fresh)
    assert _files(folder) == _files(fresh.tokenizer_path.parent)  # .npy and sidecar rewritten
    (line,) = _warnings(caplog)
    assert "gutenberg.npy" in line and "repo-docs" not in line
    # The repaired cache is trusted from now on: nothing rebuilt, nothing rewritten.
    caplog.clear()
    before = _mtimes(folder)
    _assert_same_data(_prepare(cache), fresh)
    assert _mtimes(folder) == before and _warnings(caplog) == []


def test_stream_of_another_tokenizer_is_reencoded(fresh, copied, caplog):
    """A sidecar names its tokenizer: streams never outlive the tokenizer they came from."""
    _, folder = copied
    other = train_tokenizer(fresh.sources, vocab_size=650)
    path = folder / "tokenizer.json"
    arrays, encoded = load_or_encode_streams(other, path, fresh.sources)
    assert encoded
    assert all(arrays[n].max() < 650 for n in SOURCE_NAMES)
    (line,) = _warnings(caplog)
    assert "different tokenizer" in line


def test_old_cache_without_sidecars_is_reencoded_once(fresh, copied, caplog):
    """Caches written before the sidecars existed are untrusted once, then kept."""
    cache, folder = copied
    for name in SOURCE_NAMES:
        _drop_sidecar(folder / f"{name}.npy")
    again = _prepare(cache)
    _assert_same_data(again, fresh)
    (line,) = _warnings(caplog)
    assert all(f"{n}.npy" in line for n in SOURCE_NAMES)
    caplog.clear()
    before = _mtimes(folder)
    _prepare(cache)
    assert _mtimes(folder) == before and _warnings(caplog) == []


@pytest.mark.parametrize(
    "error",
    [PermissionError(errno.EACCES, "Permission denied"), OSError(errno.EROFS, "Read-only")],
    ids=["EACCES", "EROFS"],
)
def test_unwritable_cache_works_from_memory(fresh, tmp_path, monkeypatch, caplog, error):
    def refuse(path: Path, data: bytes) -> None:
        raise error

    # Root ignores chmod, so the refusal is simulated at the one function that writes.
    monkeypatch.setattr(tokmod, "_atomic_write_bytes", refuse)
    cache = tmp_path / "cache"
    data = _prepare(cache)
    assert data.trained
    _assert_same_data(data, fresh)
    assert not cache.exists()  # nothing written, nothing half-written
    (line,) = _warnings(caplog)  # one line for the tokenizer and all three streams
    assert "cannot be written" in line and error.strerror in line
    assert data.describe()["tokenizer"]["sha256"] == fresh.describe()["tokenizer"]["sha256"]


def test_unwritable_and_corrupt_cache_still_works(fresh, copied, monkeypatch, caplog):
    cache, folder = copied
    (folder / "tokenizer.json").write_bytes(b"\x00" * 10)
    _truncate(folder / "hermes3-general.npy")

    def refuse(path: Path, data: bytes) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tokmod, "_atomic_write_bytes", refuse)
    data = _prepare(cache)
    _assert_same_data(data, fresh)
    lines = _warnings(caplog)
    # What was wrong (tokenizer, stream) and that it could not be fixed on disk, one line each.
    assert len(lines) == 3 and sum("cannot be written" in line for line in lines) == 1


def test_read_only_folder_for_real(fresh, tmp_path, caplog):
    """chmod 0o500 on the cache dir: runs where the OS enforces it (not as root)."""
    cache = tmp_path / "ro-cache"
    cache.mkdir()
    cache.chmod(0o500)
    try:
        probe = cache / "probe"
        try:
            probe.touch()
        except PermissionError:
            pass
        else:
            probe.unlink()
            pytest.skip("this user can write into a 0o500 folder (root); see the EROFS test")
        data = _prepare(cache)
        _assert_same_data(data, fresh)
        (line,) = _warnings(caplog)
        assert "cannot be written" in line
        assert list(cache.iterdir()) == []
    finally:
        cache.chmod(0o700)  # let pytest clean up


def test_tokenizer_loader_returns_trusted_file(fresh, copied):
    """The lower-level API: a sound file loads without training and keeps its bytes."""
    cache, folder = copied
    sources = build_sources(seed=0, target_bytes=SMALL["target_bytes"])
    before = _mtimes(folder)
    tok, path, trained = load_or_train_tokenizer(sources, SMALL["vocab_size"], cache)
    assert not trained and path == folder / "tokenizer.json"
    assert tok.to_str() == fresh.tokenizer.to_str() and _mtimes(folder) == before


def test_prepare_data_end_to_end_repairs_everything(fresh, copied, caplog):
    """Every file damaged at once: one prepare_data call rebuilds the whole folder."""
    cache, folder = copied
    _truncate(folder / "tokenizer.json")
    _truncate(folder / "gutenberg.npy")
    _flip_byte(folder / "repo-docs.npy")
    _drop_sidecar(folder / "hermes3-general.npy")
    (folder / "tokenizer.json.123.tmp").write_bytes(b"left by a killed writer")
    again = _prepare(cache)
    assert again.trained
    _assert_same_data(again, fresh)
    got = _files(folder)
    got.pop("tokenizer.json.123.tmp")  # a stray temp file is ignored, never read
    assert got == _files(fresh.tokenizer_path.parent)
    assert len(_warnings(caplog)) == 2  # the tokenizer's line and the streams' line
    json.dumps(again.describe())
    caplog.clear()
    before = _mtimes(folder)
    third = _prepare(cache)
    assert not third.trained and _mtimes(folder) == before and _warnings(caplog) == []
