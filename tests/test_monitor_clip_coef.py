"""``clip_coef`` in a user's loop: an update nothing clipped reads exactly 1, and the report
counts a clip only under ``metrics.CLIPPED_BELOW``.

The pre-clip total (torch's return) and the post-clip norm (read back from the gradients) are
two reductions; in fp32 they differ by ~1e-7, and torch returns a bf16 total for bf16
gradients, 2**-8 apart. A clip that never ran must not read as "clipped" (found by a parity
review: a no-clip bf16 loop was judged clipped and "50% clipped"). A clip taken in another
norm than L2 (``norm_type=inf``) is undone by its own factor, not the L2 one.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from andrea_diag.metrics import CLIPPED_BELOW
from andrea_diag.monitor import SpikeMonitor
from andrea_diag.record import load_run
from andrea_diag.report.arm_comparison import touched_pct
from andrea_diag.report.arms import Arm, is_clipped, summary_row


def _model(dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4)]
    return torch.nn.Sequential(*layers).to(dtype)


def _loop(tmp_path, dtype, clip, updates: int = 12) -> dict:
    model = _model(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with SpikeMonitor(model, opt, tmp_path / "run", shadow=False, lockin=False) as mon:
        for _ in range(updates):
            loss = model(torch.randn(32, 16, dtype=dtype)).float().square().mean()
            loss.backward()
            mon.after_backward(loss)
            clip(model, mon)
            opt.step()
            mon.after_step()
            opt.zero_grad()
    return load_run(tmp_path / "run")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_clip_that_never_clips_records_a_coefficient_of_exactly_one(tmp_path, dtype):
    def never(model, mon):
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)
        assert total.dtype == dtype  # torch's total is in the gradients' dtype
        mon.after_clip(total)

    run = _loop(tmp_path, dtype, never)
    m = run["metrics"]
    assert (m["clip_coef"] == 1.0).all(), m["clip_coef"].tolist()
    assert (m["grad_norm_post"] == m["grad_norm"]).all()
    arm = Arm.from_run(run)
    assert summary_row(arm)["% clipped"] == 0.0
    assert not is_clipped(arm) and touched_pct(arm) == 0.0


def test_a_clip_that_does_clip_still_records_its_coefficient(tmp_path):
    seen: list[float] = []

    def tight(model, mon):
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        seen.append(1e-3 / (float(total) + 1e-6))  # torch's own coefficient
        mon.after_clip(total)

    m = _loop(tmp_path, torch.float32, tight)["metrics"]
    assert m["clip_coef"].tolist() == pytest.approx(seen, rel=1e-5)
    assert (m["clip_coef"] < CLIPPED_BELOW).all()


def test_an_inf_norm_clip_records_the_l2_norms_and_its_own_coefficient(tmp_path):
    truth: list[tuple[float, float]] = []

    def inf_norm(model, mon):
        grads = [p.grad.detach().clone() for p in model.parameters()]
        l2 = float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads])))
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-4, norm_type=math.inf)
        truth.append((l2, min(1.0, 1e-4 / (float(total) + 1e-6))))
        mon.after_clip(total, norm_type=math.inf)

    m = _loop(tmp_path, torch.float32, inf_norm)["metrics"]
    assert m["grad_norm"].tolist() == pytest.approx([t[0] for t in truth], rel=1e-5)
    assert m["clip_coef"].tolist() == pytest.approx([t[1] for t in truth], rel=1e-5)


@pytest.mark.parametrize("norm_type", [0.0, -1.0, float("nan")])
def test_a_norm_type_no_clip_takes_is_refused(tmp_path, norm_type):
    def bad(model, mon):
        mon.after_clip(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0), norm_type=norm_type)

    with pytest.raises(ValueError, match="norm_type must be positive or inf"):
        _loop(tmp_path, torch.float32, bad, updates=1)


def test_the_report_counts_a_clip_only_under_the_tolerance() -> None:
    metrics = pd.DataFrame({"update": [1, 2, 3, 4], "loss": [1.0] * 4, "grad_norm": [1.0] * 4,
                            "clip_coef": [1.0, 1 - 1e-7, 1 + 1e-7, 0.5]})  # fmt: skip
    arm = Arm(label="mine", arm="mine", size="?", config={"kind": "monitor"}, summary={},
              metrics=metrics, events=pd.DataFrame(), samples=pd.DataFrame())  # fmt: skip
    assert summary_row(arm)["% clipped"] == 25.0 and touched_pct(arm) == 25.0
    assert is_clipped(arm)


def test_a_lightning_loop_without_clipping_records_a_coefficient_of_exactly_one(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from andrea_diag.integrations.lightning import AndreaDiagCallback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _model()

        def training_step(self, batch: torch.Tensor, idx: int) -> torch.Tensor:
            return self.net(batch).square().mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    torch.manual_seed(1)
    loader = torch.utils.data.DataLoader(list(torch.randn(12, 8, 16)), batch_size=None)
    trainer = pl.Trainer(max_steps=6, accumulate_grad_batches=2, accelerator="cpu", devices=1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False,
                         callbacks=[AndreaDiagCallback(tmp_path / "pl", lockin=False)])  # fmt: skip
    trainer.fit(Module(), loader)
    run = load_run(tmp_path / "pl")
    assert len(run["metrics"]) == 6 and (run["metrics"]["clip_coef"] == 1.0).all()
    assert (run["metrics"]["microbatches"] == 2).all()  # accumulate_grad_batches, not 1
    assert summary_row(Arm.from_run(run))["% clipped"] == 0.0
