"""What the two framework callbacks (``hf``, ``lightning``) share: the run directory they are
given, and the :class:`~andrea_diag.monitor.SpikeMonitor` and
:class:`~andrea_diag.integrations.capture.UpdateCapture` they start at the framework's first
event and close at its last.

Each callback subclasses this and its framework's own callback class; it keeps its hooks (they
sit at different points of each framework's loop) and calls :meth:`MonitorCallback._start`.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import torch

from andrea_diag.integrations.capture import UpdateCapture, monitor_meta, probe_params
from andrea_diag.monitor import SpikeMonitor
from andrea_diag.monitor_checks import check_options, checked_loggers
from andrea_diag.monitor_config import probe_config


def checked_options(owner: str, out_dir: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The callback's keywords, checked when it is made: they were checked only at the
    framework's first event, after the user's setup (a misspelt option, a bad seed or a
    ``total_steps`` given twice then failed inside ``trainer.fit``). Loggers become a list (a
    generator is read once)."""
    defaults = {n: p.default for n, p in inspect.signature(SpikeMonitor).parameters.items()
                if p.kind is p.KEYWORD_ONLY}  # fmt: skip
    if "total_steps" in options:
        raise TypeError(f"{owner}: total_steps is taken from the trainer's max_steps; omit it")
    check_options(out_dir, {**defaults, **options})
    known = defaults.keys()
    probe_options = {k: v for k, v in options.items() if k not in known}
    probe_config(options.get("probes"), probe_options, None, "")  # an unknown keyword: a TypeError
    if options.get("loggers") is not None:
        options = {**options, "loggers": checked_loggers(options["loggers"])}
    return options


class TrainingRestarted(RuntimeError):
    """Recorded as a run's ``error`` when the framework began training again before it ended
    that run: an exception it did not report to callbacks, or a retry (``transformers``'
    ``auto_find_batch_size`` reruns its loop after an out-of-memory error)."""


class MonitorCallback:
    """The run directory, the monitor options, and the monitor and capture once training starts.

    ``out_dir``: the run directory. Other keywords go to :class:`~andrea_diag.monitor.SpikeMonitor`
    (``prompts``, ``tokenizer``, ``seed``, ``probes`` or probe fields such as ``spike_z``).
    """

    def __init__(self, out_dir: str | Path, **monitor_options: Any) -> None:
        options = checked_options(type(self).__name__, out_dir, monitor_options)
        self.meta: dict[str, Any] = dict(options.pop("meta", None) or {})  # beside the callback's
        self.options = options
        self.out_dir = Path(out_dir)
        self.monitor: SpikeMonitor | None = None
        self.capture: UpdateCapture | None = None

    def _start(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        total_steps: int | None,
        framework: tuple[str, str, dict[str, str]],
        settings: dict[str, Any],
        accumulate: int | None = None,
        step: int | None = None,
    ) -> UpdateCapture:
        """Start the monitor on ``model``'s trainable parameters; ``framework``: its name,
        version and hooks (``config.json`` records them, then ``settings``); ``step``: the
        framework's own count of updates done (a fit resumed from a checkpoint starts past 0)."""
        if self.monitor is not None and self.monitor.summary is None:
            # the last run never ended: closed as crashed (its lock released, the rows kept
            # as a partial run) and its hooks removed, or a retry would record every forward
            # twice into the new run
            self.close(crashed=TrainingRestarted("training began again before this run ended"))
        name, version, hooks = framework
        self.monitor = SpikeMonitor(
            model,
            optimizer,
            self.out_dir,
            total_steps=total_steps,
            meta={**self.meta, **monitor_meta(name, version, hooks), **settings},
            **self.options,
        )
        self.capture = UpdateCapture(
            self.monitor, probe_params(model), impl=name, accumulate=accumulate
        )
        if step is not None and step != self.monitor.update:
            _warn_step(self.monitor.update, step, name)
        return self.capture

    def close(self, crashed: BaseException | None = None) -> dict[str, Any] | None:
        """Write the run's summary; ``crashed``: the exception that ended training (the run is
        then kept as a partial one, as ``SpikeMonitor``'s ``with`` block keeps it)."""
        return self._close_monitor(crashed)

    def _close_monitor(self, crashed: BaseException | None = None) -> dict[str, Any] | None:
        """The run's summary, written by the monitor (None before training started)."""
        return self.monitor.close(crashed) if self.monitor is not None else None


def _warn_step(update: int, step: int, framework: str) -> None:
    """The rows count from the run folder's last update, the framework from its checkpoint's
    step: a resume from an earlier checkpoint than the folder's end (or into a new folder)
    puts different numbers on one update in ``metrics.jsonl`` and ``framework.jsonl``."""
    warnings.warn(
        f"AndreaDiagCallback: the run folder's updates count on from {update}, but {framework} "
        f"starts at step {step}: metrics.jsonl's update numbers will differ from the "
        "framework's (framework.jsonl) by "
        f"{update - step}; resume into the folder whose rows end at the checkpoint's step",
        UserWarning,
        stacklevel=3,
    )
