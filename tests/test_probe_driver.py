"""The probe driver: declared order, one boundary detector, and a failing probe never ends a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from andrea_diag import metrics
from andrea_diag.cli import app
from andrea_diag.clip.api import clip_grad_norm_with_stats
from andrea_diag.config import ProbeConfig, RunConfig
from andrea_diag.model import GPT
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
    return UpdateContext(
        update=update, model=torch.nn.Linear(1, 1), optimizer=torch.optim.SGD([p], lr=0.1),
        param_names=["w"], params=[p], loss=1.0, example_loss=torch.zeros(0),
        example_source=torch.zeros(0), clip=None, recorder=driver.recorder, row={},
        phase=phase if phase is not None else 0, boundary=driver.enter_phase(phase),
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
    # a probe of the user's own declares its columns too (not in the schema: owner itself)
    columns = (metrics.Column("exploding_col", "exploding", float, "exploding/col", "a test"),)

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
    assert metrics["spike"].notna().all()  # the others went on: on their schedules too
    assert metrics.loc[metrics["update"] % 10 == 0, "m_norm"].notna().all()
    assert pd.notna(metrics["grad_norm_z"].iloc[-1])
    run = load_run(out)
    assert run["probe_failures"][0]["probe"] == "exploding"
    assert "kind" not in run["events"]  # the spike events table holds spike events only
    text = "\n".join(all_findings([Arm.from_run(run)]))
    assert "WARNING: probe exploding failed at update 5 in after_step" in text


@pytest.mark.slow
def test_a_trainer_probe_writing_the_loss_fails_and_the_loops_loss_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    thief = _Writer("thief", {"loss": -1.0, "grad_norm": -1.0}, declared=(metrics.LOSS,))

    def with_thief(*args: Any, **kwargs: Any) -> list:
        return [*build_probes(*args, **kwargs), thief]

    monkeypatch.setattr("andrea_diag.train.loop.build_probes", with_thief)
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", "--clip", "none", "--steps", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "probe thief failed at update 1" in res.output
    [failure] = json.loads((out / "none" / "summary.json").read_text())["probe_failures"]
    assert "wrote column 'loss', owned by the loop" in failure["error"]
    metrics_table = pd.read_parquet(out / "none" / "metrics.parquet")
    assert (metrics_table["loss"] > 0).all() and (metrics_table["grad_norm"] > 0).all()
    assert metrics.undeclared(metrics_table.columns) == []


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


class _Writer:
    """Writes ``columns_to_write`` in after_clip, or (``deferred``) keeps ``ctx.row`` and writes
    at ``resolve``, as the optimizer-state probe does at the recorder's flush."""

    def __init__(self, name: str, write: dict[str, Any], declared=(), deferred=False) -> None:
        self.name, self.write, self.columns, self.deferred = name, write, tuple(declared), deferred
        self.kept: Any = None

    def after_clip(self, ctx: UpdateContext) -> None:
        if self.deferred:
            self.kept = ctx.row
        else:
            ctx.row.update(self.write)

    def after_step(self, ctx: UpdateContext) -> None:
        return None

    def resolve(self) -> None:
        if self.kept is not None:
            for k, v in self.write.items():
                self.kept[k] = v
            self.kept = None

    def close(self, run_dir: Path, results: Any = None) -> dict[str, Any]:
        return {}


def _one_update(tmp_path: Path, *probes: Any) -> tuple[ProbeDriver, dict[str, Any], list[str]]:
    """One update through the driver, on a row that already holds the loop's columns."""
    warnings: list[str] = []
    driver = ProbeDriver(list(probes), Recorder(tmp_path / "r", {}), warnings.append)
    ctx = _ctx(driver, 1, None)
    ctx.row.update(loss=1.0, grad_norm=2.0)  # the loop writes before the probes run
    row = ctx.row
    driver.after_clip(ctx)
    driver.after_step(ctx)
    assert ctx.row is row  # the caller's row, not a probe's guarded view, after the hooks
    return driver, row, warnings


