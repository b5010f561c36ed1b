"""Tests for the three offline sources and user overrides (andrea_diag.data.corpus).

pytest tests/test_data_sources.py -q
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from andrea_diag.config import SOURCE_NAMES
from andrea_diag.data.corpus import build_sources, load_override, parse_source_overrides
from andrea_diag.errors import UserError

SMALL = 60_000  # bytes per built-in source: enough structure, fast to build
# gutenberg and hermes3-general are real text where their packages are installed (see
# tests/test_real_sources.py); tests of the generators pin them with `NAME=generated`.
FORCE = {"gutenberg": "generated", "hermes3-general": "generated"}


@pytest.fixture(scope="module")
def sources():
    return build_sources(seed=0, target_bytes=SMALL)


@pytest.fixture(scope="module")
def generated():
    return build_sources(FORCE, seed=0, target_bytes=SMALL)


def test_same_seed_same_bytes(sources):
    again = build_sources(seed=0, target_bytes=SMALL)
    for name in SOURCE_NAMES:
        assert again[name].text == sources[name].text
        assert again[name].sha256 == sources[name].sha256


def test_order_names_and_metadata(sources, generated):
    assert tuple(sources) == SOURCE_NAMES
    assert sources["repo-docs"].generated is False
    assert generated["gutenberg"].generated and generated["hermes3-general"].generated
    for s in [*sources.values(), *generated.values()]:
        # The flag the report reads agrees with the origin: generated text is never called real.
        assert s.generated == s.origin.startswith("generated: ")
        d = s.describe()
        assert d["n_bytes"] >= SMALL * 0.8 and len(d["sha256"]) == 64 and d["origin"]
        json.dumps(d)


def test_seed_changes_generated_sources_only(generated):
    other = build_sources(FORCE, seed=1, target_bytes=SMALL)
    assert other["gutenberg"].sha256 != generated["gutenberg"].sha256
    assert other["hermes3-general"].sha256 != generated["hermes3-general"].sha256
    assert other["repo-docs"].sha256 == generated["repo-docs"].sha256  # real text: seed-free


@pytest.mark.parametrize("which", ["sources", "generated"])  # the defaults and the generators
def test_sources_differ_in_shape(which, request):
    sources = request.getfixturevalue(which)
    texts = {n: s.text for n, s in sources.items()}
    assert len({s.sha256 for s in sources.values()}) == 3
    # Structure: docs are bullet lists, dialogue has turns, prose has long sentences.
    bullets = {
        n: sum(line.lstrip().startswith("- ") for line in t.splitlines()) for n, t in texts.items()
    }
    assert bullets["repo-docs"] > 10 * max(bullets["gutenberg"], 1)
    assert texts["hermes3-general"].count("\nAssistant: ") > 100
    assert "Assistant:" not in texts["gutenberg"]
    # Mean words per sentence/line: long narrative sentences against short turns and bullets.
    spans = {n: [x for x in re.split(r"[.?!:]\s+|\n+", t) if x.strip()] for n, t in texts.items()}
    words = {n: sum(len(x.split()) for x in v) / len(v) for n, v in spans.items()}
    assert words["gutenberg"] > 3 * max(words["hermes3-general"], words["repo-docs"])
    # Word distributions differ: the top words of prose and dialogue barely overlap.
    top = {n: {w for w, _ in Counter(t.lower().split()).most_common(40)} for n, t in texts.items()}
    assert len(top["gutenberg"] & top["hermes3-general"]) < 25


def test_full_size_defaults_are_modest():
    s = build_sources(seed=0)
    for src in s.values():
        assert 500_000 <= src.n_bytes <= 2_000_000, (src.name, src.n_bytes)


# -- overrides -----------------------------------------------------------------------------


def test_override_folder_recursive_sorted(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "two.md").write_text("# second\n- item")
    (tmp_path / "a.txt").write_text("first text")
    (tmp_path / "skip.py").write_text("print('not text')")
    src = load_override("repo-docs", tmp_path)
    assert src.documents == ("first text", "# second\n- item")
    assert not src.generated and src.origin.startswith("override: ")


def test_override_jsonl(tmp_path):
    p = tmp_path / "chat.jsonl"
    p.write_text('{"text": "User: hi\\nAssistant: hello"}\n\n{"text": "second"}\n')
    s = build_sources({"hermes3-general": str(p)}, target_bytes=SMALL)
    assert s["hermes3-general"].documents == ("User: hi\nAssistant: hello", "second")
    assert s["hermes3-general"].generated is False
    assert not s["gutenberg"].origin.startswith("override: ")  # the others stay built-in


@pytest.mark.parametrize(
    "case, fragment",
    [
        ("bad-name", "unknown source"),
        ("missing", "does not exist"),
        ("empty-folder", "no .txt or .md"),
        ("blank-files", "contains no text"),
        ("empty-jsonl", "contains no text"),
        ("jsonl-no-text", "no string field 'text'"),
        ("jsonl-bad-json", "not valid JSON"),
        ("wrong-suffix", "unsupported file"),
    ],
)
def test_override_errors(tmp_path, case, fragment):
    name, path = "gutenberg", tmp_path / "x"
    if case == "bad-name":
        name, path = "wikipedia", tmp_path
    elif case == "empty-folder":
        path.mkdir()
        (path / "data.csv").write_text("a,b")
    elif case == "blank-files":
        path.mkdir()
        (path / "a.txt").write_text("  \n")
    elif case == "empty-jsonl":
        path = tmp_path / "e.jsonl"
        path.write_text("")
    elif case == "jsonl-no-text":
        path = tmp_path / "e.jsonl"
        path.write_text('{"content": "hi"}\n')
    elif case == "jsonl-bad-json":
        path = tmp_path / "e.jsonl"
        path.write_text("{nope\n")
    elif case == "wrong-suffix":
        path = tmp_path / "e.csv"
        path.write_text("a,b")
    with pytest.raises(UserError, match=fragment):
        build_sources({name: str(path)}, target_bytes=SMALL)


def test_parse_source_overrides():
    assert parse_source_overrides(["gutenberg=./books", " repo-docs = d.jsonl "]) == {
        "gutenberg": "./books",
        "repo-docs": "d.jsonl",
    }
    assert parse_source_overrides([]) == {}
    for bad in (["gutenberg"], ["=x"], ["gutenberg="], ["nope=x"], ["gutenberg=a", "gutenberg=b"]):
        with pytest.raises(UserError):
            parse_source_overrides(bad)


def test_signatures_in_repo_docs_do_not_leak_process_state() -> None:
    """A default bound to the stdout of the moment (a module first imported under a test
    runner's captured stdout) must not change the corpus bytes."""
    import io

    from andrea_diag.data.repo_docs import _signature

    def under_terminal(x, n=3, name="a", file=io.TextIOWrapper(io.BytesIO())):
        return x

    def under_runner(x, n=3, name="a", file=io.StringIO()):
        return x

    assert (
        _signature(under_terminal)
        == _signature(under_runner)
        == "(x, n=3, name='a', file=Ellipsis)"
    )
