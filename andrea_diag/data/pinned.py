"""The default training text, pinned: the same bytes on every machine and in every venv.

    >>> from andrea_diag.data.pinned import pinned_source
    >>> got = pinned_source("gutenberg", target_bytes=20_000)
    >>> got.origin.startswith("pinned text")
    True
    >>> sum(len(d.encode()) for d in got.documents) <= 20_000
    True

The three sources used to be read from what the machine had installed (dependency READMEs and
stdlib docstrings for ``repo-docs``; data packages for ``gutenberg`` and ``hermes3-general``), so
a laptop, CI, the GPU image, or the same venv after ``pip install ".[test]"`` each trained on
other bytes, and gave other answers. Now each source is a file shipped inside the package,
``andrea_diag/data/texts/<source>.jsonl.gz`` (one JSON string per document, in order), frozen
once by ``python bench/freeze_sources.py`` from those same readers; ``texts/manifest.json``
records each source's sha256 (as ``data.json`` records it: the documents joined by the
end-of-text separator), its file's sha256, and what it was made from. A smaller ``target_bytes``
(tests) takes the documents in order and cuts the last one, so it is a prefix of the full text.

``--source NAME=PATH`` still replaces a source, and ``--source NAME=generated`` forces its seeded
generator. A pinned file that does not match its manifest (a damaged install) is one clear error.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

from andrea_diag.data.real_sources import RealText
from andrea_diag.errors import UserError

TEXTS = Path(__file__).parent / "texts"
MANIFEST = TEXTS / "manifest.json"


@functools.cache
def manifest() -> dict[str, dict]:
    """``texts/manifest.json``: per source, its file's sha256, size and origin (empty if absent)."""
    if not MANIFEST.is_file():
        return {}
    return json.loads(MANIFEST.read_text(encoding="utf-8"))["sources"]


@functools.cache
def _documents(name: str) -> tuple[str, ...]:
    entry = manifest()[name]
    path = TEXTS / entry["file"]
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != entry["file_sha256"]:
        raise UserError(
            f"the pinned text {path} does not match its manifest (sha256)",
            hint="reinstall andrea-diag; the package data is damaged",
        )
    lines = gzip.decompress(data).decode("utf-8").splitlines()
    return tuple(json.loads(line) for line in lines)


def _prefix(docs: tuple[str, ...], target_bytes: int | None) -> tuple[str, ...]:
    """Documents in order up to ``target_bytes`` of text, the last one cut to land on it."""
    if target_bytes is None:
        return docs
    out, total = [], 0
    for doc in docs:
        size = len(doc.encode("utf-8"))
        if total + size > target_bytes:
            cut = doc.encode("utf-8")[: target_bytes - total].decode("utf-8", "ignore")
            if cut.strip():
                out.append(cut)
            break
        out.append(doc)
        total += size
    return tuple(out)


def pinned_source(name: str, target_bytes: int | None) -> RealText | None:
    """Source ``name`` from its pinned file, up to ``target_bytes`` (None: whole); None if the
    package ships no pinned text for it."""
    entry = manifest().get(name)
    if entry is None:
        return None
    docs = _prefix(_documents(name), target_bytes)
    origin = (
        f"pinned text {entry['file']} (sha256 {entry['sha256'][:16]}, "
        f"{entry['n_bytes']:,} bytes whole; made from {entry['made_from']})"
    )
    return RealText(docs, origin)


def freeze(sources: dict[str, Any], made_on: str) -> dict[str, dict]:
    """Write ``sources`` as the pinned texts and the manifest (``bench/freeze_sources.py``)."""
    TEXTS.mkdir(parents=True, exist_ok=True)
    entries = {}
    for name, src in sources.items():
        file = f"{name}.jsonl.gz"
        lines = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in src.documents)
        # mtime=0: the same documents always give the same .gz bytes
        data = gzip.compress(lines.encode("utf-8"), mtime=0)
        (TEXTS / file).write_bytes(data)
        entries[name] = {"file": file, "sha256": src.sha256,
                         "file_sha256": hashlib.sha256(data).hexdigest(),
                         "n_bytes": src.n_bytes, "n_documents": len(src.documents),
                         "made_from": src.origin}  # fmt: skip
    body = {"made_on": made_on, "sources": entries}
    MANIFEST.write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    manifest.cache_clear()
    _documents.cache_clear()
    return entries
