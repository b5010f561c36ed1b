"""The pipelined update (train/pipeline.py): an update's host part runs after the next group.

On the CPU there are no graphs and no asynchrony, but the order of work is the pipeline's own:
the next group writes its gradients into the same tensors (the group's stand-in graph) before
the update before it is finished, and the optimizer step is skipped by the device flag
(CPU fused Adam takes ``found_inf`` too). So a host part that read a gradient, a step that
missed a skip, or a row finished with the wrong lr would change the rows. Against the same arm
run eagerly, every recorded value is equal, bit for bit (``repr``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from graph_stand_ins import StandInStepGraph, stand_in_graphs, stand_in_scalar_graphs

from andrea_diag.bench.train import _engine
from andrea_diag.config import ProbeConfig, RunConfig
from andrea_diag.record import WALL_CLOCK_COLUMNS
from andrea_diag.train import graphed, graphed_step, loop, optim
from andrea_diag.train.checkpoint import latest_checkpoint
from andrea_diag.train.graphed_step import CAPTURED_BY
from andrea_diag.train.loop import Trainer
from andrea_diag.train.pipeline import Pipeline

STEPS = 18


@pytest.fixture
def cpu_pipeline(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """``--cuda-graph`` on the CPU: the group's, the step's and the optimizer-state probe's
    stand-in graphs, and torch's fused Adam (what the trainer builds on CUDA), so the pipeline is not refused."""
    monkeypatch.setattr(graphed, "check_graphable", lambda device, world_size: None)
    monkeypatch.setattr(graphed_step, "graph_step", StandInStepGraph)

    def fused(model: torch.nn.Module, recipe: Any, lr: float, device: torch.device) -> Any:
        return optim.build_optimizer(model, recipe, lr, torch.device("cuda"))  # fused=True

    monkeypatch.setattr(loop, "build_optimizer", fused)
    stand_in_scalar_graphs(monkeypatch)  # the optimizer-state probe's arithmetic, replayed
    return monkeypatch


def _cfg(**probes: Any) -> RunConfig:
    cfg = RunConfig(
        size="tiny",
        device="cpu",
        probes=ProbeConfig(lockin_every=5, spike_window=10, spike_z=1.0, **probes),
    )
    return dataclasses.replace(cfg.resolve(), steps=STEPS, eval_every=4, checkpoint_every=7,
                               cuda_graph=True, inject=["outlier@14", "nonfinite@16"])  # fmt: skip


def _arm(
    tmp: Path, mp: pytest.MonkeyPatch, pipelined: bool, **change: Any
) -> tuple[list[dict], dict, Any]:
    engine, _ = _engine(dataclasses.replace(_cfg(), **change), tmp)
    stand_in_graphs(mp, engine.params)
    engine.pipeline = Pipeline(engine, wanted=pipelined)
    rows: list[dict] = []
    summary = engine.run(lambda update, row: rows.append(dict(row)))
    return rows, summary, engine


