"""Per-layer gradient norms, every update, from the clipper's per-tensor norms.

Columns ``layer_gn/<layer>.<kind>`` (``layer_gn/h00.attention``, ``layer_gn/embed.embedding``,
``layer_gn/head.head``, ``layer_gn/final.norm``): the pre-clip L2 norm of the group's
gradients, ``sqrt(sum of squares of the member tensors' norms)``. Groups come from
:func:`andrea_diag.model.param_group_of` (the trainer), or from the table the caller passes
(``SpikeMonitor``: module types, :mod:`andrea_diag.probes.shape`).

No second pass over the gradients: ``ctx.clip.per_tensor_norm`` comes from the clip pass, and
the grouping is one ``index_add`` on that small vector. Under the trainer (``defer_reads``) each
update's group vector waits on the device, with its copy to the host started, and
:meth:`LayerGradNormProbe.resolve` (the recorder's flush; ``resolve_ready``, each pipelined
update, those already landed) fills their columns; else one host transfer per update. Only
when the loop does not clip through us (``ctx.clip is None``) are the norms computed from the
grads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from andrea_diag import metrics
from andrea_diag.device import HostCopy, read_values
from andrea_diag.model import param_group_of
from andrea_diag.probes.base import ProbeState, UpdateContext

GroupFn = Callable[[str], tuple[str, str]]


class GroupIndex:
    """Maps a list of parameter names to group slots once, then groups norm vectors fast."""

    def __init__(self, names: Sequence[str], group_of: GroupFn = param_group_of) -> None:
        keys = [".".join(group_of(n)) for n in names]
        self.keys: list[str] = list(dict.fromkeys(keys))  # first-seen order: embed, h00, ...
        slot = {k: i for i, k in enumerate(self.keys)}
        self._index = torch.tensor([slot[k] for k in keys], dtype=torch.long)
        self._by_device: dict[torch.device, torch.Tensor] = {}
        self.names = tuple(names)

    def index_on(self, device: torch.device) -> torch.Tensor:
        if device not in self._by_device:
            self._by_device[device] = self._index.to(device)
        return self._by_device[device]

    def group_norms(self, per_tensor: torch.Tensor) -> torch.Tensor:
        """(n_tensors,) norms -> (n_groups,) norms: sqrt(index_add of squares)."""
        per = per_tensor.detach() if per_tensor.requires_grad else per_tensor
        sq = per.to(torch.float64 if per.dtype == torch.float64 else torch.float32).square()
        out = torch.zeros(len(self.keys), dtype=sq.dtype, device=sq.device)
        out.index_add_(0, self.index_on(sq.device), sq)
        if out.device.type == "cpu" and out.dtype == torch.float64:
            # numpy's square root is the exact instruction; torch's CPU float64 one is MKL's
            # vector math, whose bits move with the CPU (tests/golden/record_golden.py; its
            # float32 one is exact under the golden pin). Host values only: the moments' norms
            return torch.from_numpy(np.sqrt(out.numpy()))
        return out.sqrt()

    def columns(
        self, prefix: str, per_tensor: torch.Tensor, on_device: bool = False
    ) -> dict[str, Any]:
        """``{prefix/<layer>.<kind>: norm}``: floats in one host transfer for the whole vector,
        or (``on_device``) 0-dim views of the device vector, for the recorder's flush to read."""
        norms = self.group_norms(per_tensor)
        vals = norms.unbind() if on_device else norms.tolist()  # tolist: host sync
        return {f"{prefix}/{k}": v for k, v in zip(self.keys, vals, strict=True)}


def group_index_for(
    cache: dict[tuple[str, ...], GroupIndex],
    names: Sequence[str],
    groups: Mapping[str, tuple[str, str]] | None = None,
) -> GroupIndex:
    """A GroupIndex for these names, reused while the parameter list stays the same.
    ``groups``: name -> (layer, kind) chosen by the caller (``SpikeMonitor``); names it does not
    hold, and every name without it, are grouped by :func:`param_group_of`."""
    key = tuple(names)
    if key not in cache:
        cache.clear()  # the list changed (e.g. a parameter got no gradient): rebuild
        table = dict(groups or {})
        cache[key] = GroupIndex(key, lambda n: table.get(n) or param_group_of(n))
    return cache[key]


