"""bench-kernels runs on a CPU-only machine: the harness, the JSON/HTML output and the command.

pytest tests/test_bench_cpu.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from andrea_diag.bench.harness import grad_shapes
from andrea_diag.commands.bench_kernels import bench_kernels
from andrea_diag.errors import UserError


def test_grad_shapes_match_presets() -> None:
    shapes = grad_shapes("120m")
    assert len(shapes) == 149 and sum(s.numel() for s in shapes) == 98_820_096
    assert sum(s.numel() for s in grad_shapes("12m")) == 17_529_600


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(bench_kernels)
    return app


def test_bench_kernels_cpu_tiny(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        _app(),
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


def test_bench_kernels_default_out_is_under_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # like cascade: without --out the results go to a fresh runs/bench-kernels-... folder,
    # not into the current directory
    monkeypatch.chdir(tmp_path)
    args = ["--sizes", "tiny", "--dtypes", "fp32", "--reps", "1", "--device", "cpu"]
    res = CliRunner().invoke(_app(), args)
    assert res.exit_code == 0, res.output
    (out,) = (tmp_path / "runs").iterdir()
    assert out.name.startswith("bench-kernels-tiny-")
    assert {p.name for p in out.iterdir()} == {"bench-kernels.json", "bench-kernels.html"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    meta = json.loads((out / "bench-kernels.json").read_text())["meta"]
    assert f"--out {Path('runs') / out.name} " in meta["command"]


@pytest.mark.parametrize(
    "kwargs", [{"sizes": "huge"}, {"dtypes": "fp8"}, {"reps": -1}, {"device": "tpu"}]
)
def test_bench_kernels_bad_options(tmp_path: Path, kwargs: dict) -> None:
    args = {"out": tmp_path, "sizes": "tiny", "dtypes": "fp32", "reps": 1, "device": "cpu"} | kwargs
    with pytest.raises(UserError):
        bench_kernels(**args)


def test_headroom_lines_and_targets_read_the_graphed_rows() -> None:
    from andrea_diag.bench import BenchResult, Row, headroom, targets

    def row(mode: str, variant: str, pct: float) -> Row:
        return Row("120m", "bf16", mode, variant, 1.0, 1.0, 1.0, 1, 1.0, pct_copy=pct)

    result = BenchResult({"sizes": ["120m"], "dtypes": ["bf16"]})
    result.rows = [
        row("inactive", "cuda_three", 80.0),
        row("inactive", "cuda_three_graph", 91.0),
        row("active", "cuda_three", 85.0),
        row("active", "cuda_three_graph", 89.0),
        row("active", "torch_foreach_graph", 70.0),
    ]
    (line,) = headroom(result)
    assert line.startswith("headroom 120m bf16: norm-only % read BW 80% eager, 91% graphed")
    assert "active % copy BW 85% eager, 89% graphed (torch graphed 70%)" in line
    assert line.endswith("[goal >= 90%]")
    met = {what: ok for what, _, _, ok in targets(result)}
    assert met["120m bf16 inactive % copy BW (graphed)"] is True
    assert met["120m bf16 active % copy BW (graphed)"] is False