def _recorded(run_dir: Path) -> list[dict]:
    """Each row's columns by name, sorted: a deferred probe column lands in its row as soon as
    its value is on the host (the pipelined update), or at the flush or a spike (eager), so the
    order of the columns within a line is not part of the record; every name and value is."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    return [{k: r[k] for k in sorted(r) if k not in WALL_CLOCK_COLUMNS} for r in rows]


@pytest.mark.parametrize(("every", "norms_every"), [(1, 1), (3, 1), (3, 5)])
def test_a_pipelined_arm_records_the_eager_arms_rows_bit_for_bit(
    tmp_path: Path, cpu_pipeline: pytest.MonkeyPatch, every: int, norms_every: int
) -> None:
    # every: --update-stats-every; off its schedule a spike's Δθ is known only after the step,
    # from the snapshot the launch kept (the outlier at 14 is off a schedule of 3).
    # norms_every: --moment-norms-every; a spike off it takes its norms in its host part
    probes = dataclasses.replace(
        _cfg().probes, update_stats_every=every, moment_norms_every=norms_every
    )
    _, eager_summary, e = _arm(tmp_path / "eager", cpu_pipeline, False, probes=probes)
    piped, piped_summary, p = _arm(tmp_path / "piped", cpu_pipeline, True, probes=probes)
    assert e.pipeline.refused == "off without --cuda-graph" and p.pipeline.refused is None
    assert p.pipeline.counts == {"eager": CAPTURED_BY, "pipelined": STEPS - CAPTURED_BY}
    assert [r["update"] for r in piped] == list(range(1, STEPS + 1))  # each once, in order
    # the injected non-finite update was skipped by the device flag, as by the host's decision
    assert piped[15]["applied"] is False and piped[15]["nonfinite"] is True
    rec, rec_eager = _recorded(tmp_path / "piped"), _recorded(tmp_path / "eager")
    late = rec[CAPTURED_BY:]  # the pipelined updates: each one finished after the next group
    # spikes with finite gradients (the shadow adds their copy of g), and the non-finite one
    assert sum(r["spike"] and r["applied"] for r in late) >= 2, "spikes finished late"
    assert any("eval_loss" in r for r in late), "an evaluation finished late"
    assert any("lockin/distinct_1" in r for r in late), "a lock-in sample taken late"
    assert {"update_rms", "cos_update_grad"} <= set(rec[-1])
    assert all("m_norm" in r for r in rec if r["update"] % norms_every == 0 or r["spike"])
    assert norms_every > 1 or {"m_norm", "m_spike_share"} <= set(rec[-1])
    assert norms_every == 1 or any("m_norm" not in r for r in late), "rows off the schedule"
    off = [r for r in late if r["update"] % every]  # off the update stats' schedule
    assert all("update_rms" in r for r in off if r["spike"] and r["applied"])
    assert every == 1 or any(r["spike"] and r["applied"] for r in off), "a spike off it"
    assert every == 1 or any("update_rms" not in r for r in off)
    assert any(k.startswith("layer_gn/") for k in rec[-1])
    assert len(rec) == STEPS and repr(rec_eager) == repr(rec)  # every value, exactly
    for key in ("spikes", "pollution", "lockin"):
        assert repr(eager_summary[key]) == repr(piped_summary[key]), key
    params = [(a, b) for a, b in zip(e.params, p.params, strict=True)]
    assert all(torch.equal(a, b) for a, b in params)
    # one step graph, read by the warm-up's steps too; the probe's graph replayed throughout
    # (every 3: the common update off the schedule is the one graphed)
    assert p.steps.counts["captured"] == 1 and p.steps.counts["replayed"] > STEPS // 2
    optstate = next(x for x in p.probes.probes if x.name == "optstate")
    replayed = optstate.graphs.counts["replayed"] if optstate.graphs is not None else 0
    assert norms_every > 1 or replayed >= STEPS // 2


# torch warns that the schedule stepped before any optimizer step: that is the skipped update
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`:UserWarning")
def test_a_non_finite_first_update_makes_no_optimizer_state_as_the_eager_arm_does(
    tmp_path: Path, cpu_pipeline: pytest.MonkeyPatch
) -> None:
    # the warm-up's steps read the skip flag when a pipeline follows: a skip before Adam's first
    # step must not make its moments (the eager arm's row then has no m_norm)
    change = {"steps": CAPTURED_BY + 4, "inject": ["nonfinite@1"], "checkpoint_every": 0}
    _arm(tmp_path / "eager", cpu_pipeline, False, **change)
    _arm(tmp_path / "piped", cpu_pipeline, True, **change)
    eager, piped = _recorded(tmp_path / "eager"), _recorded(tmp_path / "piped")
    assert eager[0]["applied"] is False and "m_norm" not in eager[0]
    assert repr(eager) == repr(piped)


def test_the_run_sheet_says_whether_the_arm_ran_pipelined(
    tmp_path: Path, cpu_pipeline: pytest.MonkeyPatch
) -> None:
    _, summary, _ = _arm(tmp_path / "piped", cpu_pipeline, True)
    sheet = summary["run_sheet"]
    assert sheet["pipelined"] is True and sheet["pipeline_refused"] is None
    assert sheet["updates_pipelined"] == STEPS - CAPTURED_BY


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"mixer": "exp3"}, "next batch from this update's losses"),
        ({"precision": "fp16"}, "not torch's fused Adam"),
    ],
)
def test_a_trainer_the_pipeline_cannot_serve_runs_eagerly_and_says_why(
    tmp_path: Path, cpu_pipeline: pytest.MonkeyPatch, change: dict, reason: str
) -> None:
    cfg = dataclasses.replace(RunConfig(size="tiny", device="cpu", **change).resolve(),
                              steps=CAPTURED_BY + 3, eval_every=0, checkpoint_every=0,
                              inject=[])  # fmt: skip
    engine, _ = _engine(cfg, tmp_path / "arm")
    pipe = Pipeline(engine, wanted=True)
    assert pipe.refused is not None and reason in pipe.refused
    engine.pipeline = pipe
    rows = [r for u in range(1, cfg.steps + 1) for r in pipe.advance(u)]
    assert [r["update"] for r in rows] == list(range(1, cfg.steps + 1))  # each one at once
    assert pipe.pending is None and pipe.counts["pipelined"] == 0
    engine.recorder.close()
    engine.recorder.release()


def _crash_at(engine: Any, update: int) -> None:
    """``update``'s group fails (after its batch was drawn), the launched update pending."""
    accumulate = engine._accumulate

    def accumulate_or_crash(batch: Any, injected: str | None) -> Any:
        if len(engine.state.batch_hashes) == update:
            raise RuntimeError("the device fell over")
        return accumulate(batch, injected)

    engine._accumulate = accumulate_or_crash


