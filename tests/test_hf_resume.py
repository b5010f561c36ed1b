"""A Hugging Face ``Trainer`` resumed from its own checkpoint (``train(resume_from_checkpoint=
...)``) records into the first run's folder when the callback is made with ``resume=True``, its
updates counting on from the first run's last row, as the Lightning fit does
(tests/test_lightning_resume.py; docs/integrations.md, "Callbacks"). Skipped without the extra.

    pytest tests/test_hf_resume.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from andrea_diag.record import load_run

VOCAB, T, BATCH = 64, 16, 2


def _rows() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (32, T), generator=g)
    return [{"input_ids": row, "labels": row} for row in ids]


@pytest.mark.slow
def test_hf_train_resumed_from_its_checkpoint_with_resume_appends_to_the_first_run(
    tmp_path: Path,
) -> None:
    transformers = pytest.importorskip("transformers")
    from andrea_diag.integrations.hf import AndreaDiagCallback

    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=T, n_embd=32, n_layer=1,
                                     n_head=2, bos_token_id=0, eos_token_id=0)  # fmt: skip

    def trainer(steps: int, callback: AndreaDiagCallback) -> transformers.Trainer:
        torch.manual_seed(0)
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / "hf-out"), max_steps=steps,
            per_device_train_batch_size=BATCH, learning_rate=1e-3, use_cpu=True,
            report_to=[], save_strategy="steps", save_steps=2, disable_tqdm=True,
        )  # fmt: skip
        model = transformers.AutoModelForCausalLM.from_config(config)
        return transformers.Trainer(model=model, args=args, train_dataset=_rows(),
                                    callbacks=[callback])  # fmt: skip

    trainer(2, AndreaDiagCallback(tmp_path / "run", lockin=False)).train()
    checkpoint = tmp_path / "hf-out" / "checkpoint-2"
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 2
    second = trainer(5, AndreaDiagCallback(tmp_path / "run", lockin=False, resume=True))
    second.train(resume_from_checkpoint=str(checkpoint))

    assert load_run(tmp_path / "run")["metrics"]["update"].tolist() == [1, 2, 3, 4, 5]
    assert not (tmp_path / "run-2").exists()  # one folder, not a new one per train()
    assert (tmp_path / "run" / "summary_to_update_2.json").exists()  # the first run's summary
