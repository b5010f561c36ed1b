"""Parity review (s30b): andrea-diag inside the user's own loop, against what the peer ran.

- Lightning's precision flags were recorded in ``config.json`` as "fp32" for "64-true" and
  "transformer-engine", and "16-true" / "bf16-true" (half-precision weights) as the toolkit's
  autocast "fp16" / "bf16". Each is now checked against what Lightning actually ran: the
  weights' dtype and the autocast dtype inside ``training_step``.
- A Hugging Face ``Trainer`` subclass whose ``compute_loss`` sees outputs without logits+labels
  or ``.loss`` recorded every update's loss as 0.0; it is now the loss the Trainer logs.
- ``ClippedAdamW.last_clip`` handed to ``after_clip`` before ``step()`` is the previous
  update's clip: the row got the previous update's gradient norm. It is now refused (one
  warning), the norms read from the gradients, and the clip the step made read after it.
- The docs' GradScaler recipe tells a skipped step by the scale dropping; checked against
  whether the optimizer changed the weights.

    pytest tests/test_parity_s30b_user_loop.py -q -p no:cacheprovider
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from andrea_diag.record import load_run

ROOT = Path(__file__).resolve().parents[1]


# -- 1. Lightning precision labels -----------------------------------------------------------
def _expected(weights: torch.dtype, autocast: torch.dtype | None) -> str:
    """The label of what ran: the weights' dtype, and the autocast dtype over fp32 weights."""
    if weights != torch.float32:
        return {torch.float64: "fp64", torch.bfloat16: "bf16-true", torch.float16: "fp16-true"}[
            weights
        ]
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[autocast]


# every flag Lightning takes that runs on a CPU (its aliases too; "16-mixed" runs as bf16 here)
CPU_FLAGS = ["32-true", "64-true", "16-true", "bf16-true", "bf16-mixed", "16-mixed",
             32, 64, 16, "32", "64", "16", "bf16"]  # fmt: skip


