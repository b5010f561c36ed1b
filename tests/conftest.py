"""Shared pytest fixtures. pytest loads this file itself; no test module imports it.

What more than one test module needs lives here, handed out as fixtures; a builder is a fixture
that returns the function, so a test asks for it by name and calls it::

    def test_report(make_run, tmp_path):
        run_dir = make_run(tmp_path / "none", clip="none")

Synthetic run directories (test_report.py, test_report_browser.py):
    ``make_run``          writes one run dir through the real Recorder
    ``boundary_updates``  the updates at which such a run starts a new bandit phase

Gradient clipping, the same cases and tolerance table for the CPU reference
(test_clip_reference.py) and the CUDA extension (test_clip_cuda.py):
    ``clip_case``, ``clip_dtype``, ``clip_norm_type``  parametrised over CASES, DTYPES, NORM_TYPES
    ``make_grads``, ``grad_holders``, ``check_impl``    gradients, their holders, the bound check
    ``check_nonfinite``  a NaN/inf gradient poisons the rest as torch's clip does

Trainers on CPU (test_precision.py, test_adaptive_clip.py, ...):
    ``make_trainer``      ``make_trainer(cfg, run_dir, data)``: a Trainer on the usual BatchPlan

The ``--resume`` tests (tests/test_hostile*_resume.py) and the hostile sweep tests:
    ``finished_cascade``  tests/stopped_cascade.py's tiny cascade, trained once per session
    ``finished_sweep``    tests/finished_sweep.py's tiny sweep, trained once per session

Test tiers: ``pytest -m "not slow"`` is the quick tier (under 2 minutes on two cores). A test is
``slow`` when it trains end to end or takes more than ~20 s; mark it with ``@pytest.mark.slow``
(or ``pytestmark`` for a whole module), or list its module in ``SLOW_MODULES`` below. CI and the
README's test command run both tiers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from stopped_cascade import ARGS as STOPPED_CASCADE_ARGS
from synthetic_runs import _boundary_updates, _make_run
from typer.testing import CliRunner

from andrea_diag import clip_grad_norm_, clip_grad_norm_with_stats
from andrea_diag.clip import reference
from andrea_diag.config import RunConfig

# ---- test tiers ----

# Modules whose tests all train end to end (cascades, sweeps, ladders, resumes, integrations):
# marked ``slow`` here, in one place, rather than by a line in each of those files.
SLOW_MODULES = {
    "test_byo", "test_callbacks", "test_distributed", "test_flush", "test_ladder",
    "test_monitor_matches_trainer", "test_report_unfinished", "test_resume", "test_sweep",
    "test_sweep_jobs", "test_precision", "test_bench_train", "test_heldout_eval",
    "test_hostile_resume", "test_load_runs", "test_sweep_sigterm",
}  # fmt: skip
# Single tests that train, in modules whose other tests are quick.
SLOW_TESTS = {
    "test_adaptive_clip::test_a_resumed_trainer_continues_the_adaptive_modes_state",
    "test_probe_driver::test_a_failing_probe_is_disabled_and_the_run_finishes",
    "test_probe_driver::test_a_crashed_sweep_cell_does_not_stop_the_others",
    "test_trainer_components::test_one_train_update_fills_a_row_in_the_documented_order",
    "test_trainer_components::test_out_of_memory_is_one_line_with_the_same_effective_batch",
    "test_cli::test_a_full_disk_during_a_run_says_what_was_kept",
    "test_real_sources::test_default_cascade_report_names_all_three_sources_real_with_package_provenance",
    # measured at 20-55 s each on 2 shared cores (pytest --durations):
    "test_bench_cpu::test_bench_kernels_cpu_tiny",
    "test_bench_cpu::test_bench_kernels_default_out_is_under_runs",
    "test_accum_check::test_cli_writes_json_and_html",
    "test_accum_check::test_cli_exits_nonzero_when_the_toolkit_loop_is_off",
    "test_data_distinct::test_in_source_loss_clearly_lower",  # trains a tiny model per source
    "test_sharded_norm::test_sharded_norm_matches_unsharded",  # spawns a gloo process group
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what SLOW_MODULES and SLOW_TESTS name ``slow`` (parametrised ids included)."""
    for item in items:
        module = Path(str(item.fspath)).stem
        name = getattr(item, "originalname", item.name)
        if module in SLOW_MODULES or f"{module}::{name}" in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


