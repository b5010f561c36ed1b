"""Inside the user's loop (s31): what the monitor and the framework callbacks did to a user's
training, and what they recorded of it.

- The lock-in probe samples under ``model.eval()`` and restored ``model.train()``: every
  submodule the user kept in eval mode (a dropout or BatchNorm turned off, a frozen backbone)
  came back in train mode, and the rest of the training changed.
- Lightning's ``16-mixed`` hands ``on_before_backward`` the GradScaler's scaled loss: every
  row's loss was the loss times the scale (65536 at the start). A step the GradScaler skipped
  (inf/NaN gradients) was recorded as applied, under Lightning and the Hugging Face Trainer.
- A metric sink whose ``log`` raised (a service gone, a full disk) raised out of
  ``after_step`` and ended the user's training.
- A layer unfrozen mid-run (Lightning's ``BackboneFinetuning``, a fine-tune's schedule) was
  left out of ``grad_norm``, and the clip's total over it was recorded as a clip that never ran.
- An ``out_dir`` in a folder the user may not write in was taken by a framework callback, and
  the run directory failed to be made inside ``trainer.fit``.

    pytest tests/test_user_loop_s31.py -q -p no:cacheprovider
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from andrea_diag.clip.api import clip_grad_norm_with_stats
from andrea_diag.monitor import SpikeMonitor
from andrea_diag.record import load_run

VOCAB = 11


# -- 1. lock-in sampling and the user's eval-mode submodules ----------------------------------
class _Dropped(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 8)
        self.drop = torch.nn.Dropout(0.5)
        self.head = torch.nn.Linear(8, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.emb(idx)))


def _train_dropped(run_dir: Path | None) -> _Dropped:
    """Three SGD updates of a model whose dropout the user turned off (``drop.eval()``), with
    a monitor sampling prompts every update when ``run_dir`` is given."""
    torch.manual_seed(0)
    model = _Dropped()
    model.train()
    model.drop.eval()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = None
    if run_dir is not None:
        mon = SpikeMonitor(model, opt, run_dir, prompts={"p": torch.tensor([1, 2, 3])},
                           vocab_size=VOCAB, block_size=16, lockin_every=1)  # fmt: skip
    for _ in range(3):
        loss = model(torch.randint(0, VOCAB, (2, 5))).logsumexp(-1).mean()
        loss.backward()
        if mon is not None:
            mon.after_backward(loss)
            mon.after_clip(None)
        opt.step()
        if mon is not None:
            mon.after_step()
        opt.zero_grad()
    if mon is not None:
        mon.close()
    return model


def test_lockin_sampling_leaves_the_users_eval_mode_submodules_in_eval_and_training_unchanged(
    tmp_path: Path,
) -> None:
    bare, monitored = _train_dropped(None), _train_dropped(tmp_path / "run")
    assert load_run(tmp_path / "run")["samples"] is not None  # the probe did sample
    assert monitored.training and not monitored.drop.training
    for a, b in zip(bare.parameters(), monitored.parameters(), strict=True):
        assert torch.equal(a, b)  # bit for bit: the dropout never came back on


# -- 2. Lightning 16-mixed: the scaled loss and the GradScaler's skipped steps ----------------
def test_lightning_16_mixed_records_the_unscaled_loss_and_a_skipped_step_as_not_applied(
    tmp_path: Path,
) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.plugins import MixedPrecision

    from andrea_diag.integrations.lightning import AndreaDiagCallback

    losses: list[float] = []
    changed: list[bool] = []

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch: torch.Tensor, idx: int) -> torch.Tensor:
            loss = self.net(batch).float().square().mean()
            if idx == 1:  # inf gradients: the GradScaler skips this step
                loss = loss * float("inf")
            losses.append(float(loss.detach()))
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Moved(pl.Callback):  # whether the optimizer changed the weights, update by update
        def on_before_optimizer_step(self, trainer: Any, module: Any, opt: Any) -> None:
            self.before = module.net.weight.detach().clone()

        def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
            changed.append(not torch.equal(self.before, module.net.weight))

    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(list(torch.randn(4, 3, 4)), batch_size=None)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers, ...
        trainer = pl.Trainer(max_steps=4, plugins=[MixedPrecision("16-mixed", "cpu", scaler)],
                             accelerator="cpu", devices=1, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False,
                             callbacks=[AndreaDiagCallback(tmp_path / "run", lockin=False),
                                        Moved()])  # fmt: skip
        trainer.fit(Module(), loader)
    rows = load_run(tmp_path / "run")["metrics"]
    assert changed == [True, False, True, True]  # the GradScaler skipped the second step
    assert rows["applied"].tolist() == changed
    finite = [i for i in range(4) if i != 1]
    assert rows["loss"].iloc[finite].tolist() == pytest.approx([losses[i] for i in finite])


# -- 3. a sink that fails mid-run --------------------------------------------------------------
class _Sink:
    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at, self.rows, self.closed = fail_at, [], False

    def log(self, row: Any) -> None:
        if row["update"] == self.fail_at:
            raise ConnectionError("the tracking server went away")
        self.rows.append(row["update"])

    def events(self, events: Any) -> None:
        pass

    def summary(self, summary: Any) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_a_sink_that_fails_mid_run_is_warned_about_once_and_training_goes_on(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 4), torch.nn.Linear(4, VOCAB))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    broken, healthy = _Sink(fail_at=2), _Sink()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with SpikeMonitor(model, opt, tmp_path / "run", lockin=False,
                          loggers=[broken, healthy]) as mon:  # fmt: skip
            for _ in range(4):
                model(torch.randint(0, VOCAB, (2, 5))).logsumexp(-1).mean().backward()
                mon.after_backward(1.0)
                mon.after_clip(None)
                opt.step()
                mon.after_step()
                opt.zero_grad()
    said = [str(w.message) for w in caught if "metric sink" in str(w.message)]
    assert len(said) == 1 and "_Sink failed at update 2" in said[0]
    assert healthy.rows == [1, 2, 3, 4] and broken.rows == [1]  # no more rows once it failed
    assert broken.closed and healthy.closed
    assert load_run(tmp_path / "run")["metrics"]["update"].tolist() == [1, 2, 3, 4]
    assert json.loads((mon.run_dir / "summary.json").read_text())["n_updates"] == 4


# -- 4. a layer unfrozen mid-run ---------------------------------------------------------------
def _unfreezing_loop(run_dir: Path, with_stats: bool) -> list[float]:
    """Four AdamW updates, the embedding frozen for the first two, then unfrozen and given
    to the optimizer; clipped at a threshold no update reaches. Returns torch's totals."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB))
    model[0].weight.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    totals = []
    with SpikeMonitor(model, opt, run_dir, lockin=False) as mon:
        for i in range(4):
            if i == 2:
                model[0].weight.requires_grad_(True)
                opt.add_param_group({"params": [model[0].weight]})
            loss = model(torch.randint(0, VOCAB, (4, 5))).logsumexp(-1).mean()
            loss.backward()
            mon.after_backward(loss)
            if with_stats:
                clip = clip_grad_norm_with_stats(model.parameters(), 100.0)
                totals.append(float(clip.total_norm))
            else:
                clip = torch.nn.utils.clip_grad_norm_(model.parameters(), 100.0)
                totals.append(float(clip))
            mon.after_clip(clip)
            opt.step()
            mon.after_step()
            opt.zero_grad()
    return totals