def test_a_crash_in_the_next_update_keeps_the_launched_updates_row(
    tmp_path: Path, cpu_pipeline: pytest.MonkeyPatch
) -> None:
    engine, _ = _engine(dataclasses.replace(_cfg(), inject=[]), tmp_path / "arm")
    stand_in_graphs(cpu_pipeline, engine.params)
    engine.pipeline = Pipeline(engine, wanted=True)
    crash_at = CAPTURED_BY + 3
    _crash_at(engine, crash_at)
    with pytest.raises(RuntimeError, match="fell over"):
        engine.run()
    # update crash_at - 1 was launched, not yet finished, when crash_at's group failed
    assert [r["update"] for r in _recorded(tmp_path / "arm")] == list(range(1, crash_at))


def test_a_pipelined_arm_resumed_from_its_checkpoint_records_the_uninterrupted_arms_rows(
    tmp_path: Path, cpu_pipeline: pytest.MonkeyPatch
) -> None:
    _arm(tmp_path / "whole", cpu_pipeline, True)
    engine, _ = _engine(_cfg(), tmp_path / "cut")
    stand_in_graphs(cpu_pipeline, engine.params)
    engine.pipeline = Pipeline(engine, wanted=True)
    _crash_at(engine, 16)  # checkpoint_every 7: the last one is update 14's
    with pytest.raises(RuntimeError, match="fell over"):
        engine.run()
    ckpt = latest_checkpoint(tmp_path / "cut")
    assert ckpt is not None
    resumed = Trainer(engine.cfg, tmp_path / "cut", engine.data, engine.plan, resume=True)
    stand_in_graphs(cpu_pipeline, resumed.params)
    resumed.restore(ckpt)
    resumed.pipeline = Pipeline(resumed, wanted=True)
    assert resumed.state.update == 14
    resumed.run()
    assert resumed.pipeline.counts["pipelined"] == STEPS - 14  # past CAPTURED_BY at once
    assert repr(_recorded(tmp_path / "whole")) == repr(_recorded(tmp_path / "cut"))


