"""bench-kernels runs on a CPU-only machine: the harness, the JSON/HTML output and the command.

pytest tests/test_bench_cpu.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from andrea_diag import bench
from andrea_diag.commands.bench_kernels import bench_kernels
from andrea_diag.errors import UserError


def test_grad_shapes_match_presets() -> None:
    shapes = bench.grad_shapes("120m")
    assert len(shapes) == 149 and sum(s.numel() for s in shapes) == 98_820_096
    assert sum(s.numel() for s in bench.grad_shapes("12m")) == 17_529_600


def test_bench_kernels_cpu_tiny(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(bench_kernels)
    res = CliRunner().invoke(
        app,
        [
            "--out",
            str(tmp_path),
            "--sizes",
            "tiny",
            "--dtypes",
            "fp32",
            "--reps",
            "1",
            "--device",
            "cpu",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "no GPU" in res.output
    data = json.loads((tmp_path / "bench-kernels.json").read_text())
    variants = {r["variant"] for r in data["rows"]}
    assert {"torch_foreach", "torch_loop", "reference", "copy"} <= variants
    assert all(r["ms"] > 0 for r in data["rows"])
    html = (tmp_path / "bench-kernels.html").read_text()
    # self-contained: plotly.js is inlined (MBs), not loaded from a CDN script tag
    assert len(html) > 1_000_000 and '<script src="http' not in html


@pytest.mark.parametrize(
    "kwargs", [{"sizes": "huge"}, {"dtypes": "fp8"}, {"reps": -1}, {"device": "tpu"}]
)
def test_bench_kernels_bad_options(tmp_path: Path, kwargs: dict) -> None:
    args = {"out": tmp_path, "sizes": "tiny", "dtypes": "fp32", "reps": 1, "device": "cpu"} | kwargs
    with pytest.raises(UserError):
        bench_kernels(**args)
