"""Shadow buffers: the spike terms of Adam's ``m`` and ``v``, stored lazily as ``c·B``.

Used by the optimizer-state probe (``optstate.py``, whose docstring derives the sums). Per
parameter group, ``m_spike = cm·Bm`` and ``v_spike = cv·Bv``: the per-update decay multiplies the
scalars ``c`` by β, and ``B`` changes only at a spike (``B += (1-β)·g / c``) or a
renormalisation (``B ← c·B``, ``c ← 1``). So the shadow costs two fp32 copies of the parameters
and a few passes per *spike*, not per update.

Reads: ``‖B‖`` is kept as device vectors (:class:`ShadowView`), refreshed at a spike or a
renormalisation and read with the probe's other scalars, so the buffers never sync per update.

Range (issue 11): ``c`` stays 1 until the first spike allocates ``B`` (nothing to decay before
it), and ``B`` is renormalised in the update in which ``c`` drops below ``RENORM_BELOW``.
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping
from typing import Any

import torch

from andrea_diag.device import HostCopy

# Keep c·B inside fp32 range: B grows like 1/c between renormalisations, and ‖B‖² is summed in
# fp32 by the norm kernels, so 1/c must stay far below 1e38 (1e6: B ≤ 1e6·(1-β)·|g|). Each
# renormalisation is one pass over the buffers, about every 130 updates at β1 = 0.9.
RENORM_BELOW = 1e-6


class GroupInfo:
    """One optimizer param group, as the optimizer-state probe sees it: betas, decay, c, ‖B‖²."""

    def __init__(self, group: dict[str, Any], optimizer: torch.optim.Optimizer) -> None:
        betas = group.get("betas", (0.9, 0.999))
        self.beta1, self.beta2 = float(betas[0]), float(betas[1])
        self.wd = float(group.get("weight_decay", 0.0) or 0.0)
        decoupled = bool(group.get("decoupled_weight_decay", False)) or isinstance(
            optimizer, torch.optim.AdamW
        )
        self.l2 = self.wd != 0.0 and not decoupled  # Adam's coupled L2: g += wd·θ
        self.maximize = bool(group.get("maximize", False))
        self.cm = 1.0  # m_spike = cm · Bm for this group's params
        self.cv = 1.0
        self.bm_sq = 0.0  # ‖Bm restricted to this group‖²
        self.bv_sq = 0.0


class ShadowBuffers:
    """``B`` buffers per parameter (keyed by ``id(param)``), allocated at the first spike."""

    def __init__(self) -> None:
        self.bm: dict[int, torch.Tensor] = {}
        self.bv: dict[int, torch.Tensor] = {}
        # per-buffer norms on the device, from the last refresh: (group id per key, ‖Bm‖, ‖Bv‖)
        self._norms: tuple[list[int], torch.Tensor, torch.Tensor, HostCopy | None] | None = None
        self.host_copies = False  # the probe reads its views later (deferred): copy them now

    def __bool__(self) -> bool:
        return bool(self.bm)

    def decay(self, ginfo: list[GroupInfo], gid_of: dict[int, int]) -> None:
        """One applied update: ``c ← β·c``, renormalised as soon as it leaves range."""
        if not self.bm:  # no buffers yet: c stays 1, so the first spike's 1/c is 1
            return
        for info in ginfo:
            info.cm *= info.beta1
            info.cv *= info.beta2
        self._renormalise(ginfo, gid_of)

    def add(
        self,
        params: list[torch.Tensor],
        g_eff: list[torch.Tensor],
        gids: list[int],
        ginfo: list[GroupInfo],
        gid_of: dict[int, int],
    ) -> None:
        """Add a spike's terms ``(1-β)·g`` and ``(1-β)·g²`` (in units of ``c``): per param group
        one multi-tensor op for each buffer kind. Two ops a parameter were about 300 launches
        a spike at 12m, most of the 9 ms of host time a spike took on the H200 while the
        device waited (reports/bench-train/h200-2026-12-03b/); on the CPU a multi-tensor op is
        the same per-tensor arithmetic."""
        by_gid: dict[int, tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]] = {}
        for p, g, gid in zip(params, g_eff, gids, strict=True):
            if id(p) not in self.bm:
                self.bm[id(p)] = torch.zeros_like(p, dtype=torch.float32)
                self.bv[id(p)] = torch.zeros_like(p, dtype=torch.float32)
            bm, bv, gs = by_gid.setdefault(gid, ([], [], []))
            bm.append(self.bm[id(p)])
            bv.append(self.bv[id(p)])
            gs.append(g.float())
        for gid, (bm, bv, gs) in by_gid.items():
            info = ginfo[gid]
            torch._foreach_add_(bm, gs, alpha=(1 - info.beta1) / info.cm)
            torch._foreach_addcmul_(bv, gs, gs, value=(1 - info.beta2) / info.cv)
        self._refresh_norms(ginfo, gid_of)

    def view(self, ginfo: list[GroupInfo], gid_of: dict[int, int]) -> ShadowView | None:
        """This update's ``c`` per group and ``‖B‖`` (device), for :meth:`ShadowView.norms`
        later; None without buffers."""
        if not self.bm:
            return None
        if self._norms is None:  # bound from a checkpoint: norms not computed in this process
            self._refresh_norms(ginfo, gid_of)
        assert self._norms is not None
        return ShadowView([(i.cm, i.cv) for i in ginfo], *self._norms)

    def by_position(self, param_ids: list[int]) -> tuple[list, list]:
        """The buffers in parameter order (ids do not survive a restart; positions do)."""
        return [self.bm.get(i) for i in param_ids], [self.bv.get(i) for i in param_ids]

    def bind(self, params: list[torch.Tensor], by_position: tuple[list, list]) -> None:
        """Attach buffers saved :meth:`by_position` to this process's parameters."""
        bm, bv = by_position
        if len(bm) != len(params) and not any(t is not None for t in [*bm, *bv]):
            bm = bv = [None] * len(params)  # none saved (an older run's list of other length)
        self.bm = {id(p): t for p, t in zip(params, bm, strict=True) if t is not None}
        self.bv = {id(p): t for p, t in zip(params, bv, strict=True) if t is not None}
        self._norms = None

    def clear(self, ginfo: list[GroupInfo], spikes: list[SpikeTerm], update: int) -> None:
        """The optimizer's moments were reset at ``update``: drop every buffer (``c`` back to
        1), and every spike term left with the moments (:meth:`SpikeTerm.forget`)."""
        for sp in spikes:
            sp.forget(update)
        self.bm, self.bv, self._norms = {}, {}, None
        for info in ginfo:
            info.cm = info.cv = 1.0
            info.bm_sq = info.bv_sq = 0.0

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in [*self.bm.values(), *self.bv.values()])

    def _refresh_norms(self, ginfo: list[GroupInfo], gid_of: dict[int, int]) -> None:
        """Per-buffer ``‖B‖`` on the device (no host read: :class:`ShadowView` reads them)."""
        del ginfo
        keys = list(self.bm)
        if not keys:
            self._norms = None
            return
        bm = torch.stack(torch._foreach_norm([self.bm[k] for k in keys])).double()
        bv = torch.stack(torch._foreach_norm([self.bv[k] for k in keys])).double()
        # on their way to the host now: the views of every update until the next refresh share
        # this one copy, so reading them waits for no later work (issue 20)
        copy = HostCopy(torch.cat((bm, bv))) if self.host_copies else None
        self._norms = ([gid_of.get(k, 0) for k in keys], bm, bv, copy)

    def _renormalise(self, ginfo: list[GroupInfo], gid_of: dict[int, int]) -> None:
        if not any(i.cm < RENORM_BELOW or i.cv < RENORM_BELOW for i in ginfo):
            return
        for k in self.bm:
            info = ginfo[gid_of.get(k, 0)]
            if info.cm < RENORM_BELOW:
                self.bm[k].mul_(info.cm)
            if info.cv < RENORM_BELOW:
                self.bv[k].mul_(info.cv)
        for info in ginfo:
            if info.cm < RENORM_BELOW:
                info.cm = 1.0
            if info.cv < RENORM_BELOW:
                info.cv = 1.0
        self._refresh_norms(ginfo, gid_of)


