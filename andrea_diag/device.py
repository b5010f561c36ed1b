"""Which torch device a command runs on: the one place that turns ``--device`` into a device.

from andrea_diag.device import resolve_device
resolve_device("auto")   # cuda when present, else cpu
"""

from __future__ import annotations

import torch

from andrea_diag.errors import UserError

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when present, else CPU; ``cuda`` without a GPU is a user error."""
    if name not in DEVICES and not name.startswith("cuda:"):
        raise UserError(f"unknown device {name!r}", hint="choose auto, cpu or cuda")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(
            f"--device {name} was requested but no CUDA device is available",
            hint="use --device cpu (or auto) on this machine",
        )
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
