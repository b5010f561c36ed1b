"""What ``SpikeMonitor`` writes to ``config.json`` of the user's model and optimizer, and its
resolved probe settings: :func:`run_config`, :func:`probe_config`. Kept apart from
``monitor.py`` (the four calls of an update) so each stays small.

    cfg = probe_config(probes, options, total_steps, shape["unknown"])
    config = run_config(model, optimizer, params, shape)
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import torch

from andrea_diag.config import ProbeConfig
from andrea_diag.monitor_checks import check_probe_config

_PLAIN = (int, float, str, bool, type(None))
_DROP = object()  # a setting JSON cannot hold (a tensor of many values, an object)


def _plain(value: Any) -> Any:
    """``value`` as JSON holds it, or ``_DROP``. A one-value tensor is its number: torch takes
    a tensor ``lr``, betas or weight decay, and the group's ``lr`` was left out of
    ``config.json`` for it (read once, when the monitor is made)."""
    if isinstance(value, torch.Tensor):
        return value.detach().item() if value.numel() == 1 else _DROP
    if isinstance(value, tuple | list):
        items = [_plain(v) for v in value]
        return _DROP if any(v is _DROP for v in items) else items
    return value if isinstance(value, _PLAIN) else _DROP


def _plain_groups(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """The optimizer's param-group settings that JSON can hold (lr, betas, ...)."""
    groups = [{k: _plain(v) for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    return [{k: v for k, v in g.items() if v is not _DROP} for g in groups]


def probe_config(
    probes: ProbeConfig | None, options: dict[str, Any], steps: int | None, unknown: str
) -> ProbeConfig:
    """The resolved probe settings; lock-in off, with one warning, when ``unknown`` says what
    it needs and the model does not tell (:func:`~andrea_diag.probes.shape.model_shape`)."""
    try:
        cfg = dataclasses.replace(probes or ProbeConfig(), **options)
    except TypeError as exc:  # an unknown keyword: say which fields exist
        fields = ", ".join(f.name for f in dataclasses.fields(ProbeConfig))
        raise TypeError(f"{exc}; SpikeMonitor probe options are: {fields}") from None
    check_probe_config(cfg)  # types and bounds as a ValueError/TypeError naming the keyword
    cfg = cfg.resolve(steps)
    if cfg.lockin and unknown:
        arg, why = unknown.split(": ", 1)
        warnings.warn(
            f"SpikeMonitor: lock-in probe skipped: {why}; pass SpikeMonitor(..., {arg}=N), "
            "or lockin=False to silence this",
            UserWarning,
            stacklevel=3,  # the SpikeMonitor(...) call
        )
        cfg = dataclasses.replace(cfg, lockin=False)
    return cfg


def run_config(
    model: torch.nn.Module, optimizer: Any, params: list[torch.Tensor], shape: dict[str, Any]
) -> dict[str, Any]:
    """What ``config.json`` says of the user's model and optimizer."""
    return {
        "kind": "monitor",
        "arm": "monitor",
        "model": type(model).__name__,
        "n_params": sum(p.numel() for p in params),
        "optimizer": type(optimizer).__name__,
        "param_groups": _plain_groups(optimizer),
        "model_shape": {k: shape[k] for k in ("vocab_size", "block_size", "layer_groups")},
    }
