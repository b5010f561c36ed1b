"""The trainer's components one at a time: precision, reducer, evaluator, run state, clippers,
and one `Trainer.train_update` in the documented order."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from andrea_diag.clip.modes import CLIPPERS, Clipper, make_clipper, mode_color, register
from andrea_diag.config import ProbeConfig, RunConfig
from andrea_diag.data import prepare_data
from andrea_diag.metrics import ProbeColumns
from andrea_diag.probes import UpdateContext
from andrea_diag.report.style import PREFERRED
from andrea_diag.train.components import Evaluator, Precision, Reducer, TrainState


def _params(*grads: list[float]) -> list[torch.nn.Parameter]:
    out = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(len(g)))
        p.grad = torch.tensor(g)
        out.append(p)
    return out


def test_fp32_precision_steps_only_applied_updates_and_says_when_tf32_is_allowed() -> None:
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=1.0)
    p.grad = torch.ones(2)
    prec = Precision()
    with prec.autocast():
        prec.unscale_(opt)  # fp32: gradients already in true units
    prec.step(opt, applied=False)
    assert torch.equal(p.detach(), torch.ones(2))  # a skipped update changes nothing
    prec.step(opt, applied=True)
    assert torch.equal(p.detach(), torch.zeros(2))
    assert prec.describe("high", torch.device("cpu")) == "fp32 weights and grads"
    assert "TF32 allowed" in prec.describe("high", torch.device("cuda"))
    assert "TF32" not in prec.describe("highest", torch.device("cuda"))


def test_one_process_reducer_is_d_1_and_leaves_gradients_alone() -> None:
    params = _params([3.0, 4.0])
    red = Reducer()
    with red.microbatch(last=False):
        pass
    red.reduce(params)
    assert red.world_size == 1 and torch.equal(params[0].grad, torch.tensor([3.0, 4.0]))
    assert Evaluator().maybe_evaluate(5, torch.nn.Linear(1, 1)) == {}


def test_train_state_round_trips_through_its_state_dict() -> None:
    st = TrainState(update=7, microbatches=14, examples=112, tokens=7168)
    st.batch_hashes.append("ab")
    st.phases.append(2)
    again = TrainState()
    again.load_state_dict(st.state_dict())
    assert again == st and again.counts() == {"microbatches": 14, "examples": 112, "tokens": 7168}
    st.batch_hashes.append("cd")  # the loaded copy does not share lists with the original
    assert again.batch_hashes == ["ab"]


@pytest.mark.parametrize(
    ("mode", "post"),
    [("none", 5.0), ("global", 1.0), ("per-tensor", math.sqrt(2.0))],
)
def test_each_clip_mode_reports_the_norm_the_optimizer_receives(mode: str, post: float) -> None:
    params = _params([3.0, 4.0], [0.0, 2.0])  # norms 5 and 2, total sqrt(29)
    res = make_clipper(mode, max_norm=1.0, impl="reference")(params)
    after = math.sqrt(sum(float(p.grad.square().sum()) for p in params))
    assert float(res.total_norm) == pytest.approx(math.sqrt(29.0), rel=1e-6)
    assert float(res.post_norm) == pytest.approx(after, rel=1e-5)
    if mode == "none":
        assert after == pytest.approx(math.sqrt(29.0))
    elif mode == "global":
        assert after == pytest.approx(1.0, rel=1e-5)
    else:
        assert after == pytest.approx(post, rel=1e-5)  # each tensor clipped to 1 on its own


def test_a_registered_clip_mode_reaches_the_config_choices_and_the_report_colours() -> None:
    assert PREFERRED["none"] == mode_color("none")

    class HalfClip(Clipper):
        name, label, color, kernel_mode = "test-half", "half", "#123456", "none"

        def __call__(self, params):  # halves every gradient, keeps the measured norms
            res = super().__call__(params)
            for p in params:
                p.grad.mul_(0.5)
            res.scale = torch.full_like(res.scale, 0.5)
            return res

    register(HalfClip)
    try:
        params = _params([3.0, 4.0])
        res = make_clipper("test-half")(params)
        assert float(res.post_norm) == pytest.approx(2.5) and mode_color("test-half") == "#123456"
        assert RunConfig(clip="test-half").resolve().arm == "test-half"  # the config takes it
    finally:
        del CLIPPERS["test-half"]
    with pytest.raises(ValueError, match="unknown clip mode"):
        make_clipper("test-half")


def test_one_train_update_fills_a_row_in_the_documented_order(tmp_path: Path, make_trainer) -> None:
    every = ProbeConfig(moment_norms_every=1)  # the optimizer-state probe's norms at update 1
    cfg = RunConfig(size="tiny", steps=3, clip="global", device="cpu", probes=every).resolve()
    data = prepare_data(cfg.sources, seed=cfg.corpus_seed)
    trainer = make_trainer(cfg, tmp_path / "run", data)
    before = [p.detach().clone() for p in trainer.params]
    row = trainer.train_update(1)
    assert trainer.state.update == 1 and trainer.state.batch_hashes == [row["batch_hash"]]
    assert row["tokens"] == cfg.micro_batch * cfg.accum * cfg.seq_len == trainer.state.tokens
    assert row["grad_norm_post"] <= 1.0 + 1e-5 and row["applied"] is True
    assert "spike" in row  # the spike probe ran after the clip, on the update's one host read
    assert "m_norm" not in row  # the optimizer-state probe's scalars wait on the device ...
    trainer.recorder.flush()
    assert "m_norm" in row  # ... for the recorder's flush (the probe ran after the step)
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, trainer.params, strict=True))
    state = trainer.state_dict()
    assert state["train_state"]["update"] == 1 and state["probe_driver"]["prev_phase"] == 0
    assert set(state) >= {"model", "optimizer", "scheduler", "clipper", "precision", "reducer"}


def test_out_of_memory_is_one_line_with_the_same_effective_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from andrea_diag.cli import app

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    # the trainer runs its group through components.accumulate_with
    monkeypatch.setattr("andrea_diag.train.components.accumulate_group", oom)
    res = CliRunner().invoke(app, ["train", "--steps", "3", "--out", str(tmp_path / "r")])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "out of memory at update 1 of arm global with m=8, A=2, D=1" in res.output
    assert "--micro-batch 4 --accum 4" in res.output  # 8*2 = 4*4: the same effective batch
    assert (tmp_path / "r" / "global" / "partial_summary.json").exists()  # nothing recorded lost


class _Spy:
    """A probe that keeps the context it was handed (and writes nothing)."""

    name = "spy"

    def __init__(self) -> None:
        self.seen: list[UpdateContext] = []

    def after_clip(self, ctx: UpdateContext) -> None:
        self.seen.append(ctx)

    def after_step(self, ctx: UpdateContext) -> None:
        pass

    def close(self, run_dir: Path, results: object = None) -> dict[str, object]:
        return {}


def test_the_probes_see_the_loops_own_facts_and_the_drivers_boundary(
    tmp_path: Path, make_trainer
) -> None:
    cfg = RunConfig(size="tiny", steps=2, clip="global", device="cpu").resolve()
    trainer = make_trainer(cfg, tmp_path / "run", prepare_data(cfg.sources, seed=cfg.corpus_seed))
    spy = _Spy()
    trainer.probes.probes.append(spy)
    trainer.probes._columns[id(spy)] = ProbeColumns(spy.name, ())
    row = trainer.train_update(1)
    (ctx,) = spy.seen
    assert ctx.row is row  # the row the loop logs: the probes add their columns to it
    assert (ctx.update, ctx.loss, ctx.applied, ctx.skipped) == (1, row["loss"], True, False)
    assert ctx.phase == row["phase"] and ctx.boundary is row["boundary"] is False
    assert ctx.weights == {k[2:]: v for k, v in row.items() if k.startswith("w_")}
    assert ctx.recorder is trainer.recorder and ctx.params is trainer.params
    assert ctx.example_loss.numel() == row["examples"] == ctx.example_source.numel()
    assert ctx.cache["grads_nonfinite"] is False  # from the update's one read
    assert trainer.probes.prev_phase == row["phase"]  # the driver remembers it for the next
