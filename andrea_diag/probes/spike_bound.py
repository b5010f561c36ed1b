"""Which pipelined updates can be spikes, decided on the device before their values are read.

    bound = spike_bound(spike_probe, sources)   # host: from the windows of the updates before
    maybe = bound.device_flag(loss, example_loss, grad_norm, staging)  # 0-dim bool, no sync
    copy_if(dst, src, maybe)                     # the optimizer-state probe's kept copies

Why: under ``--cuda-graph`` an update's values are read after its step (train/pipeline.py), so
the optimizer-state probe used to keep, every update, a copy of the gradient and of the
parameters before the step, for a spike it learns of only then: two parameter-sized copies an
update (about 0.46 ms of the 120m update on the H200) for the few updates that spike.

The spike probe's decision (probes/spikes.py) is ``z > z_thresh`` for the loss signal (the
raw loss, or the mix-adjusted excess once every source of the batch has 3 recent means) or the
pre-clip gradient norm, against windows of the updates before; or a non-finite value. When the
pipeline launches update ``u``, its host has finished ``u - 1``: the windows, the source
references and the warm-up are final. So the decision is "a value above a threshold", which
the device checks on the update's own loss and norm. Each threshold is lowered by a margin far
above float32 rounding (``MARGIN_SCALE``, ``MARGIN_ABS``), so the flag is a superset of the
decision: a copy may be made for an update that does not spike, never skipped for one that
does. The optimizer-state probe reads the flag at every spike and fails loudly if it was not
set (``optstate.py``, ``_host_part``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from andrea_diag.probes.base import robust_scale

if TYPE_CHECKING:
    from andrea_diag.device import PinnedStaging

NO_BOUND = 3.0e38  # below float32's largest: a non-finite value still compares above it
MARGIN_SCALE = 1e-3  # of the robust scale: 0.001 in z
MARGIN_ABS = 1e-5  # times (1 + the magnitudes involved): float32 rounding is ~1e-7 of them


def threshold(history: list[float], warmup: int, z: float, rel_floor: float) -> float:
    """A value at or below this has ``robust_z(value, history) <= z`` (float32 margin
    included); :data:`NO_BOUND` in the warm-up, where no finite value is a spike by z."""
    if len(history) < warmup:
        return NO_BOUND
    return bound_of(*robust_scale(history, rel_floor), z)


def bound_of(med: float, scale: float, z: float) -> float:
    """:func:`threshold` from the window's (median, scale)."""
    exact = med + z * scale
    return exact - MARGIN_SCALE * scale - MARGIN_ABS * (1.0 + abs(med) + abs(z * scale))


@dataclass
class SpikeBound:
    """Above ``grad_max`` or ``signal_max`` (or non-finite): the update may be a spike."""

    grad_max: float
    signal_max: float
    ref: list[float] | None  # per example: its source's reference (the excess); None: raw loss

    def device_flag(
        self,
        loss: torch.Tensor,
        example_loss: torch.Tensor,
        grad_norm: torch.Tensor,
        staging: PinnedStaging,
    ) -> torch.Tensor:
        """0-dim bool on the values' device: this update may be a spike. No host sync."""
        # the bounds at most NO_BOUND: one past float32's range would be inf there, and an
        # inf value then not above it (a nan bound stays nan: min keeps its first argument)
        bounds = [min(self.grad_max, NO_BOUND), min(self.signal_max, NO_BOUND)]
        flag = _kernel_flag(self, loss, example_loss, grad_norm, bounds)
        if flag is not None:
            return flag
        host = torch.tensor([*bounds, *(self.ref or [])])
        thr = staging.copy(torch.empty(host.shape, device=loss.device), host)
        if self.ref is None:
            signal = loss.float().reshape(())
        else:  # the probe's excess: the mean of each example's loss minus its reference
            signal = (example_loss.float().reshape(-1) - thr[2:]).mean()
        values = torch.stack([grad_norm.float().reshape(()), signal])
        # above its bound, or non-finite (-inf included: the probe flags any non-finite value):
        # each non-finite value made +inf, above every finite bound; "not at or below" also
        # flags against a nan bound. Four small launches, not six: host time in the launches
        # of a pipelined update, which the device may wait for at 12m (issue 20)
        inf = float("inf")
        return (~(values.nan_to_num(nan=inf, posinf=inf, neginf=inf) <= thr[:2])).any()


