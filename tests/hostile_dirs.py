"""Hostile and damaged run directories for the report tests (issue 18), shared by
test_hostile_report.py (escaping, names, writes) and test_report_damaged.py (damaged files).

A page is "safe" when, outside plotly.js itself, it has no ``<script`` but the page's own
elements, no ``onerror=``, no ``<img`` and no ``javascript:`` at all.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from plotly.offline import get_plotlyjs
from typer.testing import CliRunner

from andrea_diag.cli import app

XSS = "<script>alert(1)</script>"
ATTR = '"><img src=x onerror=alert(1)>'
JS = "javascript:alert(1)"
HOSTILE = [XSS, ATTR, JS, [XSS], {"x": ATTR}]
N = 30


def own_scripts(page: str) -> int:
    """<script elements the page itself writes: meta, plotly.js, one per figure."""
    return len(re.findall(r"<script type=['\"](?:text/javascript|application/json)['\"]", page))


def assert_safe(page: str) -> None:
    rest = page.replace(get_plotlyjs(), "")
    assert rest.lower().count("<script") == own_scripts(rest)
    assert "onerror=" not in rest.lower()
    assert "javascript:" not in rest.lower()
    assert "<img" not in rest.lower()


def figure_strings(page: str) -> list[str]:
    """Every string of every figure's data and layout, as plotly.js gets them."""
    dec, found = json.JSONDecoder(), []
    for m in re.finditer(r"Plotly\.newPlot\(", page):
        _, i = dec.raw_decode(page, m.end())  # the div's id, then data and layout
        for _ in range(2):
            obj, i = dec.raw_decode(page, re.compile(r"\s*,\s*").match(page, i).end())
            found += _strings(obj)
    return found


def _strings(obj: object) -> list[str]:
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return [obj] if isinstance(obj, str) else []


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    out = res.output + (repr(res.exception) if res.exception and res.exit_code == 1 else "")
    return res.exit_code, out


def one_line_error(*args: str) -> str:
    code, out = cli(*args)
    assert code != 0, out
    assert "Traceback" not in out and "error:" in out, out
    return out


def edit(path: Path, **fields: object) -> None:
    data = json.loads(path.read_text())
    for dotted, value in fields.items():
        *head, last = dotted.split("__")
        d = data
        for k in head:
            d = d.setdefault(k, {})
        d[last] = value
    path.write_text(json.dumps(data))


def make_sweep(tmp_path: Path, cascade: Path, cell: str) -> Path:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    shutil.copytree(cascade, sweep / "c0")
    rows = [{"cell": c, "size": "tiny", "lr": lr, "max_norm": 1.0, "seed": 0,
             "precision": "fp32", "clip": arm, "final_loss": 3.0, "min_loss": 2.5,
             "n_spikes": 1, "max_grad_norm": 2.0, "lockin": XSS, "status": "done"}
            for c, lr in (("c0", 1e-3), (cell, 1e-2)) for arm in ("none", "global")]  # fmt: skip
    pd.DataFrame(rows).to_csv(sweep / "sweep.csv", index=False)
    meta = {"sizes": ["tiny", XSS], "lrs": [1e-3, XSS], "seeds": [0, ATTR], "steps": XSS,
            "recipe": [ATTR], "command": JS, "clips": ["none", "global"],
            "throughput": {"updates_per_s": 2.0, "updates": ATTR, "wall_s": XSS,
                           "executor": JS, "jobs": XSS}}  # fmt: skip
    (sweep / "sweep.json").write_text(json.dumps(meta))
    return sweep


def jsonl_metrics(run: Path) -> list[dict]:
    (run / "metrics.parquet").unlink()
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


# ---- fixtures ``run`` and ``cascade``: both modules import ``run_fixture`` and
# ``cascade_fixture``, which pytest registers in each under the fixture names. Here rather than
# in conftest so the names stay local: other modules have a ``cascade`` fixture of their own.


@pytest.fixture(name="run")
def run_fixture(tmp_path: Path, make_run: Callable[..., Path]) -> Path:
    """One unclipped run dir of N updates."""
    return make_run(tmp_path / "run" / "none", clip="none", n_updates=N)


@pytest.fixture(name="cascade")
def cascade_fixture(tmp_path: Path, make_run: Callable[..., Path]) -> Path:
    """A finished two-arm cascade (none, global) of N updates each."""
    c = tmp_path / "cascade"
    for arm in ("none", "global"):
        make_run(c / arm, clip=arm, n_updates=N)
    (c / "cascade.json").write_text(
        json.dumps({"arms": ["none", "global"], "status": "done", "size": "tiny", "seed": 0})
    )
    return c
