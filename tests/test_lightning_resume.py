"""A Lightning fit resumed from its checkpoint (``fit(ckpt_path=...)``) records into the first
fit's run folder when the callback is made with ``resume=True``, its updates counting on from
the first fit's last row (docs/integrations.md, "Callbacks"). Skipped without the extra.

    pytest tests/test_lightning_resume.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from andrea_diag.record import load_run


@pytest.mark.slow
def test_lightning_fit_from_a_checkpoint_with_resume_appends_to_the_first_run(
    tmp_path: Path,
) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from andrea_diag.integrations.lightning import AndreaDiagCallback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def training_step(self, batch: torch.Tensor, idx: int) -> torch.Tensor:
            return F.mse_loss(self.lin(batch), batch)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    data = torch.utils.data.DataLoader(torch.randn(16, 4), batch_size=2)

    def trainer(steps: int, callback: AndreaDiagCallback) -> pl.Trainer:
        return pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False,
                          enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False, callbacks=[callback])  # fmt: skip

    first = trainer(2, AndreaDiagCallback(tmp_path / "run", lockin=False))
    first.fit(Module(), data)
    first.save_checkpoint(tmp_path / "two.ckpt")
    second = trainer(5, AndreaDiagCallback(tmp_path / "run", lockin=False, resume=True))
    second.fit(Module(), data, ckpt_path=tmp_path / "two.ckpt")

    assert load_run(tmp_path / "run")["metrics"]["update"].tolist() == [1, 2, 3, 4, 5]
    assert not (tmp_path / "run-2").exists()  # one folder, not a new one per fit
    assert (tmp_path / "run" / "summary_to_update_2.json").exists()  # the first fit's summary