def _kernel_flag(
    bound: SpikeBound,
    loss: torch.Tensor,
    example_loss: torch.Tensor,
    grad_norm: torch.Tensor,
    bounds: list[float],
) -> torch.Tensor | None:
    """The flag in one launch of the clipper's extension (k_spike_flag), or None where it
    cannot be had (not CUDA, no extension, a dtype it does not take): the torch ops then.

    Why: the torch ops are a host-to-device copy of the bounds and four launches, host time
    the device waited for at 12m bf16 on the H200 (issue 20, reports/bench-train/). Here the
    bounds are kernel arguments. With source references, the signal is the mean loss against
    the bound plus the references' mean: the mean of the differences in exact arithmetic; in
    float32 the two differ by a few ulps of the losses, far inside ``MARGIN_ABS`` times the
    largest reference, which :func:`spike_bound` takes off that bound."""
    if grad_norm.device.type != "cuda" or grad_norm.dtype != torch.float32:
        return None
    from andrea_diag.clip import cuda

    if not cuda.available()[0]:
        return None
    grad_max, signal_max = bounds
    if bound.ref is None:
        signal = loss.detach().reshape(1)
    else:
        signal = example_loss.detach().reshape(-1)
        if signal.numel() != len(bound.ref):
            return None
        signal_max = min(signal_max + math.fsum(bound.ref) / len(bound.ref), NO_BOUND)
    try:
        return cuda.spike_flag(
            grad_norm.detach().reshape(()), signal.contiguous(), grad_max, signal_max
        )
    except cuda.unsupported_errors():
        return None


def spike_bound(probe: Any, sources: list[int]) -> SpikeBound:
    """The bound of the spike probe's next decision (``probe``: a :class:`SpikeProbe` whose
    host has finished every update before), for a batch of these example sources."""

    def bound(metric: str) -> float:  # threshold(), from the probe's memo of the window
        if len(probe._win[metric]) < probe.warmup or not probe._win[metric]:
            return NO_BOUND
        return bound_of(*probe.window_scale(metric), probe.z_thresh)

    grad_max = bound("grad_norm")
    ref = probe.source_refs(sources)  # None: the raw loss is the signal (_residuals' rule)
    signal_max = bound("excess" if ref is not None else "loss")
    if ref is not None:  # the device's mean differs from the host's in float32 rounding
        signal_max -= MARGIN_ABS * max((abs(r) for r in ref), default=0.0)
    return SpikeBound(grad_max, signal_max, ref)


def launch_flag(spikes: Any, ctx: Any, staging: PinnedStaging) -> torch.Tensor | None:
    """The pipelined update's flag (``ctx``: its launch context, the group in its cache), or
    None where nothing bounds it (no spike probe, no group or clip): then every copy is made."""
    group = ctx.cache.get("group")
    if spikes is None or group is None or ctx.clip is None:
        return None
    bound = spike_bound(spikes, ctx.example_source.reshape(-1).tolist())
    return bound.device_flag(group.loss, group.example_loss, ctx.clip.total_norm, staging)


def copy_if(dst: list[torch.Tensor], src: list[torch.Tensor], flag: torch.Tensor) -> None:
    """``dst[i].copy_(src[i])`` where ``flag`` (0-dim bool) is set. CUDA: the clipper's
    extension, no host sync (k_copy_if returns at once when it is not); without it, every copy
    is made. The CPU: a read of the flag (no device to wait for)."""
    if not dst:
        return
    if dst[0].device.type != "cuda":
        if bool(flag):
            torch._foreach_copy_(dst, src)
        return
    from andrea_diag.clip import cuda

    if cuda.available()[0] and cuda.supports(src, 2.0) and cuda.supports(dst, 2.0):
        try:
            cuda.copy_if(dst, src, flag)
            return
        except cuda.unsupported_errors():
            pass
    torch._foreach_copy_(dst, src)
