"""Parity review (s24): the Hugging Face and Lightning callbacks where a framework ends or
restarts training other than by its ``on_train_end``: transformers' ``auto_find_batch_size``
reruns its loop after an out-of-memory error (``on_train_begin`` again, no ``on_train_end``),
and Lightning reports a failed fit to ``on_exception`` (its loggers finalize as "failed").
tests/test_callbacks.py pins the runs that end normally. Skipped without the extra.

    pytest tests/test_parity_s24_callbacks.py -q
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from andrea_diag.record import load_run

OOM = "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"  # accelerate's


def _crashed_run(run_dir: Path, error: str) -> None:
    """``run_dir`` was closed as a crashed run: rows kept, lock released, partial summary."""
    partial = json.loads((run_dir / "partial_summary.json").read_text())
    assert (partial["status"], partial["error"]) == ("crashed", error)
    assert not (run_dir / "run.lock").exists() and not (run_dir / "summary.json").exists()
    assert load_run(run_dir)["metrics"]["update"].tolist() == [1]


@pytest.mark.slow
def test_hf_auto_find_batch_size_retry_closes_the_first_run_and_counts_each_forward_once(
    tmp_path: Path,
) -> None:
    """The retry fires ``on_train_begin`` again: ours kept the first run open (its lock held,
    no summary) and its forward hook on the model, so every forward of the retried run was
    recorded twice (``microbatches`` 2 per update with no accumulation) and a hook stayed on
    the model after training."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from andrea_diag.integrations.hf import AndreaDiagCallback

    config = {"model_type": "gpt2", "vocab_size": 97, "n_positions": 32, "n_embd": 32,
              "n_layer": 2, "n_head": 2, "bos_token_id": 0, "eos_token_id": 0}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.from_pretrained(tmp_path / "config.json")
    )

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            gen = torch.Generator().manual_seed(0)
            for _ in range(64):
                ids = torch.randint(0, 97, (16,), generator=gen)
                yield {"input_ids": ids, "labels": ids}

    class OutOfMemoryOnce(transformers.TrainerCallback):
        """Raises the out-of-memory error accelerate retries on, after the first update."""

        def __init__(self) -> None:
            self.fired = False

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if not self.fired:
                self.fired = True
                raise RuntimeError(OOM)

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"), max_steps=2, per_device_train_batch_size=4,
        auto_find_batch_size=True, use_cpu=True, report_to=[], save_strategy="no",
        disable_tqdm=True,
    )  # fmt: skip
    callbacks = [AndreaDiagCallback(tmp_path / "run"), OutOfMemoryOnce()]
    transformers.Trainer(
        model=model, args=args, train_dataset=Batches(), callbacks=callbacks
    ).train()

    assert callbacks[1].fired and not model._forward_hooks
    _crashed_run(tmp_path / "run", "TrainingRestarted")
    retried = load_run(tmp_path / "run-2")
    assert retried["metrics"]["update"].tolist() == [1, 2]
    assert retried["metrics"]["microbatches"].tolist() == [1, 1]
    assert (tmp_path / "run-2" / "summary.json").exists()


@pytest.mark.slow
def test_lightning_on_exception_closes_the_run_as_crashed_and_a_new_fit_starts_clean(
    tmp_path: Path,
) -> None:
    """Ours had no ``on_exception``: a failed fit left its run open, with ``run.lock`` held
    and neither a summary nor a partial one, where ``SpikeMonitor``'s ``with`` block writes
    ``partial_summary.json`` with ``status: crashed``."""
    pl = pytest.importorskip("lightning.pytorch")
    from andrea_diag.integrations.lightning import AndreaDiagCallback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.fail_at: int | None = 1

        def training_step(self, batch: torch.Tensor, idx: int) -> torch.Tensor:
            if self.global_step == self.fail_at:
                raise RuntimeError("boom")
            return F.mse_loss(self.lin(batch), batch)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    callback = AndreaDiagCallback(tmp_path / "run", lockin=False)  # no vocabulary to probe
    module = Module()
    data = torch.utils.data.DataLoader(torch.randn(16, 4), batch_size=2)

    def fit() -> None:
        pl.Trainer(max_steps=3, accelerator="cpu", devices=1, logger=False,
                   enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, callbacks=[callback]).fit(module, data)  # fmt: skip

    with pytest.raises(RuntimeError, match="boom"):
        fit()
    _crashed_run(tmp_path / "run", "RuntimeError")
    module.fail_at = None
    fit()
    assert load_run(tmp_path / "run-2")["metrics"]["update"].tolist() == [1, 2, 3]
    assert (tmp_path / "run-2" / "summary.json").exists()