class LayerGradNormProbe(ProbeState):
    """Adds ``layer_gn/<layer>.<kind>`` columns every update (pre-clip norms)."""

    name = "layers"
    columns: ClassVar[tuple[metrics.Column, ...]] = (metrics.LAYER_GN,)
    pipeline_safe = True  # host values and the clip pass's norms only (train/pipeline.py)
    # rebuilt; set by the driver; passed in; resolved before any state is taken
    transient = ("_groups", "defer_reads", "groups", "_queue", "_launched")

    def __init__(self, groups: Mapping[str, tuple[str, str]] | None = None) -> None:
        self.groups = groups  # name -> (layer, kind); None: by name (param_group_of)
        self._groups: dict[tuple[str, ...], GroupIndex] = {}
        self.defer_reads = False  # set by the ProbeDriver: columns stay on the device
        # (the driver's guarded row, the group keys, the group norms on the device, and their
        # copy on its way to the host) per update
        self._queue: list[tuple[Any, list[str], torch.Tensor, HostCopy]] = []
        # the pipelined update's (launch_after_clip): its number, then :meth:`_deferred`'s
        self._launched: tuple[int, list[str], torch.Tensor, HostCopy] | None = None

    def _names_with_grad(self, ctx: UpdateContext) -> list[str]:
        # clip.per_tensor_norm covers only parameters that have a gradient, in order
        if all(p.grad is not None for p in ctx.params):
            return ctx.param_names
        return [n for n, p in zip(ctx.param_names, ctx.params, strict=True) if p.grad is not None]

    def launch_after_clip(self, ctx: UpdateContext) -> None:
        """The pipelined update (train/pipeline.py): the group norms, and their copy to the
        host, start with the update's own work, so reading them later waits for nothing after
        it; :meth:`after_clip` queues them with the row."""
        self._launched = None
        per = ctx.per_tensor_grad_norm()
        if per.numel() and self.defer_reads:
            self._launched = (ctx.update, *self._deferred(ctx, per))

    def _deferred(
        self, ctx: UpdateContext, per: torch.Tensor
    ) -> tuple[list[str], torch.Tensor, HostCopy]:
        """The group keys, the group norms on the device, and their copy to the host, started."""
        gi = group_index_for(self._groups, self._names_with_grad(ctx), self.groups)
        norms = gi.group_norms(per)
        return gi.keys, norms, HostCopy(norms)

    def after_clip(self, ctx: UpdateContext) -> None:
        launched, self._launched = self._launched, None
        if launched is not None and launched[0] == ctx.update:
            self._queue.append((ctx.row, *launched[1:]))
            return
        per = ctx.per_tensor_grad_norm()
        if per.numel() == 0:
            return
        if self.defer_reads:  # no op of the row's own per group: one vector, read later
            self._queue.append((ctx.row, *self._deferred(ctx, per)))
            return
        gi = group_index_for(self._groups, self._names_with_grad(ctx), self.groups)
        ctx.row.update(gi.columns("layer_gn", per))

    def resolve_ready(self) -> None:
        """:meth:`resolve` of the first waiting updates whose copies have landed (no wait)."""
        self.resolve(ready_only=True)

    def resolve(self, ready_only: bool = False) -> None:
        """Fill the waiting updates' columns from one host copy of their group norms (or from
        their own copies, where each has one: no host sync). ``ready_only``: only the first
        updates whose copies have landed (no wait)."""
        n = len(self._queue)
        if ready_only:
            n = next((i for i, q in enumerate(self._queue) if not q[3].ready()), n)
        if not n:
            return
        queue, self._queue = self._queue[:n], self._queue[n:]
        values = read_values([q[3] for q in queue], [q[2] for q in queue])
        for q in queue:  # each copy is read once: its pinned buffer serves a later update
            q[3].release()
        pos = 0
        for row, keys, _, _ in queue:
            mine, pos = values[pos : pos + len(keys)], pos + len(keys)
            row.update({f"layer_gn/{k}": v for k, v in zip(keys, mine, strict=True)})

    def after_step(self, ctx: UpdateContext) -> None:
        return None

    def close(self, run_dir: Path, results: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {}
