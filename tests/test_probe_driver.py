"""The probe driver: declared order, one boundary detector, and a failing probe never ends a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.probes import ProbeDriver, build_probes
from andrea_diag.probes.base import UpdateContext
from andrea_diag.record import Recorder, load_run
from andrea_diag.report.arms import Arm
from andrea_diag.report.findings import all_findings


class _Tracer:
    def __init__(self, name: str, log: list[str], **decl: Any) -> None:
        self.name, self.log = name, log
        for k, v in decl.items():
            setattr(self, k, v)

    def after_clip(self, ctx: UpdateContext) -> None:
        self.log.append(f"{self.name}.clip")

    def after_step(self, ctx: UpdateContext) -> None:
        self.log.append(f"{self.name}.step")

    def close(self, run_dir: Path, results: Any = None) -> dict[str, Any]:
        self.log.append(f"{self.name}.close:{sorted(results or {})}")
        return {getattr(self, "summary_key", self.name): {}}


def _ctx(driver: ProbeDriver, update: int, phase: int | None) -> UpdateContext:
    p = torch.nn.Parameter(torch.zeros(2))
    return driver.context(
        update=update, model=torch.nn.Linear(1, 1), optimizer=torch.optim.SGD([p], lr=0.1),
        param_names=["w"], params=[p], loss=1.0, example_loss=torch.zeros(0),
        example_source=torch.zeros(0), clip=None, row={}, phase=phase,
    )  # fmt: skip


def test_writers_run_before_readers_and_summaries_close_before_their_readers(
    tmp_path: Path,
) -> None:
    log: list[str] = []
    reader = _Tracer("reader", log, reads=("spike",), summary_key="pollution")
    writer = _Tracer("writer", log, writes=("spike",), close_reads=("pollution",))
    driver = ProbeDriver([reader, writer], Recorder(tmp_path / "r", {}))  # listed reader-first
    ctx = _ctx(driver, 1, None)
    driver.after_clip(ctx)
    driver.after_step(ctx)
    driver.close(tmp_path)
    assert log == [
        "writer.clip", "reader.clip", "writer.step", "reader.step",
        "reader.close:[]", "writer.close:['pollution']",
    ]  # fmt: skip


def test_a_dependency_cycle_is_refused(tmp_path: Path) -> None:
    a = _Tracer("a", [], reads=("x",), writes=("y",))
    b = _Tracer("b", [], reads=("y",), writes=("x",))
    with pytest.raises(ValueError, match="cycle"):
        ProbeDriver([a, b], Recorder(tmp_path / "r", {}))


def test_a_boundary_is_the_first_update_of_a_new_phase_and_needs_phases(tmp_path: Path) -> None:
    driver = ProbeDriver([], Recorder(tmp_path / "r", {}))
    got = [_ctx(driver, u, ph).boundary for u, ph in enumerate([0, 0, 1, 1, 2], 1)]
    assert got == [False, False, True, False, True]
    no_phase = ProbeDriver([], Recorder(tmp_path / "r2", {}))
    assert not any(_ctx(no_phase, u, None).boundary for u in range(1, 4))


class _Exploding:
    """Raises in after_step from update ``at`` on: a probe bug in the middle of a run."""

    name = "exploding"

    def __init__(self, at: int) -> None:
        self.at, self.calls = at, 0

    def after_clip(self, ctx: UpdateContext) -> None:
        ctx.row["exploding_col"] = 1.0

    def after_step(self, ctx: UpdateContext) -> None:
        self.calls += 1
        if ctx.update >= self.at:
            raise RuntimeError("value cannot be converted to type float without overflow")

    def close(self, run_dir: Path, results: Any = None) -> dict[str, Any]:
        return {"exploding": {"calls": self.calls}}


def test_a_failing_probe_is_disabled_and_the_run_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = _Exploding(at=5)

    def with_bad(*args: Any, **kwargs: Any) -> list:
        return [*build_probes(*args, **kwargs), bad]

    monkeypatch.setattr("andrea_diag.train.loop.build_probes", with_bad)
    res = CliRunner().invoke(
        app, ["train", "--clip", "none", "--steps", "12", "--out", str(tmp_path / "run")]
    )
    out = tmp_path / "run" / "none"  # train writes its one arm under --out
    assert res.exit_code == 0, res.output
    assert "probe exploding failed at update 5" in res.output and "Traceback" not in res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_updates"] == 12 and bad.calls == 5  # disabled after the failure
    [failure] = summary["probe_failures"]
    assert failure["probe"] == "exploding" and failure["update"] == 5
    assert "overflow" in failure["error"] and summary["exploding"] == {"calls": 5}
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert metrics["exploding_col"].notna().tolist() == [True] * 5 + [False] * 7
    assert metrics["spike"].notna().all() and metrics["m_norm"].notna().all()  # others went on
    assert pd.notna(metrics["grad_norm_z"].iloc[-1])
    run = load_run(out)
    assert run["probe_failures"][0]["probe"] == "exploding"
    assert "kind" not in run["events"]  # the spike events table holds spike events only
    text = "\n".join(all_findings([Arm.from_run(run)]))
    assert "WARNING: probe exploding failed at update 5 in after_step" in text


def test_a_crashed_sweep_cell_does_not_stop_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import andrea_diag.experiments.cascade as cascade

    real = cascade.train_arm

    def crash_one(cfg: Any, *args: Any, **kwargs: Any) -> Any:
        if cfg.lr == 1e-2 and cfg.arm == "global":
            raise RuntimeError("simulated GPU fault")
        return real(cfg, *args, **kwargs)

    monkeypatch.setattr(cascade, "train_arm", crash_one)
    out = tmp_path / "s"
    args = ["sweep", "--size", "tiny", "--lr", "1e-2,1e-3", "--steps", "5", "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "1 of 2 sweep cells crashed: tiny-lr0.01-mn1-s0" in res.output
    table = pd.read_csv(out / "sweep.csv")
    status = {(r.cell, r.clip): r.status for r in table.itertuples()}
    assert status == {
        ("tiny-lr0.01-mn1-s0", "none"): "done", ("tiny-lr0.01-mn1-s0", "global"): "crashed",
        ("tiny-lr0.001-mn1-s0", "none"): "done", ("tiny-lr0.001-mn1-s0", "global"): "done",
    }  # fmt: skip
    assert json.loads((out / "sweep.json").read_text())["status"] == "crashed"
    assert "CRASHED (RuntimeError: simulated GPU fault)" in (out / "sweep.html").read_text()
