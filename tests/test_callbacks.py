"""The Hugging Face and Lightning callbacks, end to end on CPU, against a plain SpikeMonitor loop.

Each framework trains a tiny model built from a local config for a few updates (accumulation 2,
clipping on) with the callback; the same initial weights and the same batches, in the same
order, go through a hand-written loop with ``SpikeMonitor``. The probe rows must agree to float
tolerance, the clip record must be what the optimizer saw (an optimizer step hook measures the
gradient it received), and ``andrea-diag report`` must render the callback's run directory.
Skipped where the extra is not installed (CI installs both through the ``test`` extra).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import ModelConfig
from andrea_diag.integrations.capture import token_losses
from andrea_diag.model import GPT
from andrea_diag.monitor import SpikeMonitor
from andrea_diag.record import load_run

STEPS, ACCUM, BATCH, T, VOCAB = 5, 2, 2, 16, 97  # 97: an awkward vocabulary on purpose
LR, MAX_NORM = 3e-3, 0.5  # a low threshold: the first updates are clipped, later ones may not be
# Probe columns that must agree between a callback and the plain loop (layer_gn/* are added).
COLUMNS = ["loss", "grad_norm", "m_norm", "v_norm", "update_rms", "cos_update_grad"]
REL = 1e-5  # same float32 math in a different order of operations
# update_rms / cos_update_grad and the moments' norms at each of the STEPS (default: every 10)
EVERY = {"update_stats_every": 1, "moment_norms_every": 1}


def _groups() -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """STEPS groups of ACCUM microbatches (ids, labels); labels[:, 0] is ignored, so Hugging
    Face's two ways of counting a group's tokens agree."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(STEPS):
        group = []
        for _ in range(ACCUM):
            ids = torch.randint(0, VOCAB, (BATCH, T), generator=gen)
            labels = ids.clone()
            labels[:, 0] = -100
            group.append((ids, labels))
        out.append(group)
    return out


def _plain_loop(
    model: torch.nn.Module,
    logits_of: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor],
    run_dir: Path,
    per_example: bool,
) -> pd.DataFrame:
    """The reference: a hand-written loop with SpikeMonitor, clipping with torch."""
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    with SpikeMonitor(model, opt, run_dir, total_steps=STEPS, **EVERY) as mon:
        for group in _groups():
            n_tok = sum(int((lab[:, 1:] != -100).sum()) for _, lab in group)
            sums, toks = [], []
            for ids, labels in group:
                logits = logits_of(model, ids)
                loss = F.cross_entropy(
                    logits[:, :-1].reshape(-1, VOCAB),
                    labels[:, 1:].reshape(-1),
                    ignore_index=-100,
                    reduction="sum",
                )
                (loss / n_tok).backward()
                s, t = token_losses(logits, labels)
                sums.append(s)
                toks.append(t)
            s, t = torch.cat(sums), torch.cat(toks)
            mon.after_backward(s.sum() / t.sum(), per_example_loss=(s / t) if per_example else None)
            mon.after_clip(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM))
            opt.step()
            mon.after_step()
            opt.zero_grad()
    return load_run(run_dir)["metrics"]


