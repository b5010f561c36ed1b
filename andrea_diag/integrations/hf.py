"""andrea-diag's probes inside a Hugging Face ``Trainer``: :class:`AndreaDiagCallback`.

    from andrea_diag.integrations.hf import AndreaDiagCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[AndreaDiagCallback("runs/hf-mine")])
    trainer.train()                      # then: andrea-diag report runs/hf-mine

It runs the probes ``SpikeMonitor`` runs, through the same probe driver, and writes a run
directory that ``andrea-diag report`` renders (``config.json`` says ``"framework":
"transformers"`` and which hooks ran). Needs the ``hf`` extra: ``pip install 'andrea-diag[hf]'``.

**Where the hooks sit** (checked in transformers 5.24's ``Trainer._inner_training_loop``):

1. every microbatch: ``training_step`` (forward + backward, gradients accumulate). A forward
   hook on the model reads the logits and ``labels`` to get each sequence's token loss (the
   loss is token-weighted over the whole group, as in the toolkit's trainer; an extra
   cross-entropy under ``no_grad``); a post-accumulate-grad hook on every parameter keeps its
   gradient norm, so after the group's last backward it holds the **pre-clip** norms;
2. once per update, ``max_grad_norm > 0``: ``accelerator.clip_grad_norm_`` unscales (fp16
   GradScaler) and clips in place. Without clipping, the Trainer still calls it with an infinite
   threshold, so gradients are unscaled either way;
3. ``on_pre_optimizer_step`` -> the probes' ``after_clip``: the gradients in ``.grad`` are what
   the optimizer will use (clipped, unscaled). Their per-tensor norms over the hook's pre-clip
   norms give the clip's scale, measured rather than assumed. The trainable parameters are read
   again here: one unfrozen mid-run is hooked from then on (in that first update, its
   pre-clip norm unseen, its norm is the one the optimizer receives);
4. ``optimizer.step()``, then ``on_optimizer_step`` -> the probes' ``after_step`` (``m``/``v``
   updated, gradients still there: ``model.zero_grad()`` comes after it);
5. the learning-rate scheduler steps, ``on_step_end``. The row's ``lr`` is the lr this step used.

The token losses are a causal LM's (shifted); the model of another head (a classifier, a
masked LM, a seq2seq model: transformers' ``loss_type``) gets the Trainer's own loss, as below,
and no per-sequence losses.

**A loss the forward does not show** (a ``Trainer`` subclass whose ``compute_loss`` makes the
loss from outputs that carry neither ``logits`` with ``labels`` nor ``.loss``): every row
recorded a loss of 0.0. No callback event carries the loss, so the callback finds the
``Trainer`` that calls it (its caller's frame, at ``on_train_begin``) and wraps that
instance's ``training_step`` for the run: the loss of such a microbatch is what
``training_step`` returned, the number the Trainer sums into the ``loss`` it logs (already
divided by the accumulation steps where the Trainer divides it). Where no Trainer is found, the
loss is NaN, with one warning. Such an update's ``microbatches`` is what the callback saw run
(the Trainer's ``training_step`` calls, else the model's training forwards; 0 when it saw none,
as Lightning's row for a group without a backward), where it was 1 whatever ran.

**A** ``trainer.train()`` **that raises** (an error in the loss, Ctrl-C) ends the run as
Lightning's ``on_exception`` ends it: closed as crashed (rows kept, ``partial_summary.json``
with ``status: crashed`` and the exception's type as ``error``, the lock released, the hooks
removed). transformers has no callback event for it (5.25: ``TrainerCallback`` has no error
hook, ``Trainer.train`` no ``try``), so the callback closes a run the Trainer never ended (no
``on_train_end``) at the first of: the end of its ``with`` block (``with callback:
trainer.train()``: that block's exception), the next ``on_train_begin`` (``TrainingRestarted``),
or the interpreter's exit (``atexit``: the exception Python printed, else
``TrainingNotEnded``). A process killed by a signal runs no ``atexit``: its rows written so far
stay, without a summary.

Under fp16 the hook's pre-clip norms are in scaled units; they are divided by the GradScaler's
scale (``optimizer.scaler``, constant until ``scaler.update`` inside the step). That path needs a
CUDA device (the CPU tests hand the Trainer a CPU GradScaler). A step the GradScaler skipped
(inf/NaN gradients: its scale drops, read at ``on_optimizer_step``) is recorded with
``applied`` False. Not supported: DeepSpeed and FSDP (the
gradients are sharded or owned by the engine), and more than one process (hooks see the local
gradient before the all-reduce).
"""

