"""The three training sources, built offline, with optional user overrides.

    >>> from andrea_diag.data.corpus import build_sources
    >>> sources = build_sources(seed=0)
    >>> {n: (s.generated, s.n_bytes) for n, s in sources.items()}   # doctest: +SKIP

- By default every source is the **pinned** real text shipped in the package
  (:mod:`andrea_diag.data.pinned`): the same bytes on every machine and in every venv.
- The readers it was frozen from: ``repo-docs`` (:mod:`andrea_diag.data.repo_docs`, READMEs via
  ``importlib.metadata`` plus stdlib API listings) and, in :mod:`andrea_diag.data.real_sources`,
  ``gutenberg`` and ``hermes3-general`` from data packages; seeded grammars
  (:mod:`andrea_diag.data.generators`) make a source with no text (``generated=True``).

Overrides replace any source with the user's text: ``NAME=PATH`` where PATH is a folder of
.txt/.md files (recursive, sorted), a single .txt/.md file, or a .jsonl file with a ``text``
field. ``NAME=generated`` forces the seeded generator for gutenberg or hermes3-general (tests and
golden recordings pin their text that way; a folder named ``generated`` is ``./generated``).
A ``.bin``/``.npy`` PATH is token ids instead (:mod:`andrea_diag.data.token_ids`, via ``prepare``).
Every user-caused problem raises :class:`~andrea_diag.errors.UserError`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from andrea_diag.config import SOURCE_NAMES
from andrea_diag.data.generators import dialogue_documents, narrative_documents
from andrea_diag.data.pinned import pinned_source
from andrea_diag.data.real_sources import RealText, real_text
from andrea_diag.data.repo_docs import repo_docs
from andrea_diag.data.whole_file import TEXT_COPIES, check_size, read_whole
from andrea_diag.errors import UserError
from andrea_diag.given_checks import given_path

EOT = "<|endoftext|>"  # document separator in the streams; keep in sync with tokenizer.py
DEFAULT_TARGET_BYTES = 1_000_000  # ~1 MB a source: tokenizer training takes seconds on 2 cores
GENERATED = "generated"  # the override value that forces a source's seeded generator
# The sources a generator can make, and what its origin line calls it.
GENERATORS = {
    "gutenberg": (narrative_documents, "narrative-prose grammar"),
    "hermes3-general": (dialogue_documents, "User/Assistant Q&A templates"),
}


@dataclass(frozen=True)
class Source:
    """One training source: its documents and where they came from."""

    name: str
    documents: tuple[str, ...] = field(repr=False)
    origin: str  # e.g. "generated: narrative grammar, seed 0" or "override: /data/docs"
    generated: bool

    @property
    def text(self) -> str:
        """The documents joined by the end-of-text separator (what the tokenizer sees)."""
        return f"\n{EOT}\n".join(self.documents)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def n_bytes(self) -> int:
        return len(self.text.encode("utf-8"))

    def describe(self) -> dict[str, object]:
        return {
            "origin": self.origin,
            "generated": self.generated,
            "n_documents": len(self.documents),
            "n_bytes": self.n_bytes,
            "sha256": self.sha256,
        }


# --------------------------------------------------------------------------------------------
# repo-docs: real documentation
# --------------------------------------------------------------------------------------------


def repo_docs_source(target_bytes: int = DEFAULT_TARGET_BYTES) -> Source:
    """Real documentation: dependency READMEs, then stdlib API listings (:mod:`.repo_docs`)."""
    docs, origin = repo_docs(target_bytes)
    return Source("repo-docs", docs, origin, generated=False)


# --------------------------------------------------------------------------------------------
# overrides
# --------------------------------------------------------------------------------------------


def parse_source_overrides(specs: list[str]) -> dict[str, str]:
    """Parse CLI strings ``NAME=PATH`` into a dict, validating the names (not the paths yet)."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise UserError(
                f"bad source override {spec!r}", hint="write NAME=PATH, e.g. gutenberg=./books"
            )
        _check_name(name)
        _check_generated(name, path)
        if name in out:
            raise UserError(f"source {name!r} is overridden twice")
        out[name] = path
    return out


def _check_name(name: str) -> None:
    if name not in SOURCE_NAMES:
        raise UserError(f"unknown source {name!r}", hint=f"choose from {', '.join(SOURCE_NAMES)}")


def _check_generated(name: str, path: str) -> None:
    if path == GENERATED and name not in GENERATORS:
        raise UserError(
            f"source {name!r} has no generator: its text is real on every machine",
            hint=f"'{GENERATED}' works for {' and '.join(GENERATORS)}; for a folder named "
            f"'{GENERATED}' write ./{GENERATED}",
        )


def generated_source(name: str, seed: int, target_bytes: int, why: str = "") -> Source:
    """The seeded generator's text for ``name`` (gutenberg or hermes3-general).

    ``why`` (e.g. "forced: gutenberg=generated") is appended to the origin in parentheses; the
    documents depend only on (name, seed, target_bytes).
    """
    make, label = GENERATORS[name]
    origin = f"generated: {label}, seed {seed}" + (f" ({why})" if why else "")
    return Source(name, tuple(make(seed, target_bytes)), origin, generated=True)


HEAD_BYTES = 1 << 16  # a source's first bytes, looked at for NUL before the whole is read