def _received_norms(optimizer: torch.optim.Optimizer) -> list[float]:
    """The global norm of the gradient each optimizer step received (a step post-hook)."""
    seen: list[float] = []

    def hook(opt: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        seen.append(float(torch.stack([g.norm() for g in grads]).norm()))

    optimizer.register_step_post_hook(hook)
    return seen


def _check_matches(run_dir: Path, reference: pd.DataFrame, received: list[float]) -> None:
    got = load_run(run_dir)["metrics"]
    assert got["update"].tolist() == list(range(1, STEPS + 1))
    layer_cols = [c for c in reference.columns if c.startswith("layer_gn/")]
    assert layer_cols
    for col in COLUMNS + layer_cols:
        assert got[col].tolist() == pytest.approx(reference[col].tolist(), rel=REL), col
    # the first update is clipped (a low threshold at init), so pre- and post-clip differ there
    assert got["grad_norm"].iloc[0] > MAX_NORM
    assert got["grad_norm_post"].tolist() == pytest.approx(received, rel=REL)
    assert got["clip_coef"].iloc[0] < 1.0
    page = run_dir / "report.html"
    res = CliRunner().invoke(app, ["report", str(run_dir), "--out", str(page)])
    assert res.exit_code == 0, res.output
    html = page.read_text()
    assert "plotly" in html  # the charts, rendered offline into the page
    # the framework's own settings, in the toolkit's keys: the header reads them
    cfg = load_run(run_dir)["config"]
    assert (cfg["clip"], cfg["max_norm"], cfg["lr"], cfg["accum"]) == (
        "global",
        MAX_NORM,
        LR,
        ACCUM,
    )
    assert cfg["precision"] == "fp32" and cfg["world_size"] == 1 and cfg["optimizer"] == "AdamW"
    assert cfg["optimizer_hparams"]["lr"] == LR and cfg["framework_settings"]
    assert f"global (max_norm {MAX_NORM:g})" in html


# -- Hugging Face Trainer --------------------------------------------------------------------


def _loss_module(pl: Any, log: bool) -> type:
    """A LightningModule on the toolkit's tiny GPT that keeps every batch's loss (``losses``)
    and, with ``log``, also hands it to ``self.log("train_loss")``."""
    preset = ModelConfig("tiny-test", d_model=32, n_layer=2, n_head=2, block_size=T,
                         vocab_size=VOCAB)  # fmt: skip
    torch.manual_seed(0)
    model = GPT(preset)

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.losses: list[float] = []

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
            ids, labels = batch
            loss = F.cross_entropy(self.model(ids)[:, :-1].reshape(-1, VOCAB),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)  # fmt: skip
            if log:
                self.log("train_loss", loss, on_step=True)
            self.losses.append(float(loss.detach()))
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=LR, weight_decay=0.0)

    return Module


def _fit_loss_module(pl: Any, run_dir: Path, n_batches: int, log: bool, **trainer_args: Any) -> Any:
    """Fit a ``_loss_module`` on the first ``n_batches`` microbatches of ``_groups()``, two to an
    update, on CPU with only AndreaDiagCallback(run_dir) attached; returns the fitted module."""
    from andrea_diag.integrations.lightning import AndreaDiagCallback

    Module = _loss_module(pl, log=log)
    microbatches = [mb for group in _groups() for mb in group][:n_batches]
    loader = torch.utils.data.DataLoader(microbatches, batch_size=None, shuffle=False)
    module = Module()
    trainer = pl.Trainer(accumulate_grad_batches=2, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[AndreaDiagCallback(run_dir)],
                         **trainer_args)  # fmt: skip
    trainer.fit(module, loader)
    return module


def _tiny_gpt2_config(path: Path) -> Path:
    config = {
        "model_type": "gpt2",
        "vocab_size": VOCAB,
        "n_positions": 32,
        "n_embd": 32,
        "n_layer": 2,
        "n_head": 2,
        "resid_pdrop": 0.0,  # no dropout: the plain loop and the Trainer draw no random masks
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "bos_token_id": 0,  # inside the tiny vocabulary
        "eos_token_id": 0,
    }
    path.write_text(json.dumps(config))
    return path


