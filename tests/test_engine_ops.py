"""The engine's update, counted on the CPU (issue 20): device reads (host syncs on a GPU) and
aten ops, by :mod:`andrea_diag.bench.ops` (a ``TorchDispatchMode`` that marks what would live on
the device). Counts, never times: each bound below fails when one more read or one
per-parameter op creeps into the update.

    python -m pytest -q tests/test_engine_ops.py
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from andrea_diag.bench.ops import DeviceTaint, count_ops, count_steps, counting
from andrea_diag.bench.train import _engine
from andrea_diag.config import RunConfig
from andrea_diag.metrics import ProbeColumns
from andrea_diag.probes.base import UpdateContext
from andrea_diag.probes.optstate_reads import as_vector


def _cfg(size: str = "tiny", **kw: Any) -> RunConfig:
    cfg = RunConfig(size=size, device="cpu", **kw).resolve()
    # flush_every above the updates run: the rows (and the probes' deferred scalars) stay on
    # the "device" until a flush, as between two flushes of a real run
    return dataclasses.replace(cfg, steps=20, eval_every=0, checkpoint_every=0, flush_every=50,
                               inject=[])  # fmt: skip


@pytest.fixture(scope="module")
def counted() -> dict[str, Any]:
    return count_ops(_cfg(), updates=3, warmup=2)


def test_engine_update_reads_the_device_once_with_the_default_probes(counted: dict) -> None:
    engine, plain = counted["engine"], counted["plain"]
    assert engine["device_reads_per_update"] <= 1, engine["read_sites"]
    # the one read is the batched one (loss, grad norm, flags, per-example losses) ...
    assert list(engine["read_sites"]) == [next(iter(engine["read_sites"]))]
    assert "read_scalars" in next(iter(engine["read_sites"]))
    assert plain["device_reads_per_update"] == 0  # ... the plain loop reads every 50th update


class _ReadsEveryUpdate:
    """A probe that reads a device value per update, the way a careless one would."""

    name = "careless"

    def after_clip(self, ctx: UpdateContext) -> None:
        assert ctx.clip is not None
        float(ctx.clip.per_tensor_norm.sum())  # host sync on a GPU

    def after_step(self, ctx: UpdateContext) -> None:
        ctx.optimizer.state[ctx.params[0]]["exp_avg"].norm().tolist()  # and another

    def close(self, run_dir: Path, results: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {}


def test_the_count_sees_a_probe_that_reads_the_device(tmp_path: Path) -> None:
    engine, _ = _engine(_cfg(), tmp_path / "engine")
    careless = _ReadsEveryUpdate()
    engine.probes.probes.append(careless)
    engine.probes._columns[id(careless)] = ProbeColumns(careless.name, ())
    mode = count_steps(engine.model, engine.train_update, warmup=2, updates=3)
    sites = [site for _, site in mode.reads]
    # the batched read, plus the probe's two: grads and optimizer state are marked as device
    assert len(mode.reads) == 3 * 3, sites
    # the probe's reads are named by the driver's line that called it (the first andrea_diag
    # frame): every read but the batched one is there
    assert sum("read_scalars" in s for s in sites) == 3
    assert sum("probes/driver.py" in s for s in sites) == 6
    engine.recorder.close()
    engine.recorder.release()


def test_probe_scalars_reach_the_host_at_the_flush(tmp_path: Path) -> None:
    engine, _ = _engine(_cfg(), tmp_path / "engine")
    mode = count_steps(engine.model, engine.train_update, warmup=2, updates=2)
    mode.reset()
    with counting(mode):
        engine.recorder.flush()  # the optimizer-state norms and the rows' device scalars
    assert 1 <= len(mode.reads) <= 3, mode.reads  # one per deferring probe + the rows' own
    engine.recorder.close()
    engine.recorder.release()


def _probe_ops_per_update(size: str, tmp_path: Path) -> tuple[int, int]:
    """(parameter tensors, aten ops the probes dispatch per update). The optimizer-state probe
    takes its CUDA path for Δθ·g (one flat product and one sum): the CPU's default, one dot a
    tensor, is the arithmetic tests/test_golden.py pins, not a cost a GPU pays."""
    # one mixer for both sizes (tiny's own is sharper): the same phases and boundaries, so a
    # difference in ops is the parameter count's, not a boundary's or a spike's
    engine, _ = _engine(_cfg(size, mixer_sharpness=1.0), tmp_path / size)
    optstate = next(p for p in engine.probes.probes if p.name == "optstate")
    optstate.flat_dot = True
    mode = count_steps(engine.model, engine.train_update, warmup=2, updates=2, sites=True)
    engine.recorder.close()
    engine.recorder.release()
    ops = sum(n for site, n in mode.op_sites.items() if site.startswith("probes/"))
    return len(engine.params), ops // 2


@pytest.mark.slow  # two engines built and counted: ~6 s
def test_probe_ops_per_update_do_not_grow_with_the_parameter_count(tmp_path: Path) -> None:
    n_small, ops_small = _probe_ops_per_update("tiny", tmp_path)
    n_large, ops_large = _probe_ops_per_update("tiny2", tmp_path)
    assert n_small < n_large  # more tensors (2 layers against 3) ...
    assert ops_small == ops_large  # ... and the same probe ops: none is per tensor
    assert ops_small < 40  # a fused op a list, a few casts, the layer groups: a short list


def test_foreach_norm_views_come_back_as_their_vector_without_a_stack() -> None:
    vec = torch.arange(5.0)
    mode = DeviceTaint([])
    with mode:
        out = as_vector(vec.unbind())  # what _foreach_norm returns on CUDA: views of one vector
    assert torch.equal(out, vec) and out.data_ptr() == vec.data_ptr()
    assert "stack" not in mode.ops
    apart = [torch.tensor(float(i)) for i in range(5)]  # separate tensors (the CPU's result)
    assert torch.equal(as_vector(apart), vec)
    gap = [*vec.unbind()[:2], *vec.unbind()[3:]]  # an element missing: stacked, not viewed
    assert torch.equal(as_vector(gap), torch.tensor([0.0, 1.0, 3.0, 4.0]))


@pytest.mark.slow  # six counted updates of an engine: ~3 s
def test_update_stats_on_their_own_schedule_skip_the_snapshot_between(tmp_path: Path) -> None:
    from andrea_diag.config import ProbeConfig

    cfg = _cfg(probes=ProbeConfig(update_stats_every=3, moment_norms_every=1))
    engine, _ = _engine(cfg, tmp_path / "engine")
    mode = count_steps(engine.model, engine.train_update, warmup=0, updates=0, sites=True)
    rows, copies = [], []
    for u in range(1, 7):
        before = sum(n for s, n in mode.op_sites.items() if "optstate.py" in s)
        with counting(mode):
            rows.append(engine.train_update(u))
        copies.append(sum(n for s, n in mode.op_sites.items() if "optstate.py" in s) - before)
    engine.recorder.flush()
    spikes = {r["update"] for r in rows if r["spike"]}
    measured = {r["update"] for r in rows if "update_rms" in r}
    assert measured == {3, 6} | spikes and measured != set(range(1, 7))
    assert all(r["m_norm"] > 0 for r in rows)  # the moments' norms stay every update
    # the off-schedule updates dispatch less of the probe's work (no snapshot copy, no Δθ)
    assert max(copies[i] for i in (0, 3)) < min(copies[i] for i in (2, 5)), copies
    engine.recorder.close()
    engine.recorder.release()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's CUDA _foreach_norm needs a GPU")
def test_cuda_foreach_norm_results_are_taken_back_as_one_vector() -> None:
    tensors = [torch.randn(n, device="cuda") for n in (3, 555, 65537, 1)]
    norms = torch._foreach_norm(tensors)
    out = as_vector(norms)
    assert torch.equal(out, torch.stack(list(norms)))  # the values, whichever path was taken
    # the fast path, where torch filled one vector: a view of it, not a stack of copies (on the
    # H200 with torch 2.11 an unconditional form of this check failed, cause not captured)
    size, base = norms[0].element_size(), norms[0].data_ptr()
    if all(t.data_ptr() == base + i * size for i, t in enumerate(norms)):
        assert out.data_ptr() == base


def test_optstate_probe_refuses_a_schedule_below_one_instead_of_clamping_it() -> None:
    from andrea_diag.probes.optstate import OptStateProbe

    with pytest.raises(ValueError, match="update_stats_every must be at least 1, got 0"):
        OptStateProbe(update_stats_every=0)