def test_an_update_whose_copy_is_still_in_flight_waits_with_the_ones_after_it(
    tmp_path: Path, cpu_pipeline: pytest.MonkeyPatch
) -> None:
    # on the CPU every copy has landed; here every third update's has not when first asked, so
    # it and the updates after it are left for a later update or the flush, and the rows are
    # still the eager arm's
    from andrea_diag.probes import optstate

    asked: set[int] = set()

    def ready(e: Any) -> bool:
        first = e.update not in asked
        asked.add(e.update)
        return not (first and e.update % 3 == 0)

    _arm(tmp_path / "eager", cpu_pipeline, False)
    cpu_pipeline.setattr(optstate, "ready", ready)
    _arm(tmp_path / "piped", cpu_pipeline, True)
    assert {u for u in asked if u % 3 == 0 and u > CAPTURED_BY}, "a copy in flight was met"
    assert repr(_recorded(tmp_path / "eager")) == repr(_recorded(tmp_path / "piped"))


@pytest.mark.parametrize("pipelined", [False, True])
def test_a_pipelined_arms_flush_is_left_with_one_updates_deferred_reads(
    tmp_path: Path, cpu_pipeline: pytest.MonkeyPatch, pipelined: bool
) -> None:
    # the layer and optimizer-state probes' columns wait on the device until read; pipelined,
    # each update reads those already on the host, so a flush (which waits for what is left,
    # and holds the device idle while it writes) has only the update that triggered it
    engine, _ = _engine(dataclasses.replace(_cfg(), flush_every=4, checkpoint_every=0), tmp_path)
    stand_in_graphs(cpu_pipeline, engine.params)
    engine.pipeline = Pipeline(engine, wanted=pipelined)
    deferred = [p for p in engine.probes.probes if p.name in ("layers", "optstate")]
    waiting: list[int] = []
    flush = engine.recorder.flush

    def counted() -> None:
        waiting.append(sum(len(p._queue) for p in deferred))
        flush()

    engine.recorder.flush = counted  # type: ignore[method-assign]
    engine.run()
    late = waiting[CAPTURED_BY // 4 + 1 : -1]  # the flushes of pipelined updates, not the close
    assert len(deferred) == 2 and len(late) >= 2
    if pipelined:  # the triggering update's entry, one a probe (none where a spike read it)
        assert max(late) <= 2
    else:  # the eager arm's flush reads every update since the last one
        assert max(late) > 2


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the device-side pipeline needs a GPU")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_pipelined_cuda_arm_records_what_the_same_graphed_arm_does_unpipelined(
    tmp_path: Path, precision: str
) -> None:
    recorded = {}
    for piped in (False, True):
        cfg = dataclasses.replace(_cfg(), device="cuda", precision=precision, checkpoint_every=0)
        engine, _ = _engine(cfg, tmp_path / f"arm-{piped}")
        engine.pipeline = Pipeline(engine, wanted=piped)
        assert (engine.pipeline.refused is None) == piped
        engine.run()
        assert engine.pipeline.counts["pipelined"] == (STEPS - CAPTURED_BY if piped else 0)
        recorded[piped] = _recorded(tmp_path / f"arm-{piped}")
    worst = 0.0
    for a, b in zip(recorded[False], recorded[True], strict=True):
        assert set(a) == set(b) and a["applied"] == b["applied"] and a["spike"] == b["spike"]
        for col, x in a.items():
            if isinstance(x, float) and math.isfinite(x):
                worst = max(worst, abs(x - b[col]) / max(abs(x), 1e-12))
            elif not isinstance(x, float):  # None, flags, names; NaN where NaN
                assert x == b[col], (a["update"], col)
            else:
                assert not math.isfinite(b[col]), (a["update"], col)
    print(f"pipelined vs not, tiny {precision}: worst relative difference {worst:.3g}")
    assert worst <= 1e-5


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the real CUDA sync count needs a GPU")
def test_a_pipelined_update_never_syncs_the_stream(tmp_path: Path) -> None:
    import warnings

    # no evaluation, checkpoint or lock-in sample in the counted updates: those sync. Flushes
    # (at 8 and 12): their deferred reads wait on their own copies' events, not on the stream
    cfg = RunConfig(size="tiny", device="cuda", cuda_graph=True, probes=ProbeConfig(lockin=False))
    cfg = dataclasses.replace(cfg.resolve(), steps=16, eval_every=0, checkpoint_every=0,
                              flush_every=4, inject=[])  # fmt: skip
    engine, _ = _engine(cfg, tmp_path / "engine")
    assert engine.pipeline.refused is None
    for u in range(1, CAPTURED_BY + 3):  # the captures, and the first pipelined updates
        engine.pipeline.advance(u)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            rows = [r for u in range(CAPTURED_BY + 3, 13) for r in engine.pipeline.advance(u)]
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message) for w in caught if "called a synchronizing" in str(w.message)]
    # the read waits on its own copy's event, which is not a stream sync
    assert syncs == [] and len(rows) == 13 - CAPTURED_BY - 3
    engine.pipeline.drain()
    engine.recorder.close()
    engine.recorder.release()