def _source_text(path: Path, name: str) -> str:
    """A source file's text: a regular file of UTF-8 text without NUL bytes, or one line.

    A binary file (an archive, a model, a tokenizer cache) would otherwise train silently on
    its bytes read as replacement characters."""
    try:
        if not path.is_file():
            raise UserError(f"source {name}: {str(path)!r} is not a regular file")
        check_size(path, name, TEXT_COPIES)  # too large for memory: one line, nothing read
        with path.open("rb") as f:  # a binary file's first block, before the whole is read:
            head = f.read(HEAD_BYTES)  # a 3 GB sparse file took 3.5 GB and 15 s to refuse
        if b"\0" not in head:
            head = data = read_whole(path, name, TEXT_COPIES)
    except OSError as exc:
        raise UserError(f"source {name}: cannot read {str(path)!r} ({exc.strerror})") from None
    if b"\0" in head:
        raise UserError(
            f"source {name}: {str(path)!r} contains NUL bytes: a binary file, not text",
            hint="a source is UTF-8 text: .txt/.md files, or a .jsonl with a 'text' field",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"source {name}: {str(path)!r} is not UTF-8 text (byte {exc.start})",
            hint="convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None


def _read_jsonl(path: Path, name: str) -> list[str]:
    docs = []
    for lineno, line in enumerate(_source_text(path, name).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = getattr(exc, "msg", type(exc).__name__)
            raise UserError(f"{path}:{lineno}: not valid JSON ({msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise UserError(
                f"{path}:{lineno}: no string field 'text'",
                hint=f'every line of a .jsonl source for {name} must look like {{"text": "..."}}',
            )
        docs.append(row["text"])
    return docs


def _text_files(p: Path, name: str) -> list[Path]:
    """A folder's .txt/.md files, sorted by relative path (the same order anywhere)."""
    try:
        # not only regular files: a FIFO or a link to /dev/zero named a.txt is refused by
        # name (_source_text), where leaving it out said "no .txt or .md files"; a link to
        # nothing (an editor's lock file, .#notes.md) is still passed over
        files = [f for f in p.rglob("*")
                 if f.suffix.lower() in (".txt", ".md") and f.exists() and not f.is_dir()]  # fmt: skip
    except OSError as exc:
        raise UserError(f"source {name}: cannot list {str(p)!r} ({exc.strerror})") from None
    if not files:
        raise UserError(
            f"source {name}: folder {str(p)!r} has no .txt or .md files",
            hint="put text files in it, or pass a .jsonl file with a 'text' field",
        )
    return sorted(files, key=lambda f: f.relative_to(p).as_posix())


def load_override(name: str, path: str | Path) -> Source:
    """Read a user's replacement for source ``name`` from a folder, .txt/.md file or .jsonl."""
    _check_name(name)
    p = given_path(path, f"source {name}").expanduser()  # "": the working folder, read whole
    try:
        exists, is_dir = p.exists(), p.is_dir()
    except OSError as exc:  # a name too long, a loop of links
        raise UserError(f"source {name}: path {str(p)[:80]!r} ({exc.strerror})") from None
    if not exists:
        raise UserError(f"source {name}: path {str(p)!r} does not exist")
    if is_dir:
        docs = [_source_text(f, name) for f in _text_files(p, name)]
    elif p.suffix.lower() == ".jsonl":
        docs = _read_jsonl(p, name)
    elif p.suffix.lower() in (".txt", ".md"):
        docs = [_source_text(p, name)]
    else:
        raise UserError(
            f"source {name}: unsupported file {str(p)!r}",
            hint="use a folder of .txt/.md files or a .jsonl file with a 'text' field",
        )
    docs = [d for d in docs if d.strip()]
    if not docs:
        raise UserError(f"source {name}: {str(p)!r} contains no text")
    return Source(name, tuple(docs), f"override: {p.resolve()}", generated=False)


def build_sources(
    overrides: dict[str, str] | None = None,
    seed: int = 0,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    given: dict[str, Source] | None = None,
) -> dict[str, Source]:
    """All three sources in ``SOURCE_NAMES`` order; same seed → same bytes on every machine.

    ``seed`` only affects the generated sources. ``target_bytes`` sizes the built-in sources
    (tests use a small value); overrides are used whole. An override ``NAME=generated`` forces
    the generator; without one, each source is the pinned text shipped in the package
    (``data/pinned.py``). Only where a source has no pinned file is it read from installed
    packages (``repo_docs_source``, ``real_text``; how the pinned files were made), or generated.
    ``given``: sources built elsewhere (a ``--data`` factory), used as they are.
    """
    overrides, given = dict(overrides or {}), dict(given or {})
    both = sorted(overrides.keys() & given.keys())
    if both:
        raise UserError(f"source {both[0]!r} comes from both --source and --data", hint="give one")
    for name, path in overrides.items():
        _check_name(name)
        _check_generated(name, path)
    out: dict[str, Source] = {}
    for name in SOURCE_NAMES:
        path = overrides.get(name)
        if name in given:
            out[name] = given[name]
        elif path == GENERATED:
            out[name] = generated_source(name, seed, target_bytes, f"forced: {name}={GENERATED}")
        elif path is not None:
            out[name] = load_override(name, path)
        elif (pinned := pinned_source(name, target_bytes)) is not None:
            out[name] = Source(name, pinned.documents, pinned.origin, generated=False)
        elif name == "repo-docs":
            out[name] = repo_docs_source(target_bytes)
        else:
            got = real_text(name, target_bytes)
            out[name] = (
                Source(name, got.documents, got.origin, generated=False)
                if isinstance(got, RealText)
                else generated_source(name, seed, target_bytes, f"no real text: {got}")
            )
    return out