class ShadowView:
    """The shadow at one update: ``c`` per group (host) and ``‖B‖`` per buffer (device)."""

    def __init__(
        self,
        c: list[tuple[float, float]],
        gids: list[int],
        bm: torch.Tensor,
        bv: torch.Tensor,
        copy: HostCopy | None = None,  # ``bm`` then ``bv`` on their way to the host
    ) -> None:
        self.c, self.gids, self.bm, self.bv, self.copy = c, gids, bm, bv, copy

    def norms(
        self, ginfo: list[GroupInfo], bm: list[float], bv: list[float]
    ) -> tuple[float, float]:
        """(‖m_spike‖, ‖v_spike‖) from the host values of :attr:`bm`, :attr:`bv`; also leaves
        each group's ``‖B‖²`` in ``ginfo`` (what a checkpoint stores)."""
        for info in ginfo:
            info.bm_sq = info.bv_sq = 0.0
        for gid, a, b in zip(self.gids, bm, bv, strict=True):
            ginfo[gid].bm_sq += a * a
            ginfo[gid].bv_sq += b * b
        ms = math.sqrt(sum(cm * cm * i.bm_sq for (cm, _), i in zip(self.c, ginfo, strict=True)))
        vs = math.sqrt(sum(cv * cv * i.bv_sq for (_, cv), i in zip(self.c, ginfo, strict=True)))
        return ms, vs


