"""``SpikeMonitor``: the andrea-diag probes inside *your own* training loop.

    mon = SpikeMonitor(model, optimizer, "runs/mine")
    for batch in data:
        loss, per_example = ...            # per_example: (batch,) losses, optional
        loss.backward()
        mon.after_backward(loss, per_example_loss=per_example)
        mon.after_clip(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))  # or None
        optimizer.step()
        mon.after_step()
        optimizer.zero_grad()              # after after_step: the probes read the gradients
    mon.close()                            # or use ``with SpikeMonitor(...) as mon:``

It writes a run directory that ``andrea-diag report RUN_DIR`` renders: ``config.json``
(``{"kind": "monitor", ...}``: the monitor's settings, model and optimizer), ``metrics.jsonl``
/ ``metrics.parquet`` (``update, loss, grad_norm, lr, applied`` + the probe columns),
``events.jsonl`` (spikes), ``samples.jsonl`` (when ``prompts`` are given) and
``summary.json`` (``spikes``, ``pollution``, ``lockin``). With ``tensorboard_dir=...`` it also
writes TensorBoard event files live, with the tags of ``andrea-diag export --tensorboard``.

``after_clip`` accepts what your clipper returned: a :class:`~andrea_diag.clip.api.ClipResult`
(from ``clip_grad_norm_with_stats``: exact per-tensor norms, no extra pass), the pre-clip total
norm (from ``torch.nn.utils.clip_grad_norm_``: per-tensor norms are read from the clipped
gradients and scaled back by the clip's factor, exact for global-norm clipping; pass
``norm_type=`` when the clip used another norm than L2; ``andrea_diag.clip.from_total``), or
``None`` (no clipping: norms read from the gradients; also for an optimizer that clips inside
its ``step()``, ``ClippedAdamW``, whose ``last_clip`` is then read after the step:
:class:`~andrea_diag.monitor_clip.StepClips`). Skipping ``after_clip`` works too, but
then ``update_rms``/``cos_update_grad`` are missing (they need a snapshot before the step).
Host syncs: the loss and grad norm are read as floats once per update.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from andrea_diag.clip.api import ClipResult
from andrea_diag.config import ProbeConfig
from andrea_diag.jsonl import JsonlWriter
from andrea_diag.monitor_checks import (
    check_backward,
    check_model_and_optimizer,
    check_options,
    check_prompts,
    checked_columns,
    checked_flag,
    checked_loggers,
    checked_number,
    framework_row,
    versioned,
)
from andrea_diag.monitor_clip import StepClips, clip_result
from andrea_diag.monitor_config import probe_config, run_config
from andrea_diag.monitor_resume import resume_point, set_aside_end_files
from andrea_diag.probes import ProbeDriver, make_probes
from andrea_diag.probes.base import UpdateContext
from andrea_diag.probes.shape import model_shape
from andrea_diag.record import Recorder
from andrea_diag.runread import read_events
from andrea_diag.sinks import LiveSinks
from andrea_diag.tensorboard import TensorBoardRun, writer_backend


def trainable(model: torch.nn.Module) -> tuple[list[str], list[torch.nn.Parameter]]:
    """The names and parameters of ``model`` that require grad, in its order (those watched)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [n for n, _ in named], [p for _, p in named]


