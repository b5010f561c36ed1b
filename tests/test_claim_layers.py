"""The ladder and sweep return results and the commands render them: no experiment module of
the claims imports a page (function-local imports included), and the statistics sit below
everything (issue 23 item 3: the experiments/ladder.py <-> report/ladder_page.py cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "andrea_diag"
# module -> the package prefixes it must never import
FORBIDDEN = {
    "experiments/ladder.py": ("andrea_diag.report", "andrea_diag.commands"),
    "experiments/sweep.py": ("andrea_diag.report", "andrea_diag.commands"),
    "experiments/aggregate.py": ("andrea_diag.report", "andrea_diag.commands"),
    "experiments/thresholds.py": ("andrea_diag.report", "andrea_diag.commands"),
    "report/ladder_page.py": ("andrea_diag.commands", "andrea_diag.experiments"),
    "tables.py": ("andrea_diag.",),
    "stats.py": ("andrea_diag.",),
}
ALLOWED = {"tables.py": ("andrea_diag.stats",)}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):  # every import, at any depth
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_claim_modules_import_nothing_from_the_layers_above_them(module: str) -> None:
    allowed = ALLOWED.get(module, ())
    bad = [n for n in _imports(PACKAGE / module)
           if n.startswith(FORBIDDEN[module]) and not n.startswith(allowed)]  # fmt: skip
    assert bad == [], f"{module} imports {bad}"