@pytest.mark.parametrize("with_stats", [False, True], ids=["torch-total", "clip-result"])
def test_a_layer_unfrozen_mid_run_is_watched_and_no_clip_is_recorded(
    tmp_path: Path, with_stats: bool
) -> None:
    """A ClipResult over the model's parameters then failed after_clip's count (a ValueError
    out of the user's loop); torch's total was recorded as a clip of factor 0.986."""
    totals = _unfreezing_loop(tmp_path / "run", with_stats)
    rows = load_run(tmp_path / "run")["metrics"]
    assert rows["grad_norm"].tolist() == pytest.approx(totals, rel=1e-6)
    assert rows["grad_norm_post"].tolist() == pytest.approx(totals, rel=1e-6)
    assert (rows["clip_coef"] == 1.0).all()
    embed = [c for c in rows.columns if c.startswith("layer_gn/") and c.endswith("embedding")]
    assert embed and rows[embed[0]].iloc[:2].isna().all() and rows[embed[0]].iloc[2:].notna().all()


def test_lightning_backbone_finetuning_records_the_unfrozen_backbone_in_grad_norm(
    tmp_path: Path,
) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.callbacks import BackboneFinetuning

    from andrea_diag.integrations.lightning import AndreaDiagCallback

    totals: list[float] = []

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = torch.nn.Linear(4, 4)
            self.head = torch.nn.Linear(4, 1)

        def training_step(self, batch: torch.Tensor, idx: int) -> torch.Tensor:
            return self.head(torch.tanh(self.backbone(batch))).square().mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            params = [p for p in self.parameters() if p.requires_grad]
            return torch.optim.AdamW(params, lr=1e-2)

    class Totals(pl.Callback):  # every gradient the optimizer will step, before any clip
        def on_before_optimizer_step(self, trainer: Any, module: Any, opt: Any) -> None:
            grads = [p.grad for p in module.parameters() if p.grad is not None]
            totals.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))

    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(list(torch.randn(2, 3, 4)), batch_size=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False,
                             callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=1),
                                        AndreaDiagCallback(tmp_path / "run", lockin=False),
                                        Totals()])  # fmt: skip
        trainer.fit(Module(), loader)
    rows = load_run(tmp_path / "run")["metrics"]
    assert len(totals) == 4 and rows["update"].tolist() == [1, 2, 3, 4]
    assert rows["grad_norm"].tolist() == pytest.approx(totals, rel=1e-5)
    assert (rows["clip_coef"] == 1.0).all()