from __future__ import annotations

import atexit
import math
import os
import sys
import warnings
import weakref
from pathlib import Path
from typing import Any

import torch

from andrea_diag.integrations.callback import MonitorCallback
from andrea_diag.integrations.capture import (
    PreClipNorms,
    per_tensor_norms,
    probe_params,
    token_losses,
)
from andrea_diag.integrations.settings import hf_settings

try:
    import transformers
    from transformers import TrainerCallback
except ImportError as exc:  # a clear line instead of a bare ModuleNotFoundError
    raise ImportError(
        "andrea_diag.integrations.hf needs transformers: pip install 'andrea-diag[hf]'"
    ) from exc

HOOKS = {
    "after_clip": "on_pre_optimizer_step (after max_grad_norm clipping and unscaling)",
    "after_step": "on_optimizer_step (before the lr scheduler and zero_grad)",
    "pre_clip_norms": "post-accumulate-grad hooks (after each backward)",
    "loss": "forward hook: a causal LM's logits and labels, token-weighted over the update's "
    "microbatches; else the sum of the Trainer's training_step returns",
}


# Callbacks whose run is open (on_train_begin .. close), closed at the interpreter's exit if
# still open. Weak: a callback the user dropped (a caught failure in a search loop) is not kept
# alive with its model and Trainer by this set; its run stays open, as before the exit close.
_OPEN: weakref.WeakSet[AndreaDiagCallback] = weakref.WeakSet()


@atexit.register
def _close_open_runs() -> None:
    for callback in list(_OPEN):
        callback._close_at_exit()


class TrainingNotEnded(RuntimeError):
    """Recorded as a run's ``error`` when the callback's ``with`` block ends, or the process
    exits, with the run open (the Trainer never called ``on_train_end``) and no exception
    known to have ended it (one caught inside the block, a ``sys.exit`` from a callback)."""


