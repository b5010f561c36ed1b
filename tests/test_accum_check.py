"""accum-check: the toolkit's accumulation loop matches a full batch; every mistake shows.

pytest tests/test_accum_check.py -q

Small shapes (tiny model, m=2, A=3, 16 tokens) keep each check to a few seconds on two cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import MODEL_PRESETS
from andrea_diag.errors import UserError
from andrea_diag.experiments.accum_check import (
    DETECT,
    TOLERANCE,
    AccumCheckResult,
    AccumSpec,
    make_batch,
    run_accum_check,
    split,
)
from andrea_diag.train.accumulation import IGNORE

SMALL = {"micro_batch": 2, "accum": 3, "seq_len": 16}
MISTAKES = {
    "mean of microbatch means",
    "double division (÷A twice)",
    "zero grads every microbatch",
    "no zeroing between groups",
    "partial group ÷ full group",
    "scheduler per microbatch",
}


@pytest.fixture(scope="module", params=[1, 2], ids=["D=1", "D=2"])
def fp32_result(request: pytest.FixtureRequest) -> AccumCheckResult:
    return run_accum_check(AccumSpec(replicas=request.param, **SMALL))


def _rows(result: AccumCheckResult) -> dict[str, float]:
    return {r.method: r.rel_err for r in result.rows}


def test_batch_is_padded_with_unequal_token_counts() -> None:
    """Guards the mistakes' premise: mean of means only differs when token counts differ."""
    x, y = make_batch(12, 16, MODEL_PRESETS["tiny"].vocab_size, torch.Generator().manual_seed(0))
    assert (y == IGNORE).any() and x.shape == y.shape == (12, 16)
    counts = [int((yb != IGNORE).sum()) for mbs in split(x, y, 2, 3) for _, yb in mbs]
    assert len(set(counts)) > 1 and counts[0] > counts[-1]
    per_replica = [sum(int((yb != IGNORE).sum()) for _, yb in mbs) for mbs in split(x, y, 2, 3)]
    assert per_replica[0] > per_replica[1]


def test_toolkit_loop_matches_full_batch_in_fp32(fp32_result: AccumCheckResult) -> None:
    rows = _rows(fp32_result)
    assert rows["toolkit loop"] <= 1e-6
    assert rows["toolkit loop, partial group"] <= 1e-6
    assert fp32_result.ok
    assert fp32_result.meta["floor"] < 1e-6  # fp32 itself resolves the contract here
    counts = {n for mbs in fp32_result.meta["tokens_per_microbatch"] for n in mbs}
    assert len(counts) > 1  # really padded: unequal supervised tokens per microbatch