def test_hf_a_layer_unfrozen_mid_run_is_in_grad_norm_as_the_trainer_logs_it(
    tmp_path: Path,
) -> None:
    transformers = pytest.importorskip("transformers")
    from andrea_diag.integrations.hf import AndreaDiagCallback

    cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=16,
                                  bos_token_id=0, eos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    model.transformer.wpe.weight.requires_grad_(False)  # positions frozen for two updates

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            gen = torch.Generator().manual_seed(0)
            for _ in range(8):
                ids = torch.randint(0, 50, (8,), generator=gen)
                yield {"input_ids": ids, "labels": ids}

    class Unfreeze(transformers.TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 2:
                model.transformer.wpe.weight.requires_grad_(True)

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"), max_steps=4, per_device_train_batch_size=2,
        max_grad_norm=0.0, logging_steps=1, use_cpu=True, report_to=[], save_strategy="no",
        disable_tqdm=True)  # fmt: skip
    callback = AndreaDiagCallback(tmp_path / "run", lockin=False)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Batches(),
                                   callbacks=[callback, Unfreeze()])  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    rows = load_run(tmp_path / "run")["metrics"]
    logged = [json.loads(line) for line in (callback.monitor.run_dir / "framework.jsonl").open()]
    trainer_norms = [r["grad_norm"] for r in logged if "grad_norm" in r]
    assert len(trainer_norms) == 4
    assert rows["grad_norm"].tolist() == pytest.approx(trainer_norms, rel=1e-5)
    assert (rows["clip_coef"] == 1.0).all()


def test_hf_a_step_the_gradscaler_skipped_is_recorded_as_not_applied(tmp_path: Path) -> None:
    """The Trainer's fp16 GradScaler skips a step with inf/NaN gradients: it was recorded as
    applied. A CPU GradScaler stands in for the CUDA one (accelerate takes either); the second
    update's hidden states overflow, as an fp16 activation does."""
    transformers = pytest.importorskip("transformers")
    from andrea_diag.integrations.hf import AndreaDiagCallback

    cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=16,
                                  bos_token_id=0, eos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    changed: list[bool] = []
    state_of: dict[str, Any] = {}

    def overflow(module: Any, args: Any, output: torch.Tensor) -> torch.Tensor | None:
        return output * float("inf") if state_of["state"].global_step == 1 else None

    model.transformer.ln_f.register_forward_hook(overflow)

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            gen = torch.Generator().manual_seed(0)
            for _ in range(8):
                ids = torch.randint(0, 50, (8,), generator=gen)
                yield {"input_ids": ids, "labels": ids}

    class Moved(transformers.TrainerCallback):  # whether the step changed the weights
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            state_of["state"] = state

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.before = [p.detach().clone() for p in model.parameters()]

        def on_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            now = list(model.parameters())
            changed.append(
                any(not torch.equal(a, b) for a, b in zip(self.before, now, strict=True))
            )

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf-out"), max_steps=3, per_device_train_batch_size=2,
        max_grad_norm=1.0, use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True)  # fmt: skip
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Batches(),
                                   callbacks=[Moved(),
                                              AndreaDiagCallback(tmp_path / "run", lockin=False)])  # fmt: skip
    trainer.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    rows = load_run(tmp_path / "run")["metrics"]
    assert changed == [True, False, True]  # the GradScaler skipped the second step
    assert rows["applied"].tolist() == changed


# -- 5. an out_dir in a folder the user may not write in ---------------------------------------
@pytest.mark.parametrize("framework", ["lightning", "hf"])
def test_a_callback_refuses_an_out_dir_it_cannot_write_when_it_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, framework: str
) -> None:
    """The callback took it, and the run directory then failed to be made inside the
    framework's fit, after the user's setup (a PermissionError out of ``trainer.fit``). The
    tests run as root, who may write anywhere: ``os.access`` says no for the folder."""
    import os

    from andrea_diag.errors import BadArgument

    module = pytest.importorskip(f"andrea_diag.integrations.{framework}")
    locked = tmp_path / "read-only"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != locked and real(p, mode))
    with pytest.raises(BadArgument, match="not writable"):
        module.AndreaDiagCallback(locked / "run")
    model = torch.nn.Linear(2, 2)
    with pytest.raises(BadArgument, match="not writable"):
        SpikeMonitor(model, torch.optim.SGD(model.parameters(), lr=0.1), locked / "run")
    assert not (locked / "run").exists()