@pytest.mark.parametrize("flag", CPU_FLAGS, ids=repr)
def test_lightning_precision_is_recorded_as_what_lightning_ran(tmp_path: Path, flag: Any) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from andrea_diag.integrations.lightning import AndreaDiagCallback

    seen: dict[str, Any] = {}

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch: torch.Tensor, idx: int) -> torch.Tensor:
            seen["weights"] = self.net.weight.dtype
            on = torch.is_autocast_enabled("cpu")
            seen["autocast"] = torch.get_autocast_dtype("cpu") if on else None
            return self.net(batch.to(self.net.weight.dtype)).float().square().mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = torch.utils.data.DataLoader(list(torch.randn(2, 3, 4)), batch_size=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on aliases, workers, ...
        trainer = pl.Trainer(max_steps=1, precision=flag, accelerator="cpu", devices=1,
                             logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False,
                             callbacks=[AndreaDiagCallback(tmp_path / "run", lockin=False)])  # fmt: skip
        trainer.fit(Module(), loader)
    config = load_run(tmp_path / "run")["config"]
    assert config["precision"] == _expected(seen["weights"], seen["autocast"])
    assert config["framework_settings"]["precision"] == trainer.precision  # the raw flag kept


def test_every_lightning_precision_flag_has_a_label_that_is_not_fp32_unless_it_is() -> None:
    pytest.importorskip("lightning")
    from typing import get_args

    from lightning.fabric.plugins.precision.precision import _PRECISION_INPUT_STR

    from andrea_diag.integrations.settings import lightning_precision

    labels = {flag: lightning_precision(flag) for flag in get_args(_PRECISION_INPUT_STR)}
    assert [f for f, label in labels.items() if label == "fp32"] == ["32-true"]
    # Transformer Engine: fp8 matmuls over bf16 (its default) or fp16 weights
    assert labels["transformer-engine"] == "fp8-bf16"
    assert labels["transformer-engine-float16"] == "fp8-fp16"
    assert lightning_precision("my-plugin") == "my-plugin"  # unknown: as it is, not fp32


def test_hf_settings_record_bf16_weights_as_bf16_not_fp32(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from andrea_diag.integrations.settings import hf_settings

    model = torch.nn.Linear(4, 1).to(torch.bfloat16)  # loaded in bf16: no flag casts it back
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    got = hf_settings(args, torch.optim.SGD(model.parameters(), lr=0.1), model)
    assert got["precision"] == "bf16-true"
    assert got["framework_settings"]["param_dtype"] == str(model.weight.dtype).split(".")[-1]


# -- 2. HF: a custom compute_loss the forward does not show ------------------------------------
class Regressor(torch.nn.Module):
    """forward(x) -> a plain tensor: no logits attribute, no loss."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


def test_hf_custom_compute_loss_records_the_loss_the_trainer_logs(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from andrea_diag.integrations.hf import AndreaDiagCallback

    class MyTrainer(transformers.Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # type: ignore[no-untyped-def]
            out = model(inputs["x"])
            loss = (out - inputs["y"]).square().mean()
            return (loss, out) if return_outputs else loss

    g = torch.Generator().manual_seed(0)
    rows = [{"x": torch.randn(4, generator=g), "y": torch.randn((), generator=g)}
            for _ in range(16)]  # fmt: skip
    torch.manual_seed(0)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=4, per_device_train_batch_size=2,
        gradient_accumulation_steps=2, learning_rate=0.05, use_cpu=True, report_to=[],
        save_strategy="no", disable_tqdm=True, logging_steps=1, remove_unused_columns=False,
    )  # fmt: skip
    callback = AndreaDiagCallback(tmp_path / "run", lockin=False)
    trainer = MyTrainer(model=Regressor(), args=args, train_dataset=rows, callbacks=[callback])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "loss unknown" warning here
        warnings.filterwarnings("ignore", category=UserWarning, module="torch|transformers")
        trainer.train()
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    metrics = load_run(tmp_path / "run")["metrics"]
    assert len(logged) == 4
    assert metrics["loss"].tolist() == pytest.approx(logged, rel=1e-6)  # was 0.0 every row
    assert not metrics["nonfinite"].any()
    assert "training_step" not in trainer.__dict__  # the wrap is removed at the end


@pytest.mark.parametrize("head", ["BertForSequenceClassification", "BertForMaskedLM"])
def test_hf_models_of_other_heads_record_the_loss_the_trainer_logs(
    tmp_path: Path, head: str
) -> None:
    """A classifier's (B, C) logits crashed ``trainer.train()`` in the causal-LM shift; a
    masked LM's loss was recorded shifted by one token, a loss the model never computed."""
    transformers = pytest.importorskip("transformers")
    from andrea_diag.integrations.hf import AndreaDiagCallback

    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32, num_labels=3,
                                     max_position_embeddings=16)  # fmt: skip
    torch.manual_seed(0)
    model = getattr(transformers, head)(config)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50, (10, 8), generator=g)
    if head == "BertForMaskedLM":  # a few masked positions carry a label
        mask = torch.rand(ids.shape, generator=g) < 0.3
        labels = list(torch.where(mask, ids, -100))
    else:
        labels = list(torch.randint(0, 3, (10,), generator=g))
    rows = [{"input_ids": x, "labels": y} for x, y in zip(ids, labels, strict=True)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=2,
        gradient_accumulation_steps=2, use_cpu=True, report_to=[], save_strategy="no",
        disable_tqdm=True, logging_steps=1,
    )  # fmt: skip
    callback = AndreaDiagCallback(tmp_path / "run", lockin=False)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows,
                                   callbacks=[callback])  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()  # 5 microbatches an epoch: groups of 2, 2 and 1
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    metrics = load_run(tmp_path / "run")["metrics"]
    assert len(logged) == 3
    assert metrics["loss"].tolist() == pytest.approx(logged, rel=1e-6)
    assert metrics["microbatches"].tolist() == [2, 2, 1]