def test_the_copies_for_a_spike_are_made_only_where_the_launchs_bound_flags_one(
    tmp_path: Path, cpu_pipeline: pytest.MonkeyPatch
) -> None:
    """Off the schedule, the snapshot of θ and the copy of g wait for a spike known only after
    the step: made under the device flag (probes/spike_bound.py), and still every spike's."""
    from andrea_diag.probes import optstate as optstate_mod

    flags: list[bool] = []
    real = optstate_mod.copy_if

    def spy(dst: list[torch.Tensor], src: list[torch.Tensor], flag: torch.Tensor) -> None:
        flags.append(bool(flag))
        real(dst, src, flag)

    cpu_pipeline.setattr(optstate_mod, "copy_if", spy)
    probes = dataclasses.replace(_cfg().probes, update_stats_every=3)
    _arm(tmp_path / "eager", cpu_pipeline, False, probes=probes)
    _, _, p = _arm(tmp_path / "piped", cpu_pipeline, True, probes=probes)
    assert True in flags and False in flags  # some copies made, some not
    assert p.probes.failures == []  # no spike found its copies missing
    rec, rec_eager = _recorded(tmp_path / "piped"), _recorded(tmp_path / "eager")
    assert repr(rec_eager) == repr(rec)  # every spike's columns, exactly


def test_a_spike_its_bound_missed_fails_the_probe_loudly_not_silently(
    tmp_path: Path, cpu_pipeline: pytest.MonkeyPatch
) -> None:
    from andrea_diag.probes.spike_bound import SpikeBound

    cpu_pipeline.setattr(SpikeBound, "device_flag", lambda *a: torch.tensor(False))
    _, _, p = _arm(tmp_path / "piped", cpu_pipeline, True)
    failed = [f for f in p.probes.failures if f["probe"] == "optstate"]
    assert len(failed) == 1 and "did not flag" in failed[0]["error"], p.probes.failures


def test_the_heap_settles_once_after_the_captures_and_is_released_at_the_runs_end(
    tmp_path: Path, cpu_pipeline: pytest.MonkeyPatch
) -> None:
    # train/heap.py: one full collection and a freeze once the warm-up's captures are done, so
    # that a later full collection walks only what the run allocated; unfrozen at the end
    import gc

    engine, _ = _engine(dataclasses.replace(_cfg(), inject=[]), tmp_path)
    stand_in_graphs(cpu_pipeline, engine.params)
    engine.pipeline = Pipeline(engine, wanted=True)
    engine.pipeline.settle_heap = True  # CUDA's default; off on the CPU
    assert gc.get_freeze_count() == 0
    frozen: dict[int, int] = {}
    engine.run(lambda update, row: frozen.setdefault(update, gc.get_freeze_count()))
    assert all(frozen[u] == 0 for u in range(1, CAPTURED_BY + 1)), "the warm-up's updates"
    # the first pipelined update settles it; its row is finished in the next update's advance
    assert frozen[CAPTURED_BY + 1] > 10_000, "the set-up's objects (torch's modules) frozen"
    assert gc.get_freeze_count() == 0, "given back to the collector at the run's end"
    assert not Pipeline(engine, wanted=True).settle_heap, "the CPU's default: untouched"
