"""The optimizer-state probe's host part: one update's columns, then its spike bookkeeping.

    finish_entry(probe, entry, view_vals)   # OptStateProbe.resolve, in update order

Runs on the values one host copy brought (``optstate_reads.read_queue``): Python float math,
the same whichever path (eager, deferred to the flush, or the pipelined update) queued the
entry. Kept apart from ``optstate.py`` so the probe's hooks read as device work, and this as
the arithmetic ``tests/test_golden.py`` pins.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from andrea_diag.probes.layers import group_index_for
from andrea_diag.probes.optstate_reads import Pending, l2
from andrea_diag.probes.optstate_schedule import norms_due
from andrea_diag.probes.shadow import GroupInfo, SpikeTerm, shadow_columns, spike_shares

# the probe (optstate.py) calls these, so its type is not imported here (a cycle)
OptStateProbe = Any


def finish_entry(
    probe: OptStateProbe, e: Pending, view_vals: tuple[list[float], list[float]] | None
) -> None:
    """One update's host part: its columns in ``e.row``, then the spike bookkeeping."""
    row = e.row

    def get(key: str) -> list[float]:
        return e.vals[e.slots[key]] if key in e.slots else []

    if "d" in e.slots:
        d, g = get("d"), get("g")
        d_norm, g_norm = l2(d), l2(g)
        row["update_rms"] = d_norm / math.sqrt(max(e.n_elem, 1))
        denom = d_norm * g_norm
        row["cos_update_grad"] = get("dot")[0] / denom if denom > 0 else None
    elif probe.update_stats and not e.applied:
        row["update_rms"] = 0.0
        row["cos_update_grad"] = None
    if not e.has_moments:  # not Adam, or before its first step made m and v: update columns
        return
    # on the bookkeeping of the updates before this one (optstate_schedule.py: the launch took
    # the norms on a superset of these updates, so a late read changes no row)
    norms = norms_due(probe, e.update, e.spike_now)
    if norms and "m" not in e.slots:
        raise RuntimeError(f"update {e.update}: the moments' norms are due but were not taken")
    m_norm = v_norm = 0.0
    if norms:
        m_norm, v_norm = _moment_columns(probe, e, row, get("m"), get("v"))
    ginfo = probe._ginfo or []
    if e.reset:
        for sp in probe.spikes:
            sp.forget(e.update)
    if e.applied:  # every spike term decays by β (the buffers' c decayed at the update)
        for sp in probe.spikes:
            sp.decay(e.betas)
    if e.spike is not None:
        params, g_eff, gids = e.spike
        add_spike(probe, e.update, ginfo, gids, params, g_eff, get("gs"), get("gs4"))
        e.view = probe._shadow.view(ginfo, probe._gid_of) if probe.shadow else None
        if e.view is not None:  # host sync: the spike's own shadow norms (rare)
            both = torch.cat([e.view.bm, e.view.bv]).tolist()
            view_vals = (both[: e.view.bm.numel()], both[e.view.bm.numel() :])
    if not norms:
        return
    probe._shares_at = e.update
    spike_shares(probe, e.update, e.betas, m_norm, v_norm)
    if probe.shadow:
        shadow_columns(probe, e.update, row, ginfo, m_norm, v_norm, e.view, view_vals)


def _moment_columns(
    probe: OptStateProbe, e: Pending, row: Any, m_pt: list[float], v_pt: list[float]
) -> tuple[float, float]:
    """``m_norm``, ``v_norm`` (returned too) and the per-layer ones, into the row."""
    m_norm, v_norm = l2(m_pt), l2(v_pt)
    row["m_norm"], row["v_norm"] = m_norm, v_norm
    if probe.per_layer:
        gi = group_index_for(probe._groups_idx, e.names, probe.groups)
        row.update(gi.columns("layer_m", torch.tensor(m_pt, dtype=torch.float64)))
        row.update(gi.columns("layer_v", torch.tensor(v_pt, dtype=torch.float64)))
    return m_norm, v_norm


def add_spike(
    probe: OptStateProbe,
    update: int,
    ginfo: list[GroupInfo],
    gids: list[int],
    params: list[torch.Tensor],
    g_eff: list[torch.Tensor],
    gs: list[float],
    gs4: list[float],
) -> None:
    """A spike's own terms in m and v (from its norms), and its shadow add (``--shadow``)."""
    n_groups = len(ginfo)
    sq_g, sq_g2 = [0.0] * n_groups, [0.0] * n_groups
    for gid, a, b in zip(gids, gs, gs4, strict=True):
        sq_g[gid] += a * a
        sq_g2[gid] += b**4  # ‖g²‖₂² = Σ g⁴ = ‖g‖₄⁴
    am = [(1 - info.beta1) * math.sqrt(s) for info, s in zip(ginfo, sq_g, strict=True)]
    av = [(1 - info.beta2) * math.sqrt(s) for info, s in zip(ginfo, sq_g2, strict=True)]
    # the spike's term is in m_t already (k = 0 after this update's decay)
    probe.spikes.append(SpikeTerm(update, am, av, [(i.beta1, i.beta2) for i in ginfo]))
    probe._last_spike_update = update
    probe.recovery_m_all = probe.recovery_v_all = None
    if not probe.shadow or not all(math.isfinite(x) for x in gs + gs4):
        return  # a non-finite gradient would poison the buffers for good
    probe._shadow.add(params, g_eff, gids, ginfo, probe._gid_of)
