"""What the two framework callbacks (``hf``, ``lightning``) share: the run directory they are
given, and the :class:`~andrea_diag.monitor.SpikeMonitor` and
:class:`~andrea_diag.integrations.capture.UpdateCapture` they start at the framework's first
event and close at its last.

Each callback subclasses this and its framework's own callback class; it keeps its hooks (they
sit at different points of each framework's loop) and calls :meth:`MonitorCallback._start`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from andrea_diag.integrations.capture import UpdateCapture, monitor_meta, probe_params
from andrea_diag.monitor import SpikeMonitor


class MonitorCallback:
    """The run directory, the monitor options, and the monitor and capture once training starts.

    ``out_dir``: the run directory. Other keywords go to :class:`~andrea_diag.monitor.SpikeMonitor`
    (``prompts``, ``tokenizer``, ``seed``, ``probes`` or probe fields such as ``spike_z``).
    """

    def __init__(self, out_dir: str | Path, **monitor_options: Any) -> None:
        self.out_dir = Path(out_dir)
        self.options = monitor_options
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
    ) -> UpdateCapture:
        """Start the monitor on ``model``'s trainable parameters; ``framework``: its name,
        version and hooks (``config.json`` records them, then ``settings``)."""
        name, version, hooks = framework
        self.monitor = SpikeMonitor(
            model,
            optimizer,
            self.out_dir,
            total_steps=total_steps,
            meta={**monitor_meta(name, version, hooks), **settings},
            **self.options,
        )
        self.capture = UpdateCapture(
            self.monitor, probe_params(model), impl=name, accumulate=accumulate
        )
        return self.capture

    def _close_monitor(self) -> dict[str, Any] | None:
        """The run's summary, written by the monitor (None before training started)."""
        return self.monitor.close() if self.monitor is not None else None