def test_hf_trainer_callback_matches_a_plain_loop(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from andrea_diag.integrations.hf import AndreaDiagCallback

    config = transformers.AutoConfig.from_pretrained(_tiny_gpt2_config(tmp_path / "config.json"))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    twin = copy.deepcopy(model)  # the same initial weights for the plain loop

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):  # in order: the Trainer does not shuffle an iterable dataset
            for group in _groups():
                for ids, labels in group:
                    for i in range(BATCH):
                        yield {"input_ids": ids[i], "labels": labels[i]}

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"),
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUM,
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=MAX_NORM,
        optim="adamw_torch",
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
    )
    callback = AndreaDiagCallback(tmp_path / "hf-run", **EVERY)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=Batches(), callbacks=[callback]
    )
    trainer.create_optimizer()
    received = _received_norms(trainer.optimizer)
    trainer.train()

    reference = _plain_loop(twin, lambda m, ids: m(input_ids=ids).logits, tmp_path / "ref", True)
    _check_matches(tmp_path / "hf-run", reference, received)
    run = load_run(tmp_path / "hf-run")
    assert run["config"]["framework"] == "transformers"
    assert "on_pre_optimizer_step" in run["config"]["hooks"]["after_clip"]
    assert (run["metrics"]["microbatches"] == ACCUM).all()  # each forward of the group counted
    # per-sequence losses reached the spike probe (the outlier column needs them)
    assert run["metrics"]["example_loss_max_z"].notna().any()


# -- Lightning ---------------------------------------------------------------------------------


def test_lightning_callback_matches_a_plain_loop(tmp_path: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from andrea_diag.integrations.lightning import AndreaDiagCallback

    preset = ModelConfig(
        "tiny-test", d_model=32, n_layer=2, n_head=2, block_size=T, vocab_size=VOCAB
    )
    torch.manual_seed(0)
    model = GPT(preset)
    twin = copy.deepcopy(model)

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
            ids, labels = batch
            logits = self.model(ids)
            # the microbatch mean: Lightning divides it by accumulate_grad_batches, which with
            # equal token counts is the group's token-weighted loss the plain loop uses
            return F.cross_entropy(
                logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1), ignore_index=-100
            )

        def configure_optimizers(self) -> torch.optim.Optimizer:
            opt = torch.optim.AdamW(self.parameters(), lr=LR, weight_decay=0.0)
            self.received = _received_norms(opt)
            return opt

    microbatches = [mb for group in _groups() for mb in group]
    loader = torch.utils.data.DataLoader(microbatches, batch_size=None, shuffle=False)
    module = Module()
    trainer = pl.Trainer(
        max_steps=STEPS,
        accumulate_grad_batches=ACCUM,
        gradient_clip_val=MAX_NORM,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[AndreaDiagCallback(tmp_path / "pl-run", **EVERY)],
    )
    trainer.fit(module, loader)

    reference = _plain_loop(twin, lambda m, ids: m(ids), tmp_path / "ref", False)
    _check_matches(tmp_path / "pl-run", reference, module.received)
    run = load_run(tmp_path / "pl-run")
    assert run["config"]["framework"] == "lightning"
    assert "before gradient_clip_val" in run["config"]["hooks"]["after_clip"]
    assert not math.isnan(run["metrics"]["loss"].iloc[-1])


@pytest.mark.slow
def test_lightning_short_last_group_records_the_true_mean_loss(tmp_path: Path) -> None:
    """5 batches an epoch with accumulate_grad_batches=2: groups of 2, 2 and 1. Lightning still
    divides the lone batch's loss by 2; the recorded loss must be each group's real mean."""
    pl = pytest.importorskip("lightning.pytorch")
    module = _fit_loss_module(pl, tmp_path / "pl", 5, log=False, max_epochs=2)
    ls = module.losses
    groups = [ls[0:2], ls[2:4], ls[4:5], ls[5:7], ls[7:9], ls[9:10]]
    want = [sum(g) / len(g) for g in groups]
    got = load_run(tmp_path / "pl")["metrics"]["loss"].tolist()
    assert got == pytest.approx(want, rel=1e-6)


