"""docs/integrations.md's Hugging Face and Lightning examples run as written, and each leaves a
run directory with one metrics row per optimizer update and the framework named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from andrea_diag.record import load_run

PAGE = Path(__file__).resolve().parents[1] / "docs" / "integrations.md"


def _snippet(name: str) -> str:
    text = PAGE.read_text()
    section = text[text.index(f"<!-- {name}-snippet -->") : text.index(f"<!-- /{name}-snippet -->")]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.parametrize(
    ("name", "module", "run", "framework"),
    [("hf", "transformers", "hf-mine", "transformers"),
     ("lightning", "lightning.pytorch", "pl-mine", "lightning")],
)  # fmt: skip
def test_the_framework_example_runs_and_records_every_update(
    name: str, module: str, run: str, framework: str
) -> None:
    pytest.importorskip(module)
    ns: dict = {"__name__": f"docs_{name}"}
    exec(compile(_snippet(name), f"docs/integrations.md:{name}-snippet", "exec"), ns)
    recorded = load_run(Path(ns["out"]) / run)
    assert recorded["config"]["framework"] == framework
    assert recorded["metrics"]["update"].tolist() == [1, 2, 3, 4]  # max_steps=4, accumulation 2
    assert not recorded["probe_failures"], recorded["probe_failures"]
