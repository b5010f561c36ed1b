"""``--cuda-graph``: the optimizer-state probe's per-update arithmetic replayed
(probes/optstate_graph.py).

On the CPU there are no graphs: a stand-in capture runs the computation once (a real capture
records it and the first replay runs it), and each later replay runs it again into the captured
vector, as a CUDA graph's replay writes its static outputs. The engine test runs a whole tiny
arm with the group's stand-in graph too (the gradients then stay in place, so the probe's key
holds) and compares every optimizer-state column with an eager arm's, exactly.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from graph_stand_ins import StandInScalarGraph, stand_in_graphs, stand_in_scalar_graphs

from andrea_diag.bench.train import _engine
from andrea_diag.config import ProbeConfig, RunConfig
from andrea_diag.errors import UserError
from andrea_diag.probes import OptStateProbe, optstate_graph
from andrea_diag.probes.optstate_graph import WARM, ScalarGraph
from andrea_diag.tensor_keys import TensorKey
from andrea_diag.train import graphed


@pytest.fixture
def scalar_graphs(monkeypatch: pytest.MonkeyPatch) -> list[StandInScalarGraph]:
    return stand_in_scalar_graphs(monkeypatch)


def test_a_key_seen_twice_past_the_warmup_is_captured_and_its_outputs_are_copies(
    scalar_graphs: list[StandInScalarGraph],
) -> None:
    counter = torch.zeros(3, dtype=torch.float64)

    def compute() -> tuple[torch.Tensor, dict[str, slice]]:
        counter.add_(1)  # in place, as the probe's Δθ subtraction is
        return counter * 2, {"x": slice(0, 3)}

    runner, groups = ScalarGraph(), ([counter], None)
    got = [runner.run(groups, compute)[0] for _ in range(WARM + 3)]
    assert [float(g[0]) for g in got] == [2.0 * (i + 1) for i in range(WARM + 3)]
    assert runner.counts == {"eager": WARM, "replayed": 3, "captured": 1}
    assert len(scalar_graphs) == 1
    runner.run(([counter.clone()], None), compute)  # other tensors: eager again
    assert runner.counts["eager"] == WARM + 1 and len(scalar_graphs) == 1


def test_a_key_over_a_freed_tensor_never_matches_the_tensor_that_reuses_its_id() -> None:
    grads = [torch.zeros(4), None]
    key = TensorKey(grads, extra=("lr", 1e-3))
    assert key == TensorKey(grads, extra=("lr", 1e-3)) and key.matches(grads, extra=("lr", 1e-3))
    assert key != TensorKey(grads, extra=("lr", 2e-3))
    assert not key.matches(grads, extra=("lr", 2e-3)) and not key.matches(grads, None)
    assert key != TensorKey([torch.zeros(4), None], extra=("lr", 1e-3))  # equal values: no
    assert not key.matches([torch.zeros(4), None], extra=("lr", 1e-3))
    assert not key.matches([grads[0]], extra=("lr", 1e-3))  # a shorter group
    assert not key.matches([grads[0], torch.zeros(1)], extra=("lr", 1e-3))  # None vs a tensor
    old_id = id(grads[0])
    grads[0] = None  # freed: CPython may hand its id to the next tensor
    fresh = [torch.zeros(4) for _ in range(64)]
    reused = [t for t in fresh if id(t) == old_id]
    assert all(key != TensorKey([t, None], extra=("lr", 1e-3)) for t in reused + fresh)
    assert not any(key.matches([t, None], extra=("lr", 1e-3)) for t in reused + fresh)


def test_a_computation_torch_cannot_capture_is_one_user_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(compute: Any) -> Any:
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    monkeypatch.setattr(optstate_graph, "capture", refuse)
    runner, x = ScalarGraph(), torch.zeros(2)
    for _ in range(WARM):
        runner.run(([x],), lambda: (x.clone(), {}))
    with pytest.raises(UserError, match=r"probe's arithmetic cannot be captured .*\(operation"):
        runner.run(([x],), lambda: (x.clone(), {}))


def _rows(tmp_path: Path, cuda_graph: bool, mp: pytest.MonkeyPatch) -> tuple[list[dict], Any]:
    cfg = RunConfig(size="tiny", device="cpu", probes=ProbeConfig(lockin=False, shadow=True,
                    update_stats_every=2, moment_norms_every=1)).resolve()  # fmt: skip
    cfg = dataclasses.replace(cfg, steps=14, eval_every=0, checkpoint_every=0,
                              cuda_graph=cuda_graph, inject=["outlier@9", "nonfinite@12"])  # fmt: skip
    if cuda_graph:  # the group's stand-in graph, so the gradients stay where they are
        mp.setattr(graphed, "check_graphable", lambda device, world_size: None)
    engine, _ = _engine(cfg, tmp_path / f"arm-{cuda_graph}")
    if cuda_graph:
        stand_in_graphs(mp, engine.params)
    rows = [engine.train_update(u) for u in range(1, cfg.steps + 1)]
    engine.recorder.flush()
    probe = next(p for p in engine.probes.probes if isinstance(p, OptStateProbe))
    engine.recorder.close()
    engine.recorder.release()
    return rows, probe


def test_a_graphed_probe_records_the_eager_columns_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scalar_graphs: list[StandInScalarGraph]
) -> None:
    eager, eager_probe = _rows(tmp_path, False, monkeypatch)
    graph, probe = _rows(tmp_path, True, monkeypatch)
    assert eager_probe.graphs is None and probe.graphs is not None
    # replayed on every common update after the capture: not at a skipped or spiking one, nor
    # off the update-statistics schedule (every 2nd update here)
    assert probe.graphs.counts["captured"] == 1 and probe.graphs.counts["replayed"] >= 3
    cols = [k for k in eager[-1] if k.startswith(("m_", "v_", "layer_m", "layer_v"))]
    cols += ["update_rms", "cos_update_grad", "loss", "grad_norm"]
    assert {"m_norm", "v_norm", "m_spike_share", "update_rms"} <= set(cols)
    for e, g in zip(eager, graph, strict=True):
        # repr: exact floats, and the non-finite update's NaN equal to itself
        assert {c: repr(e.get(c)) for c in cols} == {c: repr(g.get(c)) for c in cols}, e["update"]
