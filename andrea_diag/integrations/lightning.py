"""andrea-diag's probes inside a Lightning ``Trainer``: :class:`AndreaDiagCallback`.

    from andrea_diag.integrations.lightning import AndreaDiagCallback
    trainer = L.Trainer(max_steps=1000, gradient_clip_val=1.0,
                        callbacks=[AndreaDiagCallback("runs/pl-mine")])
    trainer.fit(module, loader)          # then: andrea-diag report runs/pl-mine

It runs the probes ``SpikeMonitor`` runs, through the same probe driver, and writes a run
directory that ``andrea-diag report`` renders (``config.json`` says ``"framework":
"lightning"`` and which hooks ran). Needs the ``lightning`` extra:
``pip install 'andrea-diag[lightning]'``.

**Where the hooks sit** (checked in Lightning 2.6's ``Precision._after_closure`` and
``MixedPrecision.optimizer_step``), automatic optimization, one optimizer:

1. every batch: ``training_step``, then ``on_before_backward(loss)``: the loss Lightning
   backpropagates, already divided by ``accumulate_grad_batches`` (and under ``16-mixed``
   multiplied by the GradScaler's scale: divided back at the step); the update's loss is their
   sum (the mean of the microbatch losses). An epoch that is not a multiple of it ends in a shorter
   group whose shares Lightning still divides by ``accumulate_grad_batches``: the recorded loss
   is rescaled to the mean of that group's microbatches. Per-sequence losses are not exposed by Lightning's hooks,
   so the outlier attribution of a spike is unavailable here (``SpikeMonitor`` in a plain loop
   or the Hugging Face callback have it);
2. on the last batch of a group: the precision plugin runs the closure, then (``16-mixed``)
   ``scaler.unscale_``, then ``on_before_optimizer_step`` -> the probes' ``after_clip``:
   gradients are **unscaled and not yet clipped**, so these are the pre-clip norms (under a
   GradScaler its scale is read here, one host sync per update);
3. then ``gradient_clip_val`` / ``gradient_clip_algorithm`` clip in place, and the optimizer
   steps (inside ``optimizer.step(closure)`` in 32-bit: no hook sits between clip and step);
4. ``on_train_batch_end`` -> the probes' ``after_step``: parameters and ``m``/``v`` updated,
   gradients still the clipped ones the optimizer used (Lightning zeroes them at the next
   group's first closure). Their norms over the pre-clip norms give the clip's scale, which the
   optimizer-state probe reads: measured, so clipping by norm, by value or not at all all work.
   A step the GradScaler skipped (inf/NaN gradients: its scale then drops, read here) is
   recorded with ``applied`` False, as the optimizer changed nothing.
   A group whose every ``training_step`` returned None (Lightning's way to skip a batch) still
   steps and counts: its row has a NaN loss, 0 microbatches and ``applied`` False (no
   parameter had a gradient, so the optimizer changed nothing). A NaN loss is a non-finite
   update to the report, which fits the usual reason to return None (a non-finite loss) and
   keeps the rows' update numbers equal to Lightning's ``global_step``.

Not supported: manual optimization, several optimizers (the first is watched), and more than
one process (norms are of the local gradient).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from andrea_diag.integrations.callback import MonitorCallback
from andrea_diag.integrations.capture import per_tensor_norms, probe_params
from andrea_diag.integrations.settings import lightning_settings

try:
    import lightning
    from lightning.pytorch.callbacks import Callback
except ImportError as exc:  # a clear line instead of a bare ModuleNotFoundError
    raise ImportError(
        "andrea_diag.integrations.lightning needs lightning: pip install 'andrea-diag[lightning]'"
    ) from exc

HOOKS = {
    "after_clip": "on_before_optimizer_step (after unscale, before gradient_clip_val clipping)",
    "after_step": "on_train_batch_end of the group's last batch (after the optimizer step)",
    "loss": "on_before_backward: sum over the group of loss / accumulate_grad_batches",
}


class AndreaDiagCallback(MonitorCallback, Callback):
    """Spike, optimizer-state and lock-in probes for ``lightning.pytorch.Trainer``.

    ``out_dir``: the run directory. Other keywords go to :class:`~andrea_diag.monitor.SpikeMonitor`
    (``prompts``, ``tokenizer``, ``seed``, ``probes`` or probe fields such as ``spike_z``).
    """

    def __init__(self, out_dir: str | Path, **monitor_options: Any) -> None:
        super().__init__(out_dir, **monitor_options)
        self._stepping = False
        self._scale: float | None = None  # the GradScaler's scale at the update's step

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        steps = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        self._start(
            pl_module,
            trainer.optimizers[0],
            total_steps=steps,
            framework=("lightning", lightning.__version__, HOOKS),
            settings=lightning_settings(trainer, trainer.optimizers[0], pl_module),
            accumulate=trainer.accumulate_grad_batches,
            step=trainer.global_step,
        )

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        if self.capture is not None:
            self.capture.add_loss(loss)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.capture is None:
            return
        scaler = _scaler(trainer)
        # the scale the group's losses were multiplied by (scaler.update() comes after the
        # step): one host sync per update, under a GradScaler only
        self._scale = float(scaler.get_scale()) if scaler is not None else None
        # the model's trainable parameters now, as the monitor reads them: a layer unfrozen
        # mid-run (BackboneFinetuning) was left out of grad_norm and the clip's scale
        self.capture.params = probe_params(pl_module)
        norms = per_tensor_norms(self.capture.params)  # pre-clip, unscaled
        self.capture.before_step(norms, loss_scale=self._scale or 1.0)
        self._stepping = True

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.capture is None or not self._stepping:
            return  # a batch inside an accumulation group: no update yet
        self._stepping = False
        post = per_tensor_norms(self.capture.params)
        # no gradient at the step (training_step returned None for the whole group): the
        # optimizer skipped every parameter, so the probes do not count it as an applied update
        applied = None if post.numel() else False
        scaler = _scaler(trainer)
        if scaler is not None and self._scale is not None and scaler.get_scale() < self._scale:
            applied = False  # the GradScaler found inf/NaN, skipped the step and backed off
        self.capture.after_step(post=post, applied=applied)
        if trainer.global_step % max(1, int(trainer.log_every_n_steps)) == 0:
            self._log_framework(trainer)  # Lightning's own logging cadence: a sync per metric

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self.capture is not None and not trainer.sanity_checking:
            self._log_framework(trainer)

    def _log_framework(self, trainer: Any) -> None:
        """What ``self.log`` recorded (``trainer.callback_metrics``) -> framework.jsonl."""
        if self.monitor is not None and trainer.callback_metrics:
            self.monitor.log_framework(trainer.callback_metrics, update=trainer.global_step)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Lightning's hook for a run that failed (Ctrl-C included: Lightning then exits); its
        loggers finalize as "failed" here. The run is closed as crashed: its rows kept as a
        partial run and its lock released, as ``SpikeMonitor``'s ``with`` block does."""
        self.close(crashed=exception)


def _scaler(trainer: Any) -> Any:
    """The ``16-mixed`` precision plugin's GradScaler, None without one (bf16, 32-bit)."""
    return getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