# ---- trainers on CPU ----


@pytest.fixture(scope="session")
def make_trainer() -> Callable[..., object]:
    """``make_trainer(cfg, run_dir, data)``: a Trainer for a *resolved* ``cfg`` on ``data``, fed
    by the BatchPlan every trainer test uses (``Mixer(seed=0)``, plan seed 0, the config's m, A
    and sequence length)."""
    from andrea_diag.data import BatchPlan, Mixer
    from andrea_diag.train.loop import Trainer

    def make(cfg: RunConfig, run_dir: Path, data: object) -> Trainer:
        plan = BatchPlan(data, Mixer(seed=0), seed=0, micro_batch=cfg.micro_batch,
                         accum=cfg.accum, seq_len=cfg.seq_len)  # fmt: skip
        return Trainer(cfg, run_dir, data, plan)

    return make


# ---- the --resume tests' cascade: tests/stopped_cascade.py ----


@pytest.fixture(scope="session")
def finished_cascade(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted tiny cascade (checkpoints at updates 2 and 4 kept in each arm). Read
    only: a test stops a copy of it (``stopped_cascade.stopped``)."""
    from andrea_diag.cli import app  # the CLI's import is the slow part: only when asked for

    out = tmp_path_factory.mktemp("finished-cascade") / "c"
    res = CliRunner().invoke(app, [*STOPPED_CASCADE_ARGS, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="session")
def finished_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny sweep of one cell (tests/finished_sweep.py). Read only: a test plants
    things in a copy of it."""
    from finished_sweep import SWEEP, strict_cli  # imports the CLI: only when asked for

    out = tmp_path_factory.mktemp("finished-sweep") / "s"
    code, output = strict_cli(*SWEEP, "--out", str(out))
    assert code == 0, output
    return out


# ---- synthetic run directories (the report tests): tests/synthetic_runs.py ----


@pytest.fixture(scope="session")
def make_run() -> Callable[..., Path]:
    """``make_run(run_dir, clip=..., size=..., n_updates=..., probes=..., spikes=..., ...)``.

    Writes one synthetic run dir through the real Recorder and returns it. Session-scoped (it
    is a plain function) so module-scoped fixtures can build their runs with it too.
    """
    return _make_run


@pytest.fixture(scope="session")
def boundary_updates() -> Callable[[int], list[int]]:
    """``boundary_updates(n_updates)``: the updates at which a ``make_run`` run starts a phase."""
    return _boundary_updates


# ---- gradient clipping: cases and tolerance table (CPU reference and CUDA extension) ----

# Per-dtype tolerances, relative errors ||out - truth|| / ||truth|| against torch in float64.
# norm: our accumulation is fp32 (or better) for every input dtype, so the norm of the *same
#   quantised values* is good to ~1e-6 whatever the gradient dtype.
# grads: the clipped gradients are rounded once to their dtype; the bound is max(floor,
#   2 x torch's own error in that dtype) -- flash-attention's "at most 2x plain PyTorch" rule.
TOL: dict[torch.dtype, dict[str, float]] = {
    torch.float32: {"norm": 2e-6, "grad_floor": 2e-7},
    torch.bfloat16: {"norm": 2e-6, "grad_floor": 4e-3},  # bf16 half-ulp 2^-9, RMS well below
    torch.float16: {"norm": 2e-6, "grad_floor": 5e-4},  # fp16 half-ulp 2^-12
}
DTYPES = list(TOL)

# Sizes that straddle the 16384-element chunk edge (reference.CHUNK; 65536 = 4 chunks), the (97, 1025) awkward matrix, empty and
# one-element tensors, and a list longer than one launch holds (160 tensors per launch).
CASES: dict[str, list[tuple[int, ...]]] = {
    "awkward": [(1,), (555,), (65535,), (65537,), (2048 * 32 + 1,), (97, 1025)],
    "chunk_edges": [(16383,), (16384,), (16385,), (65536,), (131073,), (3, 16384 + 7)],
    "empty_and_one": [(0,), (1,), (3, 0), (7,), (1, 1)],
    "many_tensors": [((i * 37) % 300 + 1,) for i in range(400)],
    "single": [(1000,)],
}
NORM_TYPES = [2.0, math.inf, 1.0, 3.0]


def _make_grads(
    case: str, dtype: torch.dtype, device: str | torch.device = "cpu", seed: int = 0
) -> list[torch.Tensor]:
    """Fresh random gradients for a named case; tensors differ in scale like real layers do."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, shape in enumerate(CASES[case]):
        g = torch.randn(shape, generator=gen) * (0.5 + (i % 5))
        out.append(g.to(device=device, dtype=dtype))
    return out


def _torch_same_dtype_err(grads: list[torch.Tensor], max_norm: float, p: float) -> float:
    """How far torch's own clip in the gradients' dtype lands from the float64 truth."""
    _, _, truth = reference.float64_truth(grads, max_norm, p)
    copies = [g.clone() for g in grads]
    clip_grad_norm_(_grad_holders(copies), max_norm, p, impl="torch")
    return reference.rel_err(copies, truth)


def _grad_holders(grads: list[torch.Tensor]) -> list[reference.GradHolder]:
    return [reference.GradHolder(g) for g in grads]


def _check_impl(
    grads: list[torch.Tensor], impl: str, max_norm: float, p: float, variant: str | None = None
) -> None:
    """Clip ``grads`` in place with ``impl`` and assert the table's bounds against float64."""
    dtype = grads[0].dtype
    total64, per64, truth = reference.float64_truth(grads, max_norm, p)
    torch_err = _torch_same_dtype_err(grads, max_norm, p)
    if variant is None:
        res = clip_grad_norm_with_stats(_grad_holders(grads), max_norm, p, impl=impl)
        total, per = res.total_norm, res.per_tensor_norm
    else:
        from andrea_diag.clip import cuda

        total, per, _, _ = cuda.clip(grads, max_norm, p, apply=True, variant=variant)
    tol = TOL[dtype]
    assert total.shape == ()
    assert reference.rel_err(total, total64) <= tol["norm"], (total, total64)
    assert reference.rel_err(per, per64) <= tol["norm"]
    grad_bound = max(tol["grad_floor"], 2 * torch_err)
    assert reference.rel_err(grads, truth) <= grad_bound


def _check_nonfinite(grads: list[torch.Tensor], impl: str) -> None:
    """Clip ``grads`` (one of them non-finite) with ``impl``; assert it poisons them like torch."""
    expect = [g.clone() for g in grads]
    t_total = torch.nn.utils.clip_grad_norm_(_grad_holders(expect), 1.0)
    res = clip_grad_norm_with_stats(_grad_holders(grads), 1.0, impl=impl)
    assert bool(res.nonfinite)
    assert math.isnan(float(res.total_norm)) == math.isnan(float(t_total))
    # torch poisons every gradient (NaN scale, or inf * 0); so must we, element for element.
    for g, e in zip(grads, expect, strict=True):
        assert torch.equal(g.isnan(), e.isnan())


@pytest.fixture(params=list(CASES))
def clip_case(request: pytest.FixtureRequest) -> str:
    """Each named case of CASES in turn."""
    return request.param


@pytest.fixture(params=DTYPES, ids=str)
def clip_dtype(request: pytest.FixtureRequest) -> torch.dtype:
    """Each dtype of the tolerance table in turn."""
    return request.param


@pytest.fixture(params=NORM_TYPES)
def clip_norm_type(request: pytest.FixtureRequest) -> float:
    """Each norm type of NORM_TYPES in turn."""
    return request.param


@pytest.fixture(scope="session")
def make_grads() -> Callable[..., list[torch.Tensor]]:
    """``make_grads(case, dtype, device="cpu", seed=0)``: fresh gradients for a CASES name."""
    return _make_grads


@pytest.fixture(scope="session")
def grad_holders() -> Callable[[list[torch.Tensor]], list[reference.GradHolder]]:
    """``grad_holders(grads)``: parameter-like holders (``.grad``) that clip functions take."""
    return _grad_holders


@pytest.fixture(scope="session")
def check_impl() -> Callable[..., None]:
    """``check_impl(grads, impl, max_norm, p, variant=None)``: clip, assert the table's bounds."""
    return _check_impl


@pytest.fixture(scope="session")
def check_nonfinite() -> Callable[[list[torch.Tensor], str], None]:
    """``check_nonfinite(grads, impl)``: clip non-finite gradients, assert torch's poisoning."""
    return _check_nonfinite
