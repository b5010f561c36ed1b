"""Adam-state pollution: how much of ``m`` and ``v`` comes from the spike updates.

Columns (Adam/AdamW; other optimizers get only the update columns):

- ``m_norm``, ``v_norm``: global L2 norms of ``exp_avg`` / ``exp_avg_sq``; per layer
  ``layer_m/<layer>.<kind>``, ``layer_v/<layer>.<kind>`` (one multi-tensor norm for both); every
  ``moment_norms_every`` updates (``--moment-norms-every``: default 10; a direct caller's: 1),
  at spikes, and every update while a spike's recovery is open (optstate_schedule.py), else absent;
- ``update_rms``: RMS of this step's parameter change ``Δθ`` over all elements;
- ``cos_update_grad``: cosine between the update direction ``-Δθ`` and the gradient Adam
  received (+1: a plain SGD step; ~0: Adam's history dominates); both every
  ``update_stats_every`` updates (``ProbeConfig``, ``--update-stats-every``: default 10; a
  direct caller's: 1) and at spikes, else absent;
- ``m_spike_share = ‖m_spike‖/‖m‖``, ``v_spike_share = ‖v_spike‖/‖v‖`` (shadow buffers on; on
  the rows with the norms).

*Why a parameter snapshot for Δθ*: recomputing ``lr·m̂/(√v̂+ε)`` needs five elementwise passes
and knows only Adam; a copy before the step and one subtraction is two, exact for any optimizer
(AdamW's decoupled decay included). Its memory is ``snapshot_bytes``.

**Spike contributions.** With ``m_0 = 0``, Adam's ``m_t = Σ_s (1-β1)·β1^(t-s)·g_s`` and
``v_t = Σ_s (1-β2)·β2^(t-s)·g_s²`` exactly, where ``g_s`` is the gradient Adam received at
applied update ``s`` (post-clip; plus ``wd·θ`` for Adam's coupled L2 decay; AdamW's decoupled
decay does not touch ``m``/``v``). The shadow buffers hold the spike terms of those sums:
``m_spike``, ``v_spike`` decay like the moments every applied update and add the spike's term
at a spike update (``ctx.spike``, decided online by the spike probe). They are stored lazily
as ``c·B`` (``shadow.py``: why, what they cost, ``shadow_bytes``, and how they stay in fp32
range however late the first spike comes).

**Per-spike recovery** needs no buffers: one spike's own contribution has norm
``(1-β1)·β1^k·‖g_s‖`` (``(1-β2)·β2^k·‖g_s²‖`` for ``v``) after ``k`` applied updates, so its
share of ``‖m_t‖`` is exact from two numbers per spike. ``recovery_m`` of a spike is the number
of updates until that share falls below ``RECOVERY_SHARE`` (10%); a spike the run ended on first
is *censored* (recovery ``None``, ``censored`` True). Summary ``recovery_m`` / ``recovery_v``:
the max over spikes, ``None`` when any spike is censored. With the shadow on,
``recovery_m_all`` / ``recovery_v_all`` measure the combined share after the *last* spike.

Betas, weight decay and ``maximize`` are read from ``optimizer.param_groups`` each update.
Exactness assumes every parameter of a group receives a gradient at every applied update.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch

from andrea_diag import metrics
from andrea_diag.device import HostCopy, PinnedStaging
from andrea_diag.optim_state import ParamStates
from andrea_diag.probes.base import UpdateContext
from andrea_diag.probes.layers import GroupIndex
from andrea_diag.probes.optstate_checkpoint import load_probe_state, probe_state
from andrea_diag.probes.optstate_graph import ScalarGraph
from andrea_diag.probes.optstate_reads import (
    DevicePart,
    Pending,
    Scalars,
    at_step,
    capture_grads,
    clipped_in_step,
    delta_stats,
    held_with_grad,
    post_clip_norms,
    push_moment_norms,
    push_spike_norms,
    read_queue,
    ready,
    received_grads,
    snapshot_buffers,
    spike_update_stats,
)
from andrea_diag.probes.optstate_rows import finish_entry
from andrea_diag.probes.optstate_schedule import check_every, last_shadow_share, norms_due
from andrea_diag.probes.shadow import (
    GroupInfo,
    ShadowBuffers,
    SpikeTerm,
    pollution_summary,
    rebind,
    refresh_groups,
)
from andrea_diag.probes.spike_bound import copy_if, launch_flag

RECOVERY_SHARE = 0.1


class OptStateProbe:
    """m/v norms, update RMS and cosine, spike pollution of m and v (see module docstring)."""

    name = "optstate"
    columns: ClassVar[tuple[metrics.Column, ...]] = (
        metrics.UPDATE_RMS, metrics.COS_UPDATE_GRAD, metrics.M_NORM, metrics.V_NORM,
        metrics.LAYER_M, metrics.LAYER_V, metrics.M_SPIKE_SHARE, metrics.V_SPIKE_SHARE,
    )  # fmt: skip
    reads = ("spike",)  # the spike probe's online decision: a shadow buffer must know now
    summary_key = "pollution"

    def __init__(
        self,
        shadow: bool = True,
        per_layer: bool = True,
        update_stats: bool = True,
        recovery_share: float = RECOVERY_SHARE,
        update_stats_every: int = 1,
        groups: Mapping[str, tuple[str, str]] | None = None,  # name -> (layer, kind); None: names
        moment_norms_every: int = 1,
    ) -> None:
        self.shadow, self.per_layer, self.update_stats = shadow, per_layer, update_stats
        self.recovery_share, self.groups = recovery_share, groups
        check_every(update_stats_every=update_stats_every, moment_norms_every=moment_norms_every)
        self.update_stats_every = int(update_stats_every)
        self.moment_norms_every = int(moment_norms_every)  # optstate_schedule.py: why, when
        self._shares_at = 0  # the last update whose row had the norms
        self._moments: list[torch.Tensor] = []  # the latest update's m, v (close: the last's)
        self._groups_idx: dict[tuple[str, ...], GroupIndex] = {}
        self._snap: list[torch.Tensor] | None = None
        self._snap_flat: torch.Tensor | None = None  # one buffer under the views (flat_dot)
        # Δθ·g as one product pass + one sum (CUDA: 2 launches, not one dot per tensor); the CPU
        # keeps the per-tensor dots, the arithmetic tests/test_golden.py pins. None: CUDA only.
        self.flat_dot: bool | None = None
        # the clipper's CUDA norm pass for m, v and Δθ (build_probes: unless --clip-impl
        # reference, which asks for no extension); a direct caller gets torch's _foreach_norm
        self.fused_norms = False
        self._snap_valid = False
        self._g_eff: Any = None  # Captured (optstate_reads.py), from after_clip to after_step
        self._ginfo: list[GroupInfo] | None = None
        self._gid_of: dict[int, int] = {}
        self._shadow = ShadowBuffers()  # B of m_spike = c·B, allocated at the first spike
        self.spikes: list[SpikeTerm] = []
        self.max_m_share = 0.0
        self.max_v_share = 0.0
        self.last_v_share = 0.0  # the shadow's ‖v_spike‖/‖v‖ at the latest update
        self._last_spike_update: int | None = None
        self.recovery_m_all: int | None = None
        self.recovery_v_all: int | None = None
        self.has_moments: bool | None = None
        self.optimizer_name = ""
        self.last_update = 0
        # updates whose scalars are still on the device (resolve() reads them in one copy);
        # the driver sets defer_reads under the trainer, else every update resolves at once
        self._queue: list[Pending] = []
        self.defer_reads = False
        self.graphs: ScalarGraph | None = None  # --cuda-graph: build_probes sets one
        self._launched: DevicePart | None = None  # the pipelined update's device part
        self._pipelined: int | None = None  # the update whose after_clip work is launched
        self._g_kept: list[torch.Tensor] | None = None  # the pipelined update's copy of g
        self._snap_late: int | None = None  # the update whose snapshot waits for its spike
        # copies for a spike only where it may be one: the SpikeProbe whose decision bounds it
        self.spike_source: Any = None  # (build_probes), and the update's flag (spike_bound.py)
        self._maybe: torch.Tensor | None = None
        self._snap_flag: torch.Tensor | None = None  # the flag of a snapshot off its schedule
        self._staging = PinnedStaging()
        self._states = ParamStates()

    def _with_grad(self, ctx: UpdateContext) -> tuple[list[str], list[torch.Tensor]]:
        return held_with_grad(ctx, self._gid_of if self._group_info(ctx.optimizer) else {})

    def _group_info(self, optimizer: torch.optim.Optimizer) -> list[GroupInfo]:
        return refresh_groups(self, optimizer)

    def after_clip(self, ctx: UpdateContext) -> None:
        self.optimizer_name = type(ctx.optimizer).__name__
        if self._pipelined == ctx.update:  # launch_after_clip did it, on this update's grads
            return
        self._snap_late = None
        _, params = self._with_grad(ctx)
        self._rebind(ctx, params)
        # the gradient Adam will receive, captured before the step (coupled L2 needs θ_prev)
        self._g_eff = capture_grads(params, self._group_info(ctx.optimizer), self._gid_of)
        self._step_betas = [(i.beta1, i.beta2) for i in self._ginfo or []]  # what step() reads
        self._snap_valid = False
        if not self.update_stats or not ctx.applied or not params:
            return
        if ctx.update % self.update_stats_every and not ctx.spike:  # off its schedule
            return
        self._take_snapshot(params)

    def _take_snapshot(self, params: list[torch.Tensor]) -> None:
        if (
            self._snap is None
            or len(self._snap) != len(params)
            or any(s.shape != p.shape for s, p in zip(self._snap, params, strict=True))
        ):
            self._snap, self._snap_flat = snapshot_buffers(params, self.flat_dot)
        with torch.no_grad():  # the parameters themselves: no per-tensor .detach() op
            if self._snap_flag is not None:  # off its schedule: for a spike that may come
                copy_if(self._snap, params, self._snap_flag)
            else:
                torch._foreach_copy_(self._snap, params)
        self._snap_valid = True

    @torch.no_grad()
    def after_step(self, ctx: UpdateContext) -> None:
        self.last_update = ctx.update
        launched, self._launched = self._launched, None
        if launched is None or launched.update != ctx.update:  # eager: both parts now
            launched = self._device_part(ctx, bool(ctx.spike and ctx.applied))
        if launched is not None:
            self._host_part(ctx, launched)

    # the host part needs no live gradient: the shadow's spike add and a spike's norms read a
    # copy the launch keeps, and a spike's update stats a snapshot it keeps (train/pipeline.py)
    pipeline_safe = True

    # -- the pipelined update (train/pipeline.py): the device work before the values are read
    def launch_after_clip(self, ctx: UpdateContext) -> None:
        """``after_clip``'s device work, before the update is known to be applied or a spike:
        the snapshot is taken on its schedule either way (a skipped update's Δθ is then 0,
        which gives the eager path's columns), and off it too, kept for a spike's update stats
        (``--update-stats-every N``: a spike is known only after the step has moved θ)."""
        self._launched = None
        due = ctx.update % self.update_stats_every == 0
        self._maybe = launch_flag(self.spike_source, ctx, self._staging)  # None: copy always
        self._snap_flag = None if due else self._maybe
        self.after_clip(dataclasses.replace(ctx, applied=True, spike=not due))
        self._snap_flag = None
        self._snap_late = ctx.update if self._snap_valid and not due else None
        self._pipelined = ctx.update

    @torch.no_grad()
    def launch_after_step(self, ctx: UpdateContext) -> None:
        """``after_step``'s device work with the spike still unknown: the common update's
        scalars, and a copy of the gradient, since by the time a spike is known the next group
        has overwritten it (its norms and its shadow add read the copy).
        :meth:`after_step` does the host part later."""
        self._launched = self._device_part(ctx, None)

    def _device_part(self, ctx: UpdateContext, spike_now: bool | None) -> DevicePart | None:
        """The update's device scalars (``spike_now`` None: not known yet)."""
        names, params = self._with_grad(ctx)
        if not params:
            return None
        self._rebind(ctx, params)
        self._param_ids = [id(p) for p in params]  # the order a checkpoint names buffers by
        got = self._g_eff or capture_grads(params, self._group_info(ctx.optimizer), self._gid_of)
        g_eff, self._g_eff = clipped_in_step(received_grads(got), ctx.optimizer), None
        state = self._states.of(ctx.optimizer, params)  # cached: a tensor's hash is Python
        ms = [None if st is None else st.get("exp_avg") for st in state]
        vs = [None if st is None else st.get("exp_avg_sq") for st in state]
        self.has_moments = all(m is not None for m in ms) and all(v is not None for v in vs)
        self._moments = ms + vs if self.has_moments else []  # type: ignore[operator]
        flat, slots = self._device_scalars(ctx, params, ms, vs, g_eff, spike_now)
        kept = spike_now is None and self.has_moments
        if kept:  # for a spike, if this is one: the next group overwrites g_eff
            kept_like = [(k.shape, k.dtype) for k in self._g_kept or []]
            if kept_like != [(g.shape, g.dtype) for g in g_eff]:
                self._g_kept = [torch.empty_like(g) for g in g_eff]
            # torch's _foreach_norm runs far below a copy's bandwidth: the norms wait for a spike
            if self._maybe is not None:
                copy_if(self._g_kept, g_eff, self._maybe)
            else:
                torch._foreach_copy_(self._g_kept, g_eff)
            g_eff = self._g_kept
        # on its way to the host now, behind this update's work and before the next one's
        copy = HostCopy(flat) if self.defer_reads and flat is not None else None
        maybe = self._maybe if kept else None
        return DevicePart(ctx.update, names, params, g_eff, flat, slots, kept, copy, maybe)

    def _host_part(self, ctx: UpdateContext, launched: DevicePart) -> None:
        """The update's bookkeeping, once its values are known: queued for :meth:`resolve`."""
        _, names, params, g_eff, flat, slots, kept, copy, maybe = launched
        spike_now = bool(ctx.spike and ctx.applied)
        if spike_now and maybe is not None and not bool(maybe):  # host sync, at a spike only
            raise RuntimeError(f"update {ctx.update}: a spike its launch's bound did not flag "
                               "(probes/spike_bound.py), so its copies were not made")  # fmt: skip
        if spike_now and kept:  # the spike's norms, from the launch's copy
            out = Scalars()
            if flat is not None:
                out.adopt(flat, slots)
            if "m" not in out.slots:  # off the norms' schedule: m, v are still this update's
                push_moment_norms(out, self._moments, self.fused_norms)
            if self._snap_late == ctx.update:  # off its schedule: the kept θ_prev, for Δθ
                assert self._snap is not None
                # a spike's update stats off the schedule: the columns of an eager spike
                spike_update_stats(out, ctx.clip, self._ginfo, params, g_eff, self._snap,
                                   self._snap_flat, self.fused_norms)  # fmt: skip
                self._snap_valid = False
            push_spike_norms(out, g_eff)
            flat, slots, copy = out.flat(), out.slots, None
        self._snap_late = None
        ginfo = at_step(self._group_info(ctx.optimizer), vars(self).pop("_step_betas", None))
        self._shadow.host_copies = self.defer_reads  # a deferred view is copied when made
        reset = bool(ctx.clip is not None and ctx.clip.moments_reset) and self.has_moments
        if self.has_moments:  # the buffers change now; the spike terms' bookkeeping at resolve
            if reset:  # SPAM zeroed m, v: their spike terms are gone
                self._shadow.clear(ginfo, [], ctx.update)
            if ctx.applied:
                self._shadow.decay(ginfo, self._gid_of)
        entry = Pending(ctx.update, ctx.row, names, sum(p.numel() for p in params), ctx.applied,
                         spike_now, reset, flat, slots, [(i.beta1, i.beta2) for i in ginfo])  # fmt: skip
        entry.copy, entry.has_moments = copy, bool(self.has_moments)  # this update's own
        if spike_now and self.has_moments:
            # host sync, at a spike only: its terms, and the shadow add, need its norms now
            entry.spike = (params, g_eff, [self._gid_of.get(id(p), 0) for p in params])
            self._queue.append(entry)
            self.resolve()
            return
        if self.shadow and self.has_moments and "m" in slots:  # the rows with the norms
            entry.view = self._shadow.view(ginfo, self._gid_of)
        self._queue.append(entry)
        if not self.defer_reads:
            self.resolve()

    def _device_scalars(
        self,
        ctx: UpdateContext,
        params: list[torch.Tensor],
        ms: list[torch.Tensor | None],
        vs: list[torch.Tensor | None],
        g_eff: list[torch.Tensor],
        spike_now: bool | None,
    ) -> tuple[torch.Tensor | None, dict[str, slice]]:
        """This update's scalars as one float64 device vector (no host read), and their slots.
        ``spike_now`` None (the pipelined update): the common update's."""
        out = Scalars()
        # a snapshot kept for a spike off the schedule (launch_after_clip) is not used here
        due = self._snap_valid and self._snap_late != ctx.update
        snap = self._snap if due else None
        post = post_clip_norms(ctx.clip, self._ginfo, g_eff) if snap is not None else None
        # graphed (one key at a time): the kind most updates are, with their update stats (from
        # the clip's norms) every update or every other, else without them
        sparse = self.update_stats_every > 2 or not self.update_stats
        norms = bool(self.has_moments) and norms_due(self, ctx.update, spike_now)
        common = norms and not spike_now and (snap is None if sparse else post is not None)
        if self.graphs is not None and common:

            def compute() -> tuple[torch.Tensor, dict[str, slice]]:  # what the graph records
                s = self._moments_and_update(Scalars(), ms, vs, params, g_eff, snap, True)
                flat = s.flat()
                assert flat is not None  # m and v: never empty
                return flat, s.slots

            out.adopt(*self.graphs.run((ms, vs, params, g_eff, snap), compute))
        else:
            self._moments_and_update(out, ms, vs, params, g_eff, snap, norms)
        if snap is not None:
            out.push("g", post if post is not None else torch._foreach_norm(g_eff))
            self._snap_valid = False
        if spike_now and self.has_moments:
            push_spike_norms(out, g_eff)
        return out.flat(), out.slots

    def _moments_and_update(
        self, out: Scalars, ms: list, vs: list, params: list, g_eff: list, snap: list | None,
        norms: bool,
    ) -> Scalars:  # fmt: skip
        """(``norms``) ‖m‖, ‖v‖ per tensor, then (``snap``: θ_prev) Δθ's norms and Δθ·g."""
        if norms:
            push_moment_norms(out, ms + vs, self.fused_norms)
        if snap is not None:
            delta_stats(out, params, g_eff, snap, self._snap_flat, self.fused_norms)
        return out

    def resolve_ready(self) -> None:
        """:meth:`resolve` of the first waiting updates whose values have landed (no wait)."""
        self.resolve(ready_only=True)

    def resolve(self, ready_only: bool = False) -> None:
        """Finish the waiting updates' columns and pollution bookkeeping, in update order, from
        their device scalars (the trainer: at the recorder's flush; :func:`read_queue` waits
        for their own copies on CUDA). ``ready_only``: only the first updates whose values are
        on the host already (no wait; the pipelined update, every update)."""
        n = len(self._queue)
        if ready_only:
            n = next((i for i, e in enumerate(self._queue) if not ready(e)), n)
        if not n:
            return
        queue, self._queue = self._queue[:n], self._queue[n:]
        at = read_queue(queue)  # host sync (the CPU, or a value without its own copy)
        for e in queue:
            finish_entry(self, e, at.get(id(e.view)))

    # -- checkpoint (optstate_checkpoint.py: what is kept, by position) ----------------------
    def state_dict(self) -> dict[str, Any]:
        return probe_state(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        load_probe_state(self, state)

    def _rebind(self, ctx: UpdateContext, params: list[torch.Tensor]) -> None:
        rebind(self, ctx.optimizer, params)

    # -- results ---------------------------------------------------------------------------
    def per_spike(self) -> dict[int, dict[str, Any]]:
        """update -> {share_m0, share_v0, recovery_m, recovery_v, censored_m, censored_v}."""
        return {sp.update: sp.record() for sp in self.spikes}

    def shadow_bytes(self) -> int:
        return self._shadow.nbytes()

    def close(self, run_dir: Path, results: Mapping[str, Any] | None = None) -> dict[str, Any]:
        self.resolve()
        if self.shadow and self._moments and self._shares_at != self.last_update:
            last_shadow_share(self)  # the last row had no norms: the summary's is the last's
        return {"pollution": pollution_summary(self)}