def test_every_mistake_shows_a_clearly_nonzero_error(fp32_result: AccumCheckResult) -> None:
    rows = _rows(fp32_result)
    expected = MISTAKES | (
        {"replica-local denominator"} if fp32_result.meta["replicas"] > 1 else set()
    )
    mistakes = {r.method: r for r in fp32_result.rows if r.kind == "mistake"}
    assert set(mistakes) == expected
    for name, row in mistakes.items():
        assert row.rel_err > 0.1, name  # far above DETECT and the toolkit's 1e-6
        assert row.passed and row.rel_err >= DETECT, name
    a = SMALL["accum"]
    assert rows["double division (÷A twice)"] == pytest.approx(1 - 1 / a, rel=1e-4)
    assert rows["partial group ÷ full group"] == pytest.approx(1 - (a // 2) / a, rel=1e-4)
    # warmup over 100 updates: A scheduler steps reach (A + 1)/100 instead of 2/100
    assert rows["scheduler per microbatch"] == pytest.approx((a + 1) / 2 - 1)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_autocast_within_its_documented_tolerance(precision: str) -> None:
    res = run_accum_check(AccumSpec(precision=precision, **SMALL))
    assert res.meta["tolerance_base"] == TOLERANCE[precision]
    assert res.ok and _rows(res)["toolkit loop"] <= res.meta["tolerance"] < DETECT
    assert all(r.passed for r in res.rows if r.kind == "mistake")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"accum": 1}, "--accum must be at least 2"),
        ({"micro_batch": 0}, "--micro-batch must be at least 1"),
        ({"replicas": 0}, "--replicas must be at least 1"),
        ({"size": "7b"}, "unknown size"),
        ({"precision": "fp8"}, "unknown precision"),
        ({"seq_len": 10_000}, "--seq-len must be in"),
    ],
)
def test_bad_spec_is_a_user_error(kwargs: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        run_accum_check(AccumSpec(**kwargs))


def _cli(*args: str):
    return CliRunner().invoke(app, ["accum-check", *args])


def test_cli_writes_json_and_html(tmp_path: Path) -> None:
    out = tmp_path / "accum"
    res = _cli("--micro-batch", "2", "--accum", "3", "--replicas", "2", "--seq-len", "16",
               "--out", str(out))  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "toolkit loop" in res.output and "PASS" in res.output
    data = json.loads((out / "accum-check.json").read_text(encoding="utf-8"))
    assert data["meta"]["replicas"] == 2 and data["meta"]["command"].startswith("andrea-diag")
    assert {r["method"] for r in data["rows"]} >= MISTAKES | {"replica-local denominator"}
    page = (out / "accum-check.html").read_text(encoding="utf-8")
    assert "<table>" in page and "replica-local denominator" in page and "<script" not in page


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--accum", "1"], "--accum must be at least 2"),
        (["--precision", "fp8"], "unknown precision"),
        (["--device", "tpu"], "unknown device"),
    ],
)
def test_cli_bad_option_gives_one_line_and_nonzero_exit(
    tmp_path: Path, args: list[str], message: str
) -> None:
    res = _cli(*args, "--out", str(tmp_path / "never"))
    assert res.exit_code != 0
    assert message in res.output and "Traceback" not in res.output
    assert not (tmp_path / "never").exists()


