"""Every ``>>>`` docstring example in the package runs as written (``doctest``): an example a
reader copies from a module's docstring works, and one that stops working fails here, not for
them. (tests/test_docstring_examples.py checks every usage block, ``>>>`` or not, without
running it: its imports, attributes and command lines.)

Only modules whose source holds an example (``>>> ``) are imported; an example that cannot run
here (a GPU, a download) says so with ``# doctest: +SKIP``.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "andrea_diag"
WITH_EXAMPLES = sorted(
    ".".join(("andrea_diag", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(
        ".__init__"
    )
    for p in PACKAGE.rglob("*.py")
    if ">>> " in p.read_text(encoding="utf-8")
)


def test_the_package_has_docstring_examples_to_run() -> None:
    assert len(WITH_EXAMPLES) >= 20  # the walk found them (a moved package would find none)


@pytest.mark.parametrize("module", WITH_EXAMPLES)
def test_a_modules_docstring_examples_run_as_written(module: str) -> None:
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(importlib.import_module(module), optionflags=flags, verbose=False)
    assert result.attempted > 0 and result.failed == 0, (
        f"{result.failed} of {result.attempted} failed"
    )
