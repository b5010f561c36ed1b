"""andrea-diag: diagnose and benchmark transformer training stability.

Library entry points that users call from their own training loops::

    from andrea_diag import clip_grad_norm_          # drop-in for torch.nn.utils.clip_grad_norm_
    from andrea_diag.monitor import SpikeMonitor     # spike / Adam-state / lock-in probes

The command line (``andrea-diag --help``) runs controlled clipped-vs-unclipped experiments,
kernel benchmarks and HTML reports on top of the same functions.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from andrea_diag.clip.api import ClipResult, clip_grad_norm_, clip_grad_norm_with_stats

__all__ = ["ClipResult", "__version__", "clip_grad_norm_", "clip_grad_norm_with_stats"]


def __getattr__(name: str) -> Any:
    # the clip API on first use (PEP 562): `import andrea_diag.config` must not import torch
    if name in ("ClipResult", "clip_grad_norm_", "clip_grad_norm_with_stats"):
        from andrea_diag.clip import api

        return getattr(api, name)
    raise AttributeError(f"module 'andrea_diag' has no attribute {name!r}")