class SpikeTerm:
    """One spike's own term in m and v: bookkeeping for the buffer-free recovery measurement
    (its norm after k updates is (1-β)·β^k·‖g_s‖, no buffer needed)."""

    def __init__(
        self, update: int, am: list[float], av: list[float],
        betas: list[tuple[float, float]] | None = None,
    ) -> None:  # fmt: skip
        self.update = update
        self.am, self.av = am, av  # per group: (1-β1)‖g_s‖, (1-β2)‖g_s²‖
        self.k = 0  # applied updates since the spike
        # scheduled betas (OneCycleLR cycles Adam's β1): the product of the β applied since,
        # per group, where β^k read the current β alone (a recovery of 29 read as censored)
        self.betas0 = list(betas or [])
        self.dm, self.dv = [1.0] * len(am), [1.0] * len(av)
        self.scheduled = False
        self.share_m0: float | None = None
        self.share_v0: float | None = None
        self.share_v_last: float | None = None  # its share of ‖v‖ at the latest update
        self.recovery_m: int | None = None
        self.recovery_v: int | None = None

    def decay(self, betas: list[tuple[float, float]]) -> None:
        """One applied update, whose groups' betas are ``betas``: the term decays by them."""
        self.k += 1
        if not hasattr(self, "dm"):  # a term from an older checkpoint: β^k, as it was read
            return
        self.dm = [d * b1 for d, (b1, _) in zip(self.dm, betas, strict=False)]
        self.dv = [d * b2 for d, (_, b2) in zip(self.dv, betas, strict=False)]
        # compared as tuples: a checkpoint may have made the pairs lists
        moved = any(tuple(b) != tuple(b0) for b, b0 in zip(betas, self.betas0, strict=False))
        self.scheduled = self.scheduled or moved

    def decays(self, betas: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
        """Per group, how far the term has decayed: β^k while the betas held (the same bits as
        ever), else the product of those applied."""
        if getattr(self, "scheduled", False):
            return self.dm, self.dv
        return [b1**self.k for b1, _ in betas], [b2**self.k for _, b2 in betas]

    def forget(self, update: int) -> None:
        """The optimizer's moments were reset: this term is gone; if it had not recovered yet,
        it recovers now."""
        self.am, self.av = [0.0] * len(self.am), [0.0] * len(self.av)
        self.share_v_last = 0.0  # what final_v_share reads: the term holds nothing now
        if self.recovery_m is None:
            self.recovery_m = update - self.update
        if self.recovery_v is None:
            self.recovery_v = update - self.update

    def record(self) -> dict[str, Any]:
        """The summary's per-spike entry (``pollution.per_spike``)."""
        return {
            "share_m0": self.share_m0,
            "share_v0": self.share_v0,
            "recovery_m": self.recovery_m,
            "recovery_v": self.recovery_v,
            "censored_m": self.recovery_m is None,
            "censored_v": self.recovery_v is None,
        }


def final_v_share(
    has_moments: bool | None, shadow: bool, shadow_share: float, spikes: list[SpikeTerm]
) -> dict[str, Any]:
    """The spikes' share of ‖v‖ at the last update (summary ``final_v_share``).

    Exact with the shadow buffers (``shadow_share``: their last ‖v_spike‖/‖v‖). Without them,
    the largest single spike's share: a lower bound, since v's terms are non-negative and the
    norm of their sum is at least that of its largest term (``final_v_share_exact`` False).
    """
    if not has_moments:
        return {"final_v_share": None, "final_v_share_exact": False}
    if shadow:
        return {"final_v_share": shadow_share, "final_v_share_exact": True}
    # a spike restored from an older checkpoint has no share_v_last yet
    shares = [getattr(sp, "share_v_last", None) or 0.0 for sp in spikes]
    return {"final_v_share": max(shares, default=0.0), "final_v_share_exact": False}


def _worst(per: dict[int, dict[str, Any]], key: str) -> tuple[int | None, bool]:
    """The slowest recovery over spikes, and whether any spike is censored (then None)."""
    vals = [r[f"recovery_{key}"] for r in per.values()]
    if not vals:
        return None, False
    if any(v is None for v in vals):
        return None, True
    return max(vals), False


def pollution_summary(probe: Any) -> dict[str, Any]:
    """The optimizer-state probe's summary (``pollution``), from its final state."""
    per = probe.per_spike()
    rec_m, cen_m = _worst(per, "m")
    rec_v, cen_v = _worst(per, "v")
    any_spike = bool(probe.spikes)
    return {
        "optimizer": probe.optimizer_name,
        "has_moments": bool(probe.has_moments),
        "shadow": probe.shadow,
        "n_spikes_tracked": len(probe.spikes),
        # no m, v to read (SGD, Adagrad...): not measured, never a 0 that reads as "no pollution"
        "max_m_share": (probe.max_m_share if any_spike else 0.0) if probe.has_moments else None,
        "max_v_share": (probe.max_v_share if any_spike else 0.0) if probe.has_moments else None,
        # a pollution event: the spikes still hold half of ‖v‖ at the end
        **final_v_share(probe.has_moments, probe.shadow, probe.last_v_share, probe.spikes),
        "recovery_m": rec_m,
        "recovery_v": rec_v,
        "recovery_m_censored": cen_m,
        "recovery_v_censored": cen_v,
        "recovery_m_all": probe.recovery_m_all if probe.shadow else None,
        "recovery_v_all": probe.recovery_v_all if probe.shadow else None,
        "recovery_share": probe.recovery_share,
        "last_update": probe.last_update,
        "per_spike": [{"update": u, **r} for u, r in per.items()],
        "shadow_bytes": probe.shadow_bytes(),
        "snapshot_bytes": sum(t.numel() * t.element_size() for t in probe._snap or []),
    }


def spike_shares(
    probe: Any, update: int, betas: list[tuple[float, float]], m_norm: float, v_norm: float
) -> None:
    """Each unrecovered spike's own share of ‖m‖, ‖v‖ at ``update``: first shares, recovery."""
    for sp in probe.spikes:
        if sp.recovery_m is not None and sp.recovery_v is not None:
            continue
        # not strict: a group added after the spike (add_param_group appends) holds none of it
        dm, dv = sp.decays(betas)
        own_m = math.sqrt(sum((a * d) ** 2 for a, d in zip(sp.am, dm, strict=False)))
        own_v = math.sqrt(sum((a * d) ** 2 for a, d in zip(sp.av, dv, strict=False)))
        sm = own_m / m_norm if m_norm > 0 else None
        sv = own_v / v_norm if v_norm > 0 else None
        sp.share_v_last = sv
        if sp.share_m0 is None:
            sp.share_m0, sp.share_v0 = sm, sv
            if not probe.shadow:
                probe.max_m_share = max(probe.max_m_share, sm or 0.0)
                probe.max_v_share = max(probe.max_v_share, sv or 0.0)
        if sp.recovery_m is None and sm is not None and sm < probe.recovery_share:
            sp.recovery_m = update - sp.update
        if sp.recovery_v is None and sv is not None and sv < probe.recovery_share:
            sp.recovery_v = update - sp.update


def shadow_columns(
    probe: Any,
    update: int,
    row: MutableMapping[str, Any],  # the driver's guarded view of the row
    ginfo: list[GroupInfo],
    m_norm: float,
    v_norm: float,
    view: ShadowView | None,
    view_vals: tuple[list[float], list[float]] | None,
) -> None:
    """The shadow buffers' share columns of one update (a probe with the shadow on)."""
    if view is None or view_vals is None:  # no spike yet, or a reset emptied the buffers
        row["m_spike_share"] = row["v_spike_share"] = probe.last_v_share = 0.0
        return
    ms, vs = view.norms(ginfo, *view_vals)
    sm = ms / m_norm if m_norm > 0 else None
    sv = vs / v_norm if v_norm > 0 else None
    row["m_spike_share"], row["v_spike_share"] = sm, sv
    probe.last_v_share = sv if sv is not None and math.isfinite(sv) else probe.last_v_share
    if sm is not None and math.isfinite(sm):
        probe.max_m_share = max(probe.max_m_share, sm)
        if probe.recovery_m_all is None and sm < probe.recovery_share:
            probe.recovery_m_all = update - (probe._last_spike_update or update)
    if sv is not None and math.isfinite(sv):
        probe.max_v_share = max(probe.max_v_share, sv)
        if probe.recovery_v_all is None and sv < probe.recovery_share:
            probe.recovery_v_all = update - (probe._last_spike_update or update)


def refresh_groups(probe: Any, optimizer: torch.optim.Optimizer) -> list[GroupInfo]:
    """The optimizer-state probe's :class:`GroupInfo` per parameter group, and its map from
    ``id(param)`` to group: made once, then the cheap fields refreshed (betas may be scheduled;
    ``c`` and ``‖B‖`` are kept)."""
    groups = optimizer.param_groups
    if probe._ginfo is None or len(probe._ginfo) > len(groups):
        probe._ginfo, probe._gid_of = [GroupInfo(g, optimizer) for g in groups], {}
    elif len(probe._ginfo) < len(groups):  # add_param_group (a backbone unfrozen mid-run):
        # the earlier groups keep their c and ‖B‖ (their spike terms); the new ones start empty
        probe._ginfo += [GroupInfo(g, optimizer) for g in groups[len(probe._ginfo) :]]
        probe._gid_of = {}
    for info, g in zip(probe._ginfo, groups, strict=True):
        betas = g.get("betas", (info.beta1, info.beta2))
        info.beta1, info.beta2 = float(betas[0]), float(betas[1])
    if not probe._gid_of:  # made, grown, or empty after a resume (rebind made it later before)
        probe._gid_of = {id(p): gi for gi, g in enumerate(groups) for p in g["params"]}
    return probe._ginfo


def rebind(probe: Any, optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> None:
    """After a resume: attach the probe's saved state to this process's parameter objects."""
    del optimizer  # its id -> group map: refresh_groups, which _with_grad runs first
    if getattr(probe, "_pending_shadow", None) is not None:
        probe._shadow.bind(params, probe._pending_shadow)
        probe._pending_shadow = None