def test_cli_exits_nonzero_when_the_toolkit_loop_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken loop (here: accumulate_group's gradient doubled) fails with one line, exit 1."""
    import andrea_diag.train.components as components

    real = components.accumulate_group

    def doubled(model, mbs, **kw):  # type: ignore[no-untyped-def]
        res = real(model, mbs, **kw)
        for p in model.parameters():
            p.grad.mul_(2)
        return res

    # the toolkit loop is the trainer's accumulate_with, which calls accumulate_group there
    monkeypatch.setattr(components, "accumulate_group", doubled)
    res = _cli("--micro-batch", "2", "--accum", "2", "--seq-len", "8", "--out", str(tmp_path))
    assert res.exit_code == 1
    assert "toolkit's accumulation loop is off" in res.output and "Traceback" not in res.output
    assert (tmp_path / "accum-check.json").exists()  # the evidence is written before failing


def test_unsupported_precision_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where autocast cannot run the dtype, the check says so instead of a traceback."""
    import andrea_diag.experiments.accum_check as ac

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("dtype not supported by autocast here")

    monkeypatch.setattr(ac.torch, "autocast", refuse)
    with pytest.raises(UserError, match="--precision fp16 is not supported on cpu"):
        run_accum_check(AccumSpec(precision="fp16", **SMALL))


def test_fp16_arm_uses_the_trainers_fp16_precision_and_its_grad_scaler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loss scale is FP16Precision's GradScaler's, not a constant of accum-check's own."""
    from andrea_diag.train import components

    made: list[components.FP16Precision] = []
    real_init = components.FP16Precision.__init__

    def init(self: components.FP16Precision, device: torch.device | None = None) -> None:
        real_init(self, device)
        self.scaler = torch.amp.GradScaler(self.device.type, init_scale=2.0**10)
        made.append(self)

    monkeypatch.setattr(components.FP16Precision, "__init__", init)
    res = run_accum_check(AccumSpec(precision="fp16", **SMALL))
    assert len(made) == 1 and res.meta["precision_component"] == "FP16Precision"
    assert res.meta["loss_scale"] == 2.0**10  # what the trainer's scaler scaled by
    assert res.ok and all(r.passed for r in res.rows if r.kind == "mistake")


def test_accum_check_defines_no_precision_of_its_own() -> None:
    """No dtype table, autocast or loss scale in accum-check: the trainer's components own them."""
    import andrea_diag.experiments.accum_check as ac
    import andrea_diag.experiments.accum_loops as loops
    from andrea_diag.train.components import PRECISIONS

    for module in (ac, loops):
        source = Path(module.__file__).read_text(encoding="utf-8")
        for owned in ("torch.float16", "torch.bfloat16", "torch.autocast", "GradScaler(",
                      "LOSS_SCALE", "DTYPES"):  # fmt: skip
            assert owned not in source, (module.__name__, owned)
    assert set(TOLERANCE) == set(PRECISIONS)  # one tolerance per registered precision


def test_toolkit_row_runs_the_trainers_accumulate_with_through_a_reducer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each replica's group is the trainer's accumulate_with under DDPReducer's rules (global
    tokens, loss x D), not a loss-hook rescale of accumulate_group's own denominator."""
    import andrea_diag.experiments.accum_loops as loops
    from andrea_diag.train.components import Reducer

    calls: list[tuple[int, int, float, str, bool]] = []
    real = loops.accumulate_with

    def spy(model, micro, precision, reducer, device, **kw):  # type: ignore[no-untyped-def]
        assert isinstance(reducer, Reducer) and not kw.get("loss_hook")
        calls.append((reducer.rank, reducer.world_size, reducer.backward_factor(),
                      precision.name, reducer.global_tokens(reducer.counts[reducer.rank], device)
                      == sum(reducer.counts)))  # fmt: skip
        return real(model, micro, precision, reducer, device, **kw)

    monkeypatch.setattr(loops, "accumulate_with", spy)
    res = run_accum_check(AccumSpec(replicas=2, precision="bf16", **SMALL))
    assert res.ok
    # the partial group's one replica, then the D=2 toolkit row's ranks 0 and 1
    assert calls == [
        (0, 1, 1.0, "bf16", True),
        (0, 2, 2.0, "bf16", True),
        (1, 2, 2.0, "bf16", True),
    ]


def test_in_process_replicas_average_the_gradients_as_ddp_does() -> None:
    from andrea_diag.experiments.accum_loops import InProcessReplicas

    p = torch.nn.Parameter(torch.zeros(3))
    red = InProcessReplicas([5, 7])
    assert red.global_tokens(5, torch.device("cpu")) == 12 and red.backward_factor() == 2.0
    for rank, g in enumerate((torch.tensor([2.0, 4.0, 6.0]), torch.tensor([0.0, 2.0, 4.0]))):
        red.rank, p.grad = rank, g.clone()
        red.reduce([p])
    assert torch.equal(p.grad, torch.tensor([1.0, 3.0, 5.0]))  # (g0 + g1) / D


def test_fp16_overflow_halves_the_scale_as_the_trainers_scaler_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At a scale the gradients overflow at, the GradScaler's skipped step halves it until the
    reference is finite; the rows are then measured (and pass) at the settled scale."""
    from andrea_diag.train import components

    real_init = components.FP16Precision.__init__

    def init(self: components.FP16Precision, device: torch.device | None = None) -> None:
        real_init(self, device)
        self.scaler = torch.amp.GradScaler(self.device.type, init_scale=2.0**40)  # fp16 max 65504

    monkeypatch.setattr(components.FP16Precision, "__init__", init)
    res = run_accum_check(AccumSpec(precision="fp16", **SMALL))
    assert res.meta["loss_scale"] == 2.0**40 > res.meta["loss_scale_end"]  # halved on overflow
    assert res.ok and all(r.passed for r in res.rows if r.kind == "mistake")
