"""Parity review (s30): the Lightning callback on an update Lightning steps without a backward.

A ``training_step`` that returns None is Lightning's way to skip a batch (often one whose loss
is NaN): no backward runs, the optimizer is still stepped and ``global_step`` still counts it,
but with no gradient every parameter is skipped. The callback recorded that update with a loss
of 0.0 (a perfect loss, never computed) and as applied, so the optimizer-state probe decayed
its spike terms for a step the optimizer never took. It now records the loss as NaN, 0
microbatches and ``applied`` False, on the row of Lightning's own step number.

    pytest tests/test_parity_s30_callbacks.py -q -p no:cacheprovider
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from andrea_diag.record import load_run

SKIP = 2  # the batch index whose training_step returns None


def _fit(pl: Any, run_dir: Path) -> tuple[Any, Any, list[torch.Tensor]]:
    from andrea_diag.integrations.lightning import AndreaDiagCallback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 2)
            self.losses: dict[int, float] = {}
            self.weights: list[torch.Tensor] = []  # the weights at each batch's start

        def training_step(self, batch: torch.Tensor, idx: int) -> torch.Tensor | None:
            self.weights.append(self.net.weight.detach().clone())
            if idx == SKIP:
                return None
            loss = self.net(batch).square().mean()
            self.losses[idx] = float(loss.detach())
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    torch.manual_seed(0)
    module = Module()
    loader = torch.utils.data.DataLoader(list(torch.randn(5, 3, 4)), batch_size=None)
    trainer = pl.Trainer(max_steps=5, gradient_clip_val=0.5, accelerator="cpu", devices=1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False,
                         callbacks=[AndreaDiagCallback(run_dir, lockin=False)])  # fmt: skip
    trainer.fit(module, loader)
    return trainer, module, module.weights


def test_a_step_lightning_took_without_a_backward_records_no_loss_and_no_applied_update(
    tmp_path: Path,
) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    trainer, module, weights = _fit(pl, tmp_path / "pl")
    metrics = load_run(tmp_path / "pl")["metrics"]
    # Lightning's own count: every batch is a step, the skipped one included
    assert trainer.global_step == 5
    assert metrics["update"].tolist() == [1, 2, 3, 4, 5]
    # the peer changed nothing at the skipped step, and changed the weights at every other
    changed = [not torch.equal(weights[i], weights[i + 1]) for i in range(4)]
    assert changed == [True, True, False, True]
    assert metrics["applied"].tolist() == [True, True, False, True, True]
    row = metrics.iloc[SKIP]
    assert math.isnan(row["loss"]) and row["microbatches"] == 0
    others = metrics.drop(index=SKIP)
    assert others["loss"].tolist() == pytest.approx([module.losses[i] for i in (0, 1, 3, 4)])
    assert (others["microbatches"] == 1).all()