def test_hf_callback_without_a_trainer_records_nan_with_one_warning(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from andrea_diag.integrations.hf import AndreaDiagCallback

    model = Regressor()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cb = AndreaDiagCallback(tmp_path / "run", lockin=False)
    args = SimpleNamespace(gradient_accumulation_steps=1, max_grad_norm=0.0)
    state = SimpleNamespace(max_steps=2, global_step=0)
    cb.on_train_begin(args, state, None, model=model, optimizer=opt)  # no Trainer calls it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            model(torch.randn(3, 4)).square().mean().backward()
            cb.on_pre_optimizer_step(args, state, None)
            opt.step()
            cb.on_optimizer_step(args, state, None)
            opt.zero_grad()
    cb.on_train_end(args, state, None)
    assert sum("no loss seen" in str(w.message) for w in caught) == 1
    assert all(math.isnan(x) for x in load_run(tmp_path / "run")["metrics"]["loss"])


# -- 3. ClippedAdamW.last_clip before the step --------------------------------------------------
def test_clipped_adamw_last_clip_before_step_is_not_recorded_as_this_updates(
    tmp_path: Path,
) -> None:
    from andrea_diag.clip.fused_adamw import ClippedAdamW
    from andrea_diag.monitor import SpikeMonitor

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = ClippedAdamW(model.parameters(), lr=1e-2, max_norm=0.3, impl="reference")
    norms, scales = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with SpikeMonitor(model, opt, tmp_path / "run", lockin=False) as mon:
            for i in range(5):
                model(torch.randn(16, 8) * (1 + i)).square().mean().backward()
                grads = [p.grad for p in model.parameters()]
                norms.append(float(torch.nn.utils.get_total_norm(grads)))  # torch's, pre-step
                mon.after_backward(torch.tensor(1.0))
                mon.after_clip(opt.last_clip)  # the documented mistake: last update's clip
                opt.step()
                scales.append(float(opt.last_clip.scale))
                mon.after_step()
                opt.zero_grad()
    metrics = load_run(tmp_path / "run")["metrics"]
    assert metrics["grad_norm"].tolist() == pytest.approx(norms, rel=1e-5)  # not one late
    assert metrics["clip_coef"].tolist() == pytest.approx(scales, rel=1e-6)
    assert metrics["grad_norm_post"].tolist() == pytest.approx([0.3] * 5, rel=1e-4)
    assert sum("earlier update's" in str(w.message) for w in caught) == 1


def test_clipped_adamw_skipping_a_nonfinite_step_is_recorded_as_not_applied(
    tmp_path: Path,
) -> None:
    from andrea_diag.clip.fused_adamw import ClippedAdamW
    from andrea_diag.monitor import SpikeMonitor

    model = torch.nn.Linear(4, 1)
    opt = ClippedAdamW(model.parameters(), lr=1e-2, max_norm=1.0, impl="reference")
    changed = []
    with SpikeMonitor(model, opt, tmp_path / "run", lockin=False) as mon:
        for i in range(3):
            x = torch.randn(8, 4) * (math.inf if i == 1 else 1.0)
            loss = model(x).square().mean()
            loss.backward()
            mon.after_backward(loss)
            mon.after_clip(None)  # the clip runs inside step()
            before = model.weight.detach().clone()
            opt.step()
            changed.append(not torch.equal(before, model.weight))
            mon.after_step()
            opt.zero_grad()
    assert load_run(tmp_path / "run")["metrics"]["applied"].tolist() == changed


# -- 4. the docs' GradScaler recipe --------------------------------------------------------------
def _docs_block(marker: str) -> str:
    text = (ROOT / "docs" / "integrations.md").read_text()
    block = re.search(rf"<!-- {marker} -->\s*```python\n(.*?)```", text, re.S)
    assert block, marker
    return block.group(1)


def test_the_docs_gradscaler_recipe_records_the_skipped_step_as_not_applied(
    tmp_path: Path,
) -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    steps: list[int] = []  # one entry per optimizer step that ran (GradScaler skips the call)
    handle = register_optimizer_step_post_hook(lambda *_: steps.append(1))
    scope: dict[str, Any] = {"__name__": "docs"}
    block = (
        _docs_block("amp-snippet")
        .replace("mon.after_step(", "truth.append(len(steps) > ran); mon.after_step(")
        .replace("scaler.step(opt)", "ran = len(steps); scaler.step(opt)")
    )
    scope.update(truth=[], steps=steps)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(block, "integrations.md", "exec"), scope)
    finally:
        handle.remove()
    metrics = load_run(scope["run_dir"])["metrics"]
    truth = scope["truth"]  # whether the optimizer stepped, update by update
    assert False in truth and True in truth  # the recipe's data overflows fp16 at least once
    assert metrics["applied"].tolist() == truth