def test_hf_trainer_callback_with_prompts_records_lockin_samples(tmp_path: Path) -> None:
    """transformers 5 models have a ``generate_batch`` of their own (another signature): the
    lock-in probe must take the generic path for them, record its samples and reach a verdict
    instead of failing (issue 24 item 1)."""
    transformers = pytest.importorskip("transformers")
    from andrea_diag.integrations.hf import AndreaDiagCallback

    config = transformers.AutoConfig.from_pretrained(_tiny_gpt2_config(tmp_path / "config.json"))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            for group in _groups() * 3:  # 15 updates' worth: the verdict needs 10 losses
                for ids, labels in group:
                    for i in range(BATCH):
                        yield {"input_ids": ids[i], "labels": labels[i]}

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"), max_steps=12, per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUM, learning_rate=LR, max_grad_norm=MAX_NORM,
        use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    prompts = {"a": torch.arange(12) % VOCAB, "b": (torch.arange(20) * 5) % VOCAB}
    callback = AndreaDiagCallback(tmp_path / "hf-run", prompts=prompts, lockin_every=4)
    transformers.Trainer(model=model, args=args, train_dataset=Batches(),
                         callbacks=[callback]).train()  # fmt: skip

    run = load_run(tmp_path / "hf-run")
    assert not run["probe_failures"], run["probe_failures"]
    samples = run["samples"]
    assert set(samples["source"]) == {"a", "b"} and set(samples["mode"]) == {"greedy", "temp1"}
    assert sorted(set(samples["update"])) == [4, 8, 12]  # every 4 updates
    lock = run["summary"]["lockin"]
    assert lock["verdict"] in {"never-learned", "still-learning", "healthy"}, lock
    assert lock["n_sample_events"] == 3


class _ListSink:
    """A metric sink (andrea_diag/sinks.py protocol) that keeps what it is given."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.closed = False

    def log(self, row: dict) -> None:
        self.rows.append(dict(row))

    def events(self, events: object) -> None:
        del events

    def summary(self, summary: dict) -> None:
        del summary

    def close(self) -> None:
        self.closed = True


def _framework_rows(run_dir: Path) -> list[dict]:
    lines = (run_dir / "framework.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_hf_trainer_logs_and_eval_loss_are_recorded_and_loggers_get_every_row(
    tmp_path: Path,
) -> None:
    """The Trainer's own logs (loss, grad_norm, eval_loss) land in framework.jsonl with their
    step, equal to its log_history; loggers= given to the callback receive every update's row."""
    transformers = pytest.importorskip("transformers")
    from andrea_diag.integrations.hf import AndreaDiagCallback

    config = transformers.AutoConfig.from_pretrained(_tiny_gpt2_config(tmp_path / "config.json"))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    rows = [{"input_ids": ids[i], "labels": labels[i]}
            for group in _groups() for ids, labels in group for i in range(BATCH)]  # fmt: skip
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"), max_steps=4, per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUM, learning_rate=LR, max_grad_norm=MAX_NORM,
        use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True, logging_steps=2,
        eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=BATCH,
    )  # fmt: skip
    sink = _ListSink()
    callback = AndreaDiagCallback(tmp_path / "hf-run", loggers=[sink])
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows,
                                   eval_dataset=rows[:4], callbacks=[callback])  # fmt: skip
    trainer.train()

    got = _framework_rows(tmp_path / "hf-run")
    history = [h for h in trainer.state.log_history if "loss" in h or "eval_loss" in h]
    for key in ("loss", "eval_loss"):
        want = [(h["step"], h[key]) for h in history if key in h]
        assert want and [(r["update"], r[key]) for r in got if key in r] == want
    summary = load_run(tmp_path / "hf-run")["summary"]
    last_eval = [h["eval_loss"] for h in history if "eval_loss" in h][-1]
    assert summary["framework_logs"]["eval_loss"] == last_eval
    assert [r["update"] for r in sink.rows] == [1, 2, 3, 4] and sink.closed


@pytest.mark.slow
def test_lightning_self_log_values_are_recorded_with_their_step(tmp_path: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    module = _fit_loss_module(pl, tmp_path / "pl", 4, log=True, max_steps=2, log_every_n_steps=1)
    got = _framework_rows(tmp_path / "pl")
    # callback_metrics after each update hold the last batch's self.log value
    assert [(r["update"], r["train_loss"]) for r in got] == [
        (1, pytest.approx(module.losses[1], rel=1e-6)),
        (2, pytest.approx(module.losses[3], rel=1e-6)),
    ]