def test_a_probe_writing_a_loop_column_fails_naming_it_and_the_loops_value_is_kept(
    tmp_path: Path,
) -> None:
    # declaring the loop's column does not make it the probe's
    bad = _Writer("thief", {"loss": 99.0}, declared=(metrics.LOSS,))
    good = _Writer("spikes", {"spike": True, "loss_z": 0.5}, declared=metrics.owned_by("spikes"))
    driver, row, warnings = _one_update(tmp_path, bad, good)
    assert row["loss"] == 1.0 and row["spike"] is True and row["loss_z"] == 0.5
    [failure] = driver.failures
    assert failure["probe"] == "thief" and failure["hook"] == "after_clip"
    assert "ColumnCollision" in failure["error"] and "'loss'" in failure["error"]
    assert "owned by the loop" in failure["error"] and "'thief'" in failure["error"]
    assert "probe thief failed at update 1" in warnings[0]
    events = (tmp_path / "r" / "events.jsonl").read_text()
    assert "probe_failure" in events and "owned by the loop" in events


def test_a_probe_writing_an_undeclared_column_fails_and_writes_nothing(tmp_path: Path) -> None:
    bad = _Writer("spikes", {"spike": True, "my_score": 3.0}, declared=(metrics.SPIKE,))
    driver, row, _ = _one_update(tmp_path, bad)
    [failure] = driver.failures
    assert failure["probe"] == "spikes" and "'my_score'" in failure["error"]
    assert "no one declares" in failure["error"]
    assert "my_score" not in row and "spike" not in row  # update() checks before it writes


def test_a_probe_writing_another_probes_column_fails_naming_both(tmp_path: Path) -> None:
    bad = _Writer("other", {"spike": True}, declared=(metrics.SPIKE,))
    driver, row, _ = _one_update(tmp_path, bad)
    [failure] = driver.failures
    assert "probe 'other' wrote column 'spike', owned by probe 'spikes'" in failure["error"]
    assert "spike" not in row


def test_a_deferred_write_is_checked_when_it_lands(tmp_path: Path) -> None:
    ok = _Writer("optstate", {"m_norm": 0.1, "layer_m/h00.mlp": 0.2},
                 declared=metrics.owned_by("optstate"), deferred=True)  # fmt: skip
    bad = _Writer("late", {"clip_coef": 0.0}, declared=(), deferred=True)
    driver, row, _ = _one_update(tmp_path, ok, bad)
    assert row["m_norm"] == 0.1 and row["layer_m/h00.mlp"] == 0.2 and "clip_coef" not in row
    [failure] = driver.failures
    assert failure["probe"] == "late" and failure["hook"] == "resolve"
    assert "'clip_coef', owned by the loop" in failure["error"]


def test_the_real_probes_write_only_their_declared_columns(tmp_path: Path) -> None:
    """Every column the shipped probes write is theirs: no probe failure over a few updates
    of a tiny model, and every written column is declared with that probe as its owner."""
    every = ProbeConfig(moment_norms_every=1)  # every column at each of the few updates
    cfg = RunConfig(size="tiny", steps=6, device="cpu", probes=every).resolve()
    torch.manual_seed(0)
    model = GPT(cfg.model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    probes = build_probes(cfg, model)
    driver = ProbeDriver(probes, Recorder(tmp_path / "r", {}))
    names, params = (list(t) for t in zip(*model.named_parameters(), strict=True))
    tokens = torch.randint(0, cfg.model.vocab_size, (4, 17))
    for update in range(1, 7):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()
        )
        loss.backward()
        clip = clip_grad_norm_with_stats(params, 1.0)
        row: dict[str, Any] = {"update": update, "loss": float(loss.detach())}
        ctx = UpdateContext(
            update=update, model=model, optimizer=opt, param_names=names, params=params,
            loss=row["loss"], example_loss=torch.full((4,), row["loss"]),
            example_source=torch.zeros(4, dtype=torch.long), clip=clip,
            recorder=driver.recorder, row=row, phase=0, boundary=driver.enter_phase(0),
        )  # fmt: skip
        driver.after_clip(ctx)
        opt.step()
        driver.after_step(ctx)
        written = set(row) - {"update", "loss"}
        assert {metrics.owner_of(c) for c in written} == {"spikes", "optstate", "layers"}
    assert driver.failures == []