# -- 5. a Trainer resumed from an earlier checkpoint than the run folder's end -------------------
def test_hf_resume_from_an_earlier_checkpoint_warns_that_the_update_numbers_part(
    tmp_path: Path,
) -> None:
    """The folder's rows end at 4, the Trainer resumes at its checkpoint's step 2: the rows
    count on from 4 while ``framework.jsonl`` uses the Trainer's 3, 4, ...; it was silent."""
    transformers = pytest.importorskip("transformers")
    from andrea_diag.integrations.hf import AndreaDiagCallback

    g = torch.Generator().manual_seed(0)
    rows = [{"x": torch.randn(4, generator=g), "y": torch.randn((), generator=g)}
            for _ in range(16)]  # fmt: skip

    class MyTrainer(transformers.Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # type: ignore[no-untyped-def]
            return (model(inputs["x"]) - inputs["y"]).square().mean()

    def train(callback: AndreaDiagCallback, resume: str | None = None) -> Any:
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / "out"), max_steps=4, per_device_train_batch_size=2,
            use_cpu=True, report_to=[], save_strategy="steps", save_steps=2, disable_tqdm=True,
            remove_unused_columns=False,
        )  # fmt: skip
        trainer = MyTrainer(model=Regressor(), args=args, train_dataset=rows, callbacks=[callback])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.train(resume_from_checkpoint=resume)
        return [str(w.message) for w in caught if "count on from" in str(w.message)]

    assert train(AndreaDiagCallback(tmp_path / "run", lockin=False)) == []
    said = train(AndreaDiagCallback(tmp_path / "run", lockin=False, resume=True),
                 str(tmp_path / "out" / "checkpoint-2"))  # fmt: skip
    assert len(said) == 1 and "from 4" in said[0] and "step 2" in said[0]
    metrics = load_run(tmp_path / "run")["metrics"]
    assert metrics["update"].tolist() == [1, 2, 3, 4, 5, 6]  # the monitor's own count


def test_hf_settings_record_a_bf16_model_under_bf16_autocast_as_bf16_true(tmp_path: Path) -> None:
    """``bf16=True`` with a model loaded in bf16: the weights are bf16, not autocast over fp32
    (the label ``bf16`` says the latter); fp32 weights under the same flag stay ``bf16``."""
    transformers = pytest.importorskip("transformers")
    from andrea_diag.integrations.settings import hf_settings

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to=[], bf16=True
    )
    half = torch.nn.Linear(4, 1).to(torch.bfloat16)
    assert hf_settings(args, torch.optim.SGD(half.parameters(), lr=0.1), half)["precision"] == (
        "bf16-true"
    )
    full = torch.nn.Linear(4, 1)
    assert hf_settings(args, torch.optim.SGD(full.parameters(), lr=0.1), full)["precision"] == (
        "bf16"
    )
