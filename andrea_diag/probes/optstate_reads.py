"""The optimizer-state probe's deferred reads and its update-direction buffers: each update's
scalars as one float64 device vector (:class:`Scalars`), kept with what the host part needs
(:class:`Pending`), and read for many updates at once (:func:`read_queue`) under the trainer: at
the recorder's flush, or (the pipelined update) as each update's own host copy lands. On CUDA a
read waits for those copies' events, not for the stream; on the CPU it is one copy of them all.
The arithmetic that follows (optstate_rows.py ``finish_entry``) is the same Python float math
whenever it runs, so the columns are bit-identical.
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from andrea_diag.device import HostCopy, read_values
from andrea_diag.probes.shadow import GroupInfo, ShadowView

if TYPE_CHECKING:
    from andrea_diag.clip.api import ClipResult


def as_vector(scalars: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """(n,) vector of ``n`` 0-dim tensors. ``torch._foreach_norm`` on CUDA returns views of one
    vector, element ``i`` at offset ``i`` (``ret_per_tensor[i]``): that vector is taken back as
    it is (one view op), where ``torch.stack`` would dispatch n ``unsqueeze`` and a ``cat``, the
    largest host cost of this probe's update (issue 20). Anything else is stacked. The values
    are the same either way."""
    first = scalars[0]
    n, size, base = len(scalars), first.element_size(), first.data_ptr()
    storage = first.untyped_storage().data_ptr()
    # every element at its own offset of one storage, in order (an empty tensor's norm is a
    # fresh zero, so a gap or a reorder falls back): n pointer reads, far cheaper than a stack
    if n > 1 and all(
        t.dim() == 0
        and t.dtype == first.dtype
        and t.untyped_storage().data_ptr() == storage
        and t.data_ptr() == base + i * size
        for i, t in enumerate(scalars)
    ):
        return first.as_strided((n,), (1,), first.storage_offset())
    return torch.stack(list(scalars))


class Scalars:
    """Named groups of 0-dim device scalars, concatenated into one float64 vector."""

    def __init__(self) -> None:
        self.parts: list[torch.Tensor] = []
        self.slots: dict[str, slice] = {}
        self.size = 0

    def push(self, key: str, tensors: list[torch.Tensor] | torch.Tensor) -> None:
        """``tensors``: 0-dim tensors, or one tensor whose elements are the values."""
        self.push_split((key,), tensors)

    def push_split(
        self, keys: tuple[str, ...], tensors: list[torch.Tensor] | torch.Tensor, *sizes: int
    ) -> None:
        """One vector of values under several keys: ``keys[i]`` gets ``sizes[i]`` of them in
        order (the last key the rest), so one multi-tensor result is one cast, not one a key."""
        if isinstance(tensors, torch.Tensor):
            flat = tensors.reshape(-1)
        elif tensors:
            flat = as_vector(tensors).reshape(-1)
        else:
            return
        flat = flat.double()  # one cast
        self.parts.append(flat)
        start = self.size
        for key, n in zip(keys, (*sizes, flat.numel() - sum(sizes)), strict=True):
            self.slots[key] = slice(start, start + n)
            start += n
        self.size += flat.numel()

    def adopt(self, flat: torch.Tensor, slots: dict[str, slice]) -> None:
        """Start from a vector made elsewhere (a graph's copy) with its slots."""
        self.parts, self.slots, self.size = [flat], dict(slots), flat.numel()

    def flat(self) -> torch.Tensor | None:
        return torch.cat(self.parts) if self.parts else None


class DevicePart(NamedTuple):
    """An update's device part, waiting for its host part (``OptStateProbe.after_step``)."""

    update: int
    names: list[str]
    params: list[torch.Tensor]
    g_eff: list[torch.Tensor]
    flat: torch.Tensor | None  # the update's device scalars, one float64 vector
    slots: dict[str, slice]
    kept: bool  # g_eff is the launch's copy: a spike's two norms are still to take from it
    copy: HostCopy | None  # ``flat`` on its way to the host, started at the launch
    maybe: torch.Tensor | None = None  # the launch's flag: the copies were made (spike_bound.py)


class Pending:
    """One update whose host part waits for :meth:`OptStateProbe.resolve`."""

    def __init__(
        self,
        update: int,
        row: MutableMapping[str, Any],  # the driver's guarded view of the row
        names: list[str],
        n_elem: int,
        applied: bool,
        spike_now: bool,
        reset: bool,
        flat: torch.Tensor | None,
        slots: dict[str, slice],
        betas: list[tuple[float, float]],
    ) -> None:
        self.update, self.row, self.names, self.n_elem = update, row, names, n_elem
        self.applied, self.spike_now, self.reset = applied, spike_now, reset
        self.flat, self.slots, self.betas = flat, slots, betas
        self.vals: list[float] = []
        self.has_moments = True  # the optimizer had m and v at this update (not before its state)
        # ``flat`` on its way to the host (started with the device work): read without a sync
        self.copy: HostCopy | None = None
        self.view: ShadowView | None = None
        # at a spike (resolved in its own update): what the shadow add needs
        self.spike: tuple[list[torch.Tensor], list[torch.Tensor], list[int]] | None = None


def ready(e: Pending) -> bool:
    """Whether ``e``'s values are on the host already (its copies have landed: no wait)."""
    if e.flat is not None and (e.copy is None or not e.copy.ready()):
        return False
    return e.view is None or (e.view.copy is not None and e.view.copy.ready())


def read_queue(queue: list[Pending]) -> dict[int, tuple[list[float], list[float]]]:
    """Bring every entry's scalars (into ``entry.vals``) and every distinct shadow view's
    ``‖B‖`` to the host; returns the views' values by ``id(view)``. Where every value has its
    :class:`HostCopy` (the trainer on CUDA), it waits for those copies only; else one copy of
    them all, a host sync."""
    views = {id(e.view): e.view for e in queue if e.view is not None}
    copies = [e.copy for e in queue if e.flat is not None] + [v.copy for v in views.values()]
    parts = [e.flat for e in queue if e.flat is not None]
    parts += [t for v in views.values() for t in (v.bm, v.bv)]  # as a view's copy: bm, bv
    vals = read_values(copies, parts)  # their own copies' events on CUDA; else one host sync
    for e in queue:  # an entry's copy is read once (a shadow view's is shared: kept)
        if e.copy is not None:
            e.copy.release()
            e.copy = None
    pos = 0
    for e in queue:
        n = e.flat.numel() if e.flat is not None else 0
        e.vals, pos = vals[pos : pos + n], pos + n
    out: dict[int, tuple[list[float], list[float]]] = {}
    for key, v in views.items():
        n = v.bm.numel()
        out[key] = (vals[pos : pos + n], vals[pos + n : pos + 2 * n])
        pos += 2 * n
    return out


def snapshot_buffers(
    params: list[torch.Tensor], flat_dot: bool | None
) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """Buffers for the pre-step parameter copy. ``flat_dot`` (None: on CUDA) makes them views of
    one flat buffer, so :func:`update_grad_dot` sums all products in one launch."""
    flat = flat_dot if flat_dot is not None else params[0].device.type == "cuda"
    if not flat or {p.dtype for p in params} != {torch.float32}:  # fp32 products only
        return [torch.empty_like(p, memory_format=torch.preserve_format) for p in params], None
    buf = torch.empty(sum(p.numel() for p in params), dtype=params[0].dtype,
                      device=params[0].device)  # fmt: skip
    views, start = [], 0
    for p in params:
        views.append(buf[start : start + p.numel()].view(p.shape))
        start += p.numel()
    return views, buf


class Captured(NamedTuple):
    """The gradient Adam will receive, as ``after_clip`` captures it: the gradients themselves
    (a clip after ``after_clip``, e.g. Lightning's ``gradient_clip_val``, scales them in place
    before the step, and the step reads them so) and, for Adam's coupled L2, ``wd·θ`` of the
    parameters before the step moves them. None: no group has coupled L2 or ``maximize``."""

    grads: list[torch.Tensor]
    l2: list[torch.Tensor | None] | None = None
    negate: list[bool] | None = None


def capture_grads(
    params: list[torch.Tensor], ginfo: list[GroupInfo], gid_of: dict[int, int]
) -> Captured:
    """:class:`Captured` of ``params`` (those with a gradient), before the step."""
    grads = [p.grad.detach() if p.grad.requires_grad else p.grad for p in params]  # create_graph
    if not any(i.l2 or i.maximize for i in ginfo):  # the common case: the gradients as they are
        return Captured(grads)
    infos = [ginfo[gid_of.get(id(p), 0)] for p in params]
    l2 = [i.wd * p.detach() if i.l2 else None for p, i in zip(params, infos, strict=True)]
    return Captured(grads, l2, [i.maximize for i in infos])


def received_grads(c: Captured) -> list[torch.Tensor]:
    """The gradient Adam received, after the step: the gradients as the step read them, plus
    the captured ``wd·θ`` in its own buffer (``-g + wd·θ`` under ``maximize``, as torch's Adam
    negates before it adds the decay: the probe took ``-(g + wd·θ)`` before). Summed at
    ``after_clip``, a clip between it and the step was missed: Lightning's clip of an Adam with
    weight decay left the spike terms unclipped, and a share of ``v`` read 1,468."""
    if c.l2 is None or c.negate is None:
        return c.grads
    out = []
    for g, l2, neg in zip(c.grads, c.l2, c.negate, strict=True):
        if l2 is None:  # no decay in its group: the gradient itself, never written to
            out.append(-g if neg else g)
        else:  # its own buffer, written once (after_step takes it). torch's Adam negates the
            # gradient, then adds wd·θ: -g + wd·θ, not -(g + wd·θ)
            out.append(l2.sub_(g) if neg else l2.add_(g))
    return out


def held_with_grad(ctx: Any, held: dict[int, int]) -> tuple[list[str], list[torch.Tensor]]:
    """The parameters with a gradient that the optimizer holds (``held``: id -> group; empty:
    every one), and their names. One it does not hold (a backbone left trainable beside
    ``Adam(model.head.parameters())``) has no m, v: it made every update's m/v columns empty."""
    pairs = [(n, p) for n, p in zip(ctx.param_names, ctx.params, strict=True)
             if p.grad is not None]  # fmt: skip
    mine = [(n, p) for n, p in pairs if id(p) in held]
    # none held: an optimizer of copies (fp32 master weights): every parameter, as before
    return [n for n, _ in mine or pairs], [p for _, p in mine or pairs]


def at_step(ginfo: list[GroupInfo], betas: list[tuple[float, float]] | None) -> list[GroupInfo]:
    """``ginfo`` with the betas the step used (``betas``, read at ``after_clip``): a scheduler
    that moves them (OneCycleLR cycles Adam's β1) and steps before ``after_step`` made the
    spike terms decay by the next update's β."""
    for info, (b1, b2) in zip(ginfo, betas or [], strict=False):
        info.beta1, info.beta2 = b1, b2
    return ginfo


def clipped_in_step(g_eff: list[torch.Tensor], optimizer: Any) -> list[torch.Tensor]:
    """The gradient Adam received where the optimizer clips inside its ``step()``
    (``ClippedAdamW``, ``clips_in_step``): ``g_eff``, captured before the step, times the step's
    own global scale (``last_clip.scale``, on the device: no host read). Without it the spike
    terms were the unclipped gradient's, and a spike's share of ``v`` read 10x (past 1)."""
    clip = getattr(optimizer, "last_clip", None)
    if not getattr(type(optimizer), "clips_in_step", False) or clip is None:
        return g_eff
    if clip.scale.dim() != 0:  # a per-tensor scale is no ClippedAdamW's
        return g_eff
    return torch._foreach_mul(g_eff, clip.scale) if g_eff else g_eff  # each in its own dtype


def post_clip_norms(
    clip: ClipResult | None, ginfo: list[GroupInfo] | None, g_eff: list[torch.Tensor]
) -> torch.Tensor | None:
    """Per-tensor norms of the gradient Adam received, from the clip pass (no extra pass),
    when it is the clipped gradient itself (no coupled L2 term)."""
    if clip is None or any(i.l2 or i.maximize for i in ginfo or []):
        return None
    per = clip.per_tensor_norm
    if per.numel() != len(g_eff):
        return None
    return (per * clip.scale).double()  # global: 0-dim scale; per-tensor: (n,)


def push_spike_norms(out: Scalars, g_eff: list[torch.Tensor]) -> None:
    """A spike's two norms per tensor of the gradient Adam received: ``‖g‖`` and ``‖g‖₄``
    (``‖g²‖₂ = ‖g‖₄²``), for its terms in ``m`` and ``v``; eager, or from the pipeline's copy."""
    out.push("gs", torch._foreach_norm(g_eff))
    out.push("gs4", torch._foreach_norm(g_eff, 4.0))


def tensor_norms(ts: list[torch.Tensor], fused: bool) -> torch.Tensor | list[torch.Tensor]:
    """Per-tensor L2 norms. ``fused`` on CUDA: the clipper's own norm pass (one launch, float64 sums,
    deterministic; 83% of the read bandwidth at 120m fp32 where torch's ``_foreach_norm`` got
    24%, reports/bench-kernels/h200-2026-12-01b/). Elsewhere, or without the extension:
    ``_foreach_norm``, the CPU arithmetic tests/test_golden.py pins."""
    if fused and ts and ts[0].device.type == "cuda":
        from andrea_diag.clip import cuda

        if cuda.available()[0] and cuda.supports(ts, 2.0):
            return cuda.clip(ts, math.inf, 2.0, apply=False)[1]
    return torch._foreach_norm(ts)


def push_moment_norms(out: Scalars, moments: list[torch.Tensor], fused: bool) -> None:
    """Per-tensor ``‖m‖`` then ``‖v‖`` into ``out`` (slots "m", "v"): ``moments`` is the m list
    followed by the v list, one norm pass for both."""
    out.push_split(("m", "v"), tensor_norms(moments, fused), len(moments) // 2)


def l2(values: list[float]) -> float:
    """The global L2 norm of per-tensor norms, in the rows' own Python arithmetic."""
    return math.sqrt(sum(x * x for x in values))


def delta_stats(
    out: Scalars,
    params: list[torch.Tensor],
    g_eff: list[torch.Tensor],
    snap: list[torch.Tensor],
    snap_flat: torch.Tensor | None,
    fused: bool,
) -> None:
    """Δθ's norms and Δθ·g into ``out``, from the snapshot ``snap`` of θ_prev (spent: it is
    overwritten; ``snap_flat``: the one buffer under it, :func:`snapshot_buffers`)."""
    torch._foreach_sub_(snap, params)  # θ_prev - θ = -Δθ (under no_grad)
    out.push("d", tensor_norms(snap, fused))
    out.push("dot", update_grad_dot(snap, snap_flat, g_eff))


def spike_update_stats(
    out: Scalars,
    clip: ClipResult | None,
    ginfo: list[GroupInfo] | None,
    params: list[torch.Tensor],
    g_eff: list[torch.Tensor],
    snap: list[torch.Tensor],
    snap_flat: torch.Tensor | None,
    fused: bool,
) -> None:
    """A pipelined spike's update stats off the schedule, from the snapshot its launch kept:
    Δθ's norms and Δθ·g (the snapshot is spent), and the post-clip gradient norms."""
    delta_stats(out, params, g_eff, snap, snap_flat, fused)
    post = post_clip_norms(clip, ginfo, g_eff)
    out.push("g", post if post is not None else torch._foreach_norm(g_eff))


def update_grad_dot(
    snap: list[torch.Tensor], flat: torch.Tensor | None, g_eff: list[torch.Tensor]
) -> torch.Tensor:
    """0-dim ``Σ (θ_prev - θ)·g`` over every tensor. With a flat buffer: one in-place product
    pass and one sum (the snapshot is spent; it is refilled before the next step); else one
    ``dot`` per tensor, summed (the CPU's arithmetic)."""
    if flat is not None and all(g.dtype == flat.dtype for g in g_eff):
        torch._foreach_mul_(snap, g_eff)
        return flat.sum()
    dots = [
        torch.dot(s.reshape(-1).float(), g.reshape(-1).float())
        for s, g in zip(snap, g_eff, strict=True)
    ]
    return torch.stack(dots).sum()