class SpikeMonitor:
    """Spike attribution, Adam-state pollution and lock-in probes for a user's loop.

    Every argument is checked when the monitor is made (:mod:`andrea_diag.monitor_checks`): a
    wrong one is a ``TypeError`` or ``ValueError`` naming it, before the run directory exists."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        out_dir: str | Path,
        *,
        probes: ProbeConfig | None = None,
        total_steps: int | None = None,
        prompts: dict[str, torch.Tensor] | None = None,
        tokenizer: Any = None,
        seed: int = 0,
        resume: bool = False,
        meta: dict[str, Any] | None = None,
        tensorboard_dir: str | Path | None = None,
        loggers: list[Any] | None = None,
        layer_groups: Callable[[str], Any] | Mapping[str, Any] | None = None,
        vocab_size: int | None = None,
        block_size: int | None = None,
        **probe_options: Any,
    ) -> None:
        """``probes`` (or its fields as keywords: ``spike_z=8.0``, ``shadow=False``, ...)
        configures the probes; every default comes from :class:`~andrea_diag.config.ProbeConfig`.
        ``resume``: continue the SpikeMonitor run in ``out_dir`` (update numbers count on from
        its last row); the folder is read back and checked first
        (:func:`~andrea_diag.monitor_resume.resume_point`).
        ``meta``: extra ``config.json`` fields (the framework callbacks say which hook ran).
        ``tensorboard_dir``: also write TensorBoard event files there, live, with the tags of
        ``andrea-diag export --tensorboard`` (:mod:`andrea_diag.tensorboard`).
        ``loggers``: more metric sinks (:mod:`andrea_diag.sinks`: ``WandbSink``,
        ``MLflowSink``, or anything with ``log``/``events``/``summary``/``close``), fed the
        same rows, live (one that raises is warned about once and fed no more rows:
        :class:`~andrea_diag.sinks.LiveSinks`).
        ``layer_groups``: the ``layer_gn/<layer>.<kind>`` groups, as a callable ``name ->
        (layer, kind)`` (or ``"layer.kind"``) or a mapping from parameter names or module
        prefixes to either; parameters it leaves out are grouped by module type
        (:mod:`andrea_diag.probes.shape`). ``vocab_size`` / ``block_size``: the lock-in probe's
        vocabulary and position limit, when the model's config and tables do not say them (the
        probe is then skipped with one warning rather than guessed).
        """
        # every argument checked before the run dir is made (monitor_checks.py)
        check_model_and_optimizer(model, optimizer)
        check_options(out_dir, dict(
            probes=probes, total_steps=total_steps, seed=seed, resume=resume, meta=meta,
            tensorboard_dir=tensorboard_dir, layer_groups=layer_groups, tokenizer=tokenizer,
            vocab_size=vocab_size, block_size=block_size))  # fmt: skip
        self._sinks = LiveSinks(checked_loggers(loggers))  # a sink's failure ends no training
        if tensorboard_dir is not None:  # a missing writer fails before the run dir is made
            writer_backend()
        self.model, self.optimizer = model, optimizer
        self._names, self._params = trainable(model)
        shape = model_shape(model, layer_groups, vocab_size, block_size)
        check_prompts(prompts, shape["vocab_size"])
        cfg = probe_config(probes, probe_options, total_steps, shape["unknown"])
        config = {
            **run_config(model, optimizer, self._params, shape),
            "probes": dataclasses.asdict(cfg),
            "steps": total_steps,
            "seed": seed,
            "prompts": sorted(prompts or {}),
            **(meta or {}),
        }
        start = resume_point(out_dir) if resume else 0  # read back, checked, before any write
        self.recorder = Recorder(out_dir if resume else versioned(out_dir), config, resume=resume)
        self.run_dir = self.recorder.run_dir
        if resume:  # the earlier segment's rows stay; its end-of-run files are set aside
            set_aside_end_files(self.run_dir, start)
        if tensorboard_dir is not None:
            self._sinks.append(TensorBoardRun(tensorboard_dir, config))
        shaped = {k: shape[k] for k in ("groups", "vocab_size", "block_size")}
        probe_list = make_probes(model, cfg, total_steps=total_steps, seed=seed, prompts=prompts,
                                 tokenizer=tokenizer, **shaped)  # fmt: skip
        self.probes = ProbeDriver(probe_list, self.recorder)
        self.update = start  # a resumed run counts on: no update number twice
        self._open_state(optimizer)

    def _open_state(self, optimizer: torch.optim.Optimizer) -> None:
        """What the four calls carry from one to the next, empty before the first update."""
        self._framework: JsonlWriter | None = None  # framework.jsonl, opened at its first row
        self._framework_last: dict[str, float] = {}
        self.summary: dict[str, Any] | None = None
        self._ctx: UpdateContext | None = None
        self._pending: dict[str, Any] = {}
        self._stepped = False
        self._clips = StepClips(optimizer)  # stale ClipResults; a clip made inside step()

    # -- the four calls ----------------------------------------------------------------------
    def after_backward(
        self,
        loss: torch.Tensor | float,
        per_example_loss: torch.Tensor | None = None,
        *,
        example_source: torch.Tensor | None = None,
        phase: int | None = None,
        weights: dict[str, float] | None = None,
    ) -> None:
        """Record this update's loss (and per-example losses, for outlier attribution).

        With gradient accumulation, call it once per microbatch, after that microbatch's
        backward, with **that microbatch's own loss** (not divided by the number of
        microbatches): the update's ``loss`` is the mean over its microbatches (the
        ``microbatches`` column counts them) and per-example losses are concatenated. For
        microbatches of unequal token counts, pass ``per_example_loss`` or call it once with
        the token-weighted loss of the whole group.
        ``phase`` (your data-mixing phase id) lets the spike probe attribute phase transitions;
        ``example_source`` (source index per example) names the outlier's source.
        """
        check_backward(per_example_loss, example_source, phase, weights)  # one clear line
        value = checked_number("after_backward", "loss", loss)  # host sync
        ex = (
            per_example_loss.detach().reshape(-1).float()
            if per_example_loss is not None
            else torch.zeros(0)
        )
        src = (
            example_source.detach().reshape(-1)
            if example_source is not None
            else torch.full((ex.numel(),), -1, dtype=torch.long)
        )
        if self._pending:  # a later microbatch of the same update: accumulate, never overwrite
            prev = self._pending
            n = prev["microbatches"]
            prev["loss"] = (prev["loss"] * n + value) / (n + 1)
            prev["microbatches"] = n + 1
            prev["example_loss"] = torch.cat([prev["example_loss"], ex.to(prev["example_loss"])])
            prev["example_source"] = torch.cat(
                [prev["example_source"], src.to(prev["example_source"])]
            )
            prev["phase"] = phase if phase is not None else prev["phase"]
            prev["weights"].update(weights or {})
            return
        self._pending = {
            "loss": value,
            "microbatches": 1,
            "example_loss": ex,
            "example_source": src,
            "phase": phase,
            "weights": dict(weights or {}),
        }

    def after_clip(
        self,
        total_norm_or_clip: ClipResult | torch.Tensor | float | None = None,
        *,
        norm_type: float | None = None,
    ) -> None:
        """Gradients are final (clipped if you clip); the optimizer has not stepped yet.
        ``norm_type``: the norm your clip's total was taken in (``clip_grad_norm_(...,
        norm_type=p)``; None: a ClipResult's own, else 2); the recorded ``grad_norm`` is the L2
        norm whatever it was (:mod:`andrea_diag.monitor_clip`)."""
        if not self._pending:
            raise RuntimeError("SpikeMonitor.after_clip called before after_backward")
        # read again every update: a layer unfrozen mid-run (Lightning's BackboneFinetuning)
        # was left out of grad_norm, and the clip's total over it recorded as a clip
        self._names, self._params = trainable(self.model)
        names = [n for n, p in zip(self._names, self._params, strict=True) if p.grad is not None]
        params = [p for p in self._params if p.grad is not None]
        clip = clip_result(self._clips.fresh(total_norm_or_clip), params, norm_type)
        self.update += 1
        phase = self._pending["phase"]
        row: dict[str, Any] = {
            "update": self.update,
            "loss": self._pending["loss"],
            "lr": self.optimizer.param_groups[0].get("lr"),
        }
        ctx = UpdateContext(
            update=self.update,
            model=self.model,
            optimizer=self.optimizer,
            param_names=names,
            params=params,
            loss=self._pending["loss"],
            example_loss=self._pending["example_loss"],
            example_source=self._pending["example_source"],
            clip=clip,
            recorder=self.recorder,
            row=row,
            phase=phase if phase is not None else 0,  # None: no phases, never a boundary
            boundary=self.probes.enter_phase(phase),
            weights=dict(self._pending["weights"]),
        )
        row["grad_norm"] = ctx.grad_norm()
        row["microbatches"] = self._pending["microbatches"]
        if clip is not None:  # what the optimizer receives, also when only the total was given
            post = float(clip.post_norm)
            row["grad_norm_post"] = post
            total = row["grad_norm"]
            row["clip_coef"] = post / total if total > 0 and math.isfinite(total) else 1.0
        if phase is not None:
            row["phase"] = phase
        # a non-finite update is flagged, not assumed skipped: an optimizer without a loss
        # scaler applies it; after_step(applied=False) says when the loop skipped the step
        row["nonfinite"] = not (math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"]))
        ctx.applied = True
        self.probes.after_clip(ctx)
        self._ctx = ctx
        self._pending = {}
        self._stepped = False

    def add_columns(self, **columns: Any) -> None:
        """Extra columns for this update's row, between ``after_clip`` and ``after_step``; not
        the monitor's own (``update``, ``loss``, ...: :func:`~.monitor_checks.checked_columns`)."""
        if self._ctx is None or self._stepped:
            raise RuntimeError("SpikeMonitor.add_columns called outside an update")
        self._ctx.row.update(checked_columns(columns))  # all checked before any is written

    def after_step(self, applied: bool | None = None) -> None:
        """After ``optimizer.step()``; ``applied=False`` when your loop skipped the step."""
        applied = checked_flag("after_step", "applied", applied)  # before the update is counted
        if self._pending:  # after_clip skipped: measure now (no update snapshot)
            self.after_clip(None)
        ctx = self._ctx
        if ctx is None or self._stepped:
            raise RuntimeError("SpikeMonitor.after_step called before after_backward")
        skipped = self._clips.after_step(ctx.row, measured=ctx.clip is None)
        if applied is not None:
            ctx.applied = applied
        elif skipped:  # the optimizer's own clip skipped the step (ClippedAdamW, non-finite)
            ctx.applied = False
        self.probes.after_step(ctx)
        ctx.row["applied"] = ctx.applied
        self.recorder.log(ctx.row)
        self._sinks.log(ctx.row)
        self._stepped = True

    def log_framework(self, values: Mapping[str, Any], update: int | None = None) -> None:
        """What the framework itself logged (HF's ``logs``, Lightning's ``callback_metrics``):
        one row of ``framework.jsonl`` (``update`` defaults to the monitor's count). Numbers,
        numpy scalars and one-element tensors are kept (NaN too: a diverged eval is a finding),
        anything else dropped; a key ``update`` as ``logged/update``
        (:func:`~andrea_diag.monitor_checks.framework_row`).
        After :meth:`close` (an ``evaluate()`` after ``train()``) there is no run to add to."""
        row = framework_row(values, update)  # checked first: a wrong call fails after close too
        if self.summary is not None or not row:
            return
        if self._framework is None:
            self._framework = JsonlWriter(self.run_dir / "framework.jsonl")
        self._framework.write({"update": self.update if update is None else int(update), **row})
        self._framework_last.update(row)

    def close(self, crashed: BaseException | None = None) -> dict[str, Any]:
        """Write events, samples and summary.json; returns the summary. Idempotent.

        ``crashed``: the exception that ended the user's loop. Everything recorded is still
        written, but as ``partial_summary.json`` with ``status: crashed``, so the report shows
        an unfinished run instead of a finished one.
        """
        if self.summary is not None:
            return self.summary
        summary: dict[str, Any] = {"kind": "monitor", "n_updates": self.update}
        if self._framework is not None:  # the framework's own numbers, last value of each
            self._framework.close()
            summary["framework_logs"] = dict(self._framework_last)
        summary.update(self.probes.close(self.run_dir))
        self.summary = summary  # a second close() does not write it again
        try:
            if crashed is None:
                self.recorder.close(summary)
            else:
                summary.update(status="crashed", error=type(crashed).__name__)
                self.recorder.close()
                self.recorder.write("partial_summary.json", summary)
                self.recorder.release()
        finally:  # the sinks are closed even when the recorder's close failed
            if self._sinks:  # spike events as the export sends them: read back, filtered
                self._sinks.close(lambda: read_events(self.run_dir)[0], summary)
        return summary

    def __enter__(self) -> SpikeMonitor:
        return self

    def __exit__(self, *exc_info: Any) -> None:  # (type, exception, traceback)
        self.close(crashed=exc_info[1])
