"""The default training text is pinned (andrea_diag/data/pinned.py): the same bytes on every
machine and in every venv, whatever packages are installed; a smaller target is a prefix; a
damaged pinned file is one clear error.

python -m pytest -q tests/test_pinned_sources.py
"""

from __future__ import annotations

import gzip
import importlib.metadata
import json

import pytest

from andrea_diag.config import SOURCE_NAMES
from andrea_diag.data import pinned
from andrea_diag.data.corpus import DEFAULT_TARGET_BYTES, build_sources
from andrea_diag.errors import UserError


def test_default_sources_are_the_pinned_bytes_of_the_manifest():
    sources = build_sources(seed=0)
    for name in SOURCE_NAMES:
        assert sources[name].sha256 == pinned.manifest()[name]["sha256"], name
        assert sources[name].origin.startswith("pinned text") and not sources[name].generated


def test_the_bytes_do_not_depend_on_what_is_installed(monkeypatch):
    before = {n: s.sha256 for n, s in build_sources(seed=0, target_bytes=50_000).items()}

    def nothing_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "metadata", nothing_installed)
    monkeypatch.setattr(importlib.metadata, "version", nothing_installed)
    after = {n: s.sha256 for n, s in build_sources(seed=3, target_bytes=50_000).items()}
    assert after == before


def test_a_smaller_target_is_a_prefix_of_the_whole_text():
    whole = build_sources(seed=0, target_bytes=DEFAULT_TARGET_BYTES)["gutenberg"].documents
    small = build_sources(seed=0, target_bytes=30_000)["gutenberg"].documents
    assert sum(len(d.encode()) for d in small) <= 30_000
    assert small[:-1] == whole[: len(small) - 1]
    assert whole[len(small) - 1].startswith(small[-1])


def test_a_damaged_pinned_file_is_one_clear_error(tmp_path, monkeypatch):
    for f in pinned.TEXTS.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    gz = tmp_path / "gutenberg.jsonl.gz"
    gz.write_bytes(gzip.compress(b'"tampered"\n', mtime=0))
    monkeypatch.setattr(pinned, "TEXTS", tmp_path)
    monkeypatch.setattr(pinned, "MANIFEST", tmp_path / "manifest.json")
    pinned.manifest.cache_clear()
    pinned._documents.cache_clear()
    try:
        with pytest.raises(UserError, match="does not match its manifest"):
            build_sources(seed=0, target_bytes=10_000)
    finally:
        pinned.manifest.cache_clear()
        pinned._documents.cache_clear()


def test_freezing_the_same_sources_writes_the_same_files(tmp_path, monkeypatch):
    sources = build_sources(seed=0, target_bytes=20_000)
    monkeypatch.setattr(pinned, "TEXTS", tmp_path)
    monkeypatch.setattr(pinned, "MANIFEST", tmp_path / "manifest.json")
    try:
        first = pinned.freeze(sources, made_on="test")
        data = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
        second = pinned.freeze(sources, made_on="test")
        assert first == second and data == {p.name: p.read_bytes() for p in tmp_path.iterdir()}
        back = build_sources(seed=0)  # read back from the frozen copies
        assert {n: s.sha256 for n, s in back.items()} == {n: e["sha256"] for n, e in first.items()}
        assert json.loads((tmp_path / "manifest.json").read_text())["made_on"] == "test"
    finally:
        pinned.manifest.cache_clear()
        pinned._documents.cache_clear()


@pytest.mark.slow
def test_a_sweep_refuses_to_merge_a_cell_trained_on_other_bytes(tmp_path):
    from typer.testing import CliRunner

    from andrea_diag.cli import app

    args = ["sweep", "--size", "tiny", "--lr", "1e-3", "--steps", "2", "--clip", "none",
            "--device", "cpu", "--out", str(tmp_path / "s")]  # fmt: skip
    assert CliRunner().invoke(app, args).exit_code == 0
    data_json = tmp_path / "s" / "tiny-lr0.001-mn1-s0" / "none" / "data.json"
    data = json.loads(data_json.read_text())
    data["sources"]["gutenberg"]["sha256"] = "0" * 64  # as if trained on another machine's text
    data_json.write_text(json.dumps(data))
    res = CliRunner().invoke(app, args)
    said = " ".join(res.output.split())
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert (
        "cell tiny-lr0.001-mn1-s0 arm none was trained on other bytes of source gutenberg" in said
    )