class AndreaDiagCallback(MonitorCallback, TrainerCallback):
    """Spike, optimizer-state and lock-in probes for ``transformers.Trainer``.

    ``out_dir``: the run directory. Other keywords go to :class:`~andrea_diag.monitor.SpikeMonitor`
    (``prompts``, ``tokenizer``, ``seed``, ``probes`` or probe fields such as ``spike_z``).

    A ``trainer.train()`` that raises leaves the run open (transformers tells no callback); it
    is closed as crashed, its exception's type as the partial summary's ``error``, when the
    callback's ``with`` block ends, else at the interpreter's exit. In a notebook, where the
    interpreter lives on, use the block::

        with AndreaDiagCallback("runs/hf-mine") as callback:
            Trainer(model=model, args=args, train_dataset=ds, callbacks=[callback]).train()

    A run that ended (``on_train_end``) is left as it is by both.
    """

    def __init__(self, out_dir: str | Path, **monitor_options: Any) -> None:
        super().__init__(out_dir, **monitor_options)
        self._norms: PreClipNorms | None = None
        self._model: Any = None
        self._scale: float | None = None  # the GradScaler's scale before the update's step
        self._forward_hook: Any = None
        self._accum = 1
        self._step_wrap: StepLoss | None = None
        self._warned = False  # the no-loss warning: once a callback
        self._forwards = 0  # the model's training forwards since the last update
        self._pid = os.getpid()  # the process that began the run: only it closes it at exit

    # -- Trainer events --------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model, self.optimizer = kwargs["model"], kwargs["optimizer"]
        # accelerate wraps the optimizer; the probes read the torch one's groups and state
        optimizer = getattr(self.optimizer, "optimizer", self.optimizer)
        self._accum = max(1, int(args.gradient_accumulation_steps))
        capture = self._start(
            model,
            optimizer,
            total_steps=state.max_steps or None,
            framework=("transformers", transformers.__version__, HOOKS),
            settings=hf_settings(args, optimizer, model),
            step=state.global_step,
        )
        self._model = model  # after _start: its close of a run that never ended forgets one
        self._pid = os.getpid()
        _OPEN.add(self)  # no Trainer event follows an exception: see the class doc
        self._norms = PreClipNorms(capture.params)
        self._forward_hook = model.register_forward_hook(self._on_forward, with_kwargs=True)
        trainer = _calling_trainer(self)
        self._step_wrap = StepLoss(trainer, capture) if trainer is not None else None
        self._forwards = 0

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.capture is None or self._norms is None:
            return
        # the model's trainable parameters now, as the monitor reads them: a layer unfrozen
        # mid-run was left out of grad_norm, then failed the ClipResult's count
        self.capture.params = probe_params(self._model)
        self._norms.watch(self.capture.params)
        params = [p for p in self.capture.params if p.grad is not None]
        scaler = getattr(self.optimizer, "scaler", None)  # accelerate's fp16 GradScaler
        unscale = float(scaler.get_scale()) if scaler is not None else 1.0  # host sync
        self._scale = unscale if scaler is not None else None
        post = per_tensor_norms(params)
        pre = self._norms.take(params, unscale, post=post)
        # the update's microbatches as seen: the Trainer's training_step calls, else (run by
        # hand) the model's training forwards
        ran = self._step_wrap.take_calls() if self._step_wrap is not None else self._forwards
        self._forwards = 0
        unseen = not (self.capture.tokens or self.capture.n_losses)
        if unseen:  # no loss seen: NaN, not 0.0
            if not self._warned:
                self._warned = True
                _warn_no_loss()
            self.capture.add_loss(math.nan)
        self.capture.before_step(pre, post=post)
        if unseen:  # the NaN counted as one microbatch: the row says how many ran (0: none seen)
            self.capture.monitor.add_columns(microbatches=ran)

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.capture is None:
            return
        scaler = getattr(self.optimizer, "scaler", None)
        # the GradScaler found inf/NaN, skipped the step and backed off (read after its
        # update(): one more host sync per update, under fp16 only); it was recorded applied
        skipped = (
            scaler is not None and self._scale is not None and scaler.get_scale() < self._scale
        )
        self.capture.after_step(applied=False if skipped else None)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any
    ) -> None:
        """The Trainer's own numbers (``loss``, ``grad_norm``, ``eval_loss``…) -> framework.jsonl."""
        if self.monitor is not None and logs:
            self.monitor.log_framework(logs, update=state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.close()

    def close(self, crashed: BaseException | None = None) -> dict[str, Any] | None:
        """Remove the hooks and write the run's summary (``on_train_end`` calls it; a second
        ``on_train_begin``, the ``with`` block's end or the interpreter's exit first closes a
        run that never ended, with ``crashed`` set)."""
        _OPEN.discard(self)  # ended: nothing left to close at exit
        if self._forward_hook is not None:
            self._forward_hook.remove()
            self._forward_hook = None
        if self._step_wrap is not None:
            self._step_wrap.remove()
            self._step_wrap = None
        if self._norms is not None:
            self._norms.remove()
            self._norms = None
        self._model = None
        return self._close_monitor(crashed)

    def __enter__(self) -> AndreaDiagCallback:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        """Close a run the Trainer left open, as crashed with the block's exception."""
        self._close_unended(exc)

    def _close_unended(self, exc: BaseException | None) -> None:
        """Close the run as crashed if it is open (no ``on_train_end``); else leave it."""
        if self.monitor is not None and self.monitor.summary is None:
            self.close(crashed=exc if exc is not None else TrainingNotEnded("no on_train_end"))

    def _close_at_exit(self) -> None:
        """At exit: the run ``trainer.train()`` left open, closed with the exception Python
        printed when it ended the program (``sys.last_exc``, 3.12; ``sys.last_value``). A run
        folder removed since (a temporary one) is left; a failure is one line, not a trace."""
        if os.getpid() != self._pid or self.monitor is None:
            return  # a forked child (a DataLoader worker) exiting: the run is its parent's
        if not Path(self.monitor.run_dir).is_dir():
            return
        exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        try:
            self._close_unended(exc if isinstance(exc, BaseException) else None)
        except Exception as e:  # at exit: nobody to raise to
            print(f"andrea-diag: the open run {self.monitor.run_dir} could not be closed at "
                  f"exit: {e}", file=sys.stderr)  # fmt: skip

    # -- hooks -----------------------------------------------------------------------------
    def _on_forward(
        self, module: torch.nn.Module, args: tuple, kwargs: dict[str, Any], output: Any
    ) -> None:
        if not (module.training and torch.is_grad_enabled()) or self.capture is None:
            return  # evaluation, generation: not part of an update
        self._forwards += 1
        labels = kwargs.get("labels")
        logits = getattr(output, "logits", None)
        if _causal_lm(module, logits, labels):
            self.capture.add_examples(*token_losses(logits, labels))
        elif self._step_wrap is None and getattr(output, "loss", None) is not None:
            self.capture.add_loss(output.loss / self._accum)  # no Trainer: the microbatch mean
        else:  # another head's loss (classification, masked LM, seq2seq): the Trainer's own
            return
        if self._step_wrap is not None:  # this microbatch's loss is the forward's
            self._step_wrap.seen = True


class StepLoss:
    """A ``Trainer``'s ``training_step`` wrapped, on that instance, for one run: a
    microbatch whose forward showed no loss gets the one ``training_step`` returned."""

    def __init__(self, trainer: Any, capture: Any) -> None:
        self.trainer, self.capture, self.seen, self.calls = trainer, capture, False, 0
        self.own = trainer.__dict__.get("training_step")  # an instance attribute, restored
        inner = trainer.training_step

        def training_step(*args: Any, **kwargs: Any) -> Any:
            self.seen = False
            self.calls += 1
            loss = inner(*args, **kwargs)
            if not self.seen and isinstance(loss, torch.Tensor) and loss.numel() == 1:
                self.capture.add_loss(loss)  # the Trainer's own share (host sync, as the hook's)
            return loss

        trainer.training_step = training_step

    def take_calls(self) -> int:
        """The microbatches (``training_step`` calls) since the last take."""
        calls, self.calls = self.calls, 0
        return calls

    def remove(self) -> None:
        if self.own is not None:
            self.trainer.training_step = self.own
        else:
            self.trainer.__dict__.pop("training_step", None)


def _causal_lm(model: torch.nn.Module, logits: Any, labels: Any) -> bool:
    """Whether ``token_losses`` (a causal LM's shifted cross-entropy) is the model's loss:
    (B, T, V) logits over (B, T) labels, from a model whose loss is the causal LM's
    (transformers' ``loss_type``: None defaults to it). A classifier's (B, C) logits crashed
    the shift inside ``trainer.train()``; a masked LM's or a seq2seq model's were shifted,
    a loss the model never computed."""
    if not (isinstance(logits, torch.Tensor) and isinstance(labels, torch.Tensor)):
        return False
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        return False
    return getattr(model, "loss_type", None) in (None, "ForCausalLM")


def _calling_trainer(callback: Any, depth: int = 12) -> Any:
    """The ``transformers.Trainer`` whose callback handler called ``callback`` now: the first
    ``self`` up the stack that is a Trainer holding it (None when run by hand)."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        handler = getattr(owner, "callback_handler", None)
        if isinstance(owner, transformers.Trainer) and callback in getattr(
            handler, "callbacks", ()
        ):
            return owner
        frame = frame.f_back
    return None


def _warn_no_loss() -> None:
    """The loss is unknown: recorded as NaN (it was recorded as 0.0)."""
    warnings.warn(
        "AndreaDiagCallback: no loss seen for this update (the model's output has neither "
        "logits with labels nor .loss, and no Trainer's training_step was found); the loss is "
        "recorded as NaN",
        UserWarning,
        stacklevel=2,
    )
