"""Sources that are the same bytes on every machine, for tests that depend on exact tokens.

The built-in ``repo-docs`` text is read from the installed packages' READMEs, which differ between
machines (CI once drew other versions, and an injected outlier went undetected in one arm): the
committed copy (``golden/repo-docs.md``) and the seeded generators keep the tokens fixed.
"""

from __future__ import annotations

from pathlib import Path

PINNED_SOURCES = {
    "repo-docs": str(Path(__file__).parent / "golden" / "repo-docs.md"),
    "gutenberg": "generated",
    "hermes3-general": "generated",
}


def source_args() -> list[str]:
    """``--source NAME=VALUE`` for every pinned source, for a CLI argument list."""
    return [
        arg for name, value in PINNED_SOURCES.items() for arg in ("--source", f"{name}={value}")
    ]
