"""When the optimizer-state probe takes ‖m‖ and ‖v‖: on a schedule, and at every update a
spike's share still needs them.

    norms_due(probe, update, spike)   # the launch (spike None: not known yet), and the row

*Why a schedule* (``--moment-norms-every N``, default 10): the norms read ``m`` and ``v`` whole,
two passes over fp32 state of the parameters' size every update. At 120m bf16 on an H200 that
is 0.215 ms an update, most of what the engine costs over a plain loop there
(reports/bench-train/h200-2026-12-03b/).

*Why every update around a spike*: a spike's recovery is the first update at which its own term's
share of ``‖m‖`` (``‖v‖``) falls below the probe's ``recovery_share``, and that share is known
only from each update's norms. So from a spike until every spike's recovery is known (with the
shadow buffers, also their combined share's), the norms are taken every update. The recovery
figures are then those of a run with the norms every update (tests/test_optstate.py); the
shadow's maxima are over the rows with norms. The cost comes back while a spike is open: with
β2 = 0.999, an early spike's share of ``v`` can stay above 10% for hundreds of updates.

*The launch and the row*: the launch decides from the spikes resolved so far. That is a superset
of the updates the row keeps, since a recovery may be found after the next launch. The row keeps
the columns only where :func:`norms_due` holds on the bookkeeping of the updates before it, so
the rows do not depend on when the reads landed.
"""

from __future__ import annotations

from typing import Any

from andrea_diag.probes.optstate_reads import Scalars, l2, push_moment_norms
from andrea_diag.probes.shadow import shadow_columns

# the probe (optstate.py) calls these, so its type is not imported here (a cycle)
OptStateProbe = Any


def check_every(**schedules: int) -> None:
    """A ``ValueError`` for a schedule below 1 (ProbeConfig checks the CLI's; a direct
    caller's is checked here)."""
    for name, every in schedules.items():
        if every < 1:
            raise ValueError(f"{name} must be at least 1, got {every}")


def spikes_open(probe: OptStateProbe) -> bool:
    """Whether a spike's recovery (or, with the shadow on, the combined one) is still unknown."""
    if any(sp.recovery_m is None or sp.recovery_v is None for sp in probe.spikes):
        return True
    # empty buffers (a reset, or a first spike's non-finite gradient) have no share to wait for:
    # their rows leave recovery_*_all as they are, every update or not
    return bool(
        probe.shadow
        and probe._shadow.bm
        and probe._last_spike_update is not None
        and (probe.recovery_m_all is None or probe.recovery_v_all is None)
    )


def norms_due(probe: OptStateProbe, update: int, spike: bool | None) -> bool:
    """Whether ``update`` takes the moments' norms: on the schedule, at a spike, or while a spike
    is open (:func:`spikes_open`). ``spike`` None: not known yet (the pipelined launch); a
    spike found later takes its norms in its host part."""
    return update % probe.moment_norms_every == 0 or bool(spike) or spikes_open(probe)


def last_shadow_share(probe: OptStateProbe) -> None:
    """The shadow's shares at the run's last update, where that update's row had no norms: what
    ``shadow_columns`` would have left there, without the row (``last_v_share``, the summary's
    ``final_v_share``, and the maxima). A host sync, once, at the close. A spike's own
    ``share_v_last`` needs nothing here: it stops moving once the spike has recovered, and the
    norms are taken every update until then."""
    ginfo = probe._ginfo or []
    view = probe._shadow.view(ginfo, probe._gid_of)
    if view is None:  # no spike yet, or a reset emptied the buffers: shares of 0, as a row's
        shadow_columns(probe, probe.last_update, {}, ginfo, 0.0, 0.0, None, None)
        return
    out = Scalars()  # the rows' own arithmetic: one pass over m and v, the sums in Python
    push_moment_norms(out, probe._moments, probe.fused_norms)
    out.push("bm", view.bm)
    out.push("bv", view.bv)
    flat = out.flat()
    assert flat is not None
    vals = flat.tolist()
    m_pt, v_pt, bm, bv = (vals[out.slots[k]] for k in ("m", "v", "bm", "bv"))
    shadow_columns(probe, probe.last_update, {}, ginfo, l2(m_pt), l2(v_pt), view, (bm, bv))
