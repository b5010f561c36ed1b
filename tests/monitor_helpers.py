"""Drive a SpikeMonitor the way a user's loop does (test_monitor.py, test_monitor_shapes.py,
test_load_runs.py, test_sinks.py): the hooks in their documented order around backward, the
optimizer step and zero_grad."""

from __future__ import annotations

import torch

from andrea_diag.monitor import SpikeMonitor


def monitored_update(mon: SpikeMonitor, opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """One update of a plain loop: backward, the monitor's hooks (no clipping), step, zero_grad."""
    loss.backward()
    mon.after_backward(loss)
    mon.after_clip(None)
    opt.step()
    mon.after_step()
    opt.zero_grad()
