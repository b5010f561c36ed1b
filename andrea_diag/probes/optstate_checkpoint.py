"""The optimizer-state probe's checkpoint: its bookkeeping, with the buffers named by position.

    state = probe_state(probe)          # OptStateProbe.state_dict
    load_probe_state(probe, state)      # OptStateProbe.load_state_dict

Buffers and group ids are keyed by ``id(param)``, which a new process does not share: the state
names parameters by their position in the context's parameter list instead. What is rebuilt
from the run (the per-layer table, the graphs, the queues, the kept copies) is not kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# the probe (optstate.py) calls these, so its type is not imported here (a cycle)
OptStateProbe = Any

TRANSIENT = ("_groups_idx", "_snap", "_snap_flat", "_snap_valid", "_g_eff", "_gid_of",
             "_shadow", "_param_ids", "_queue", "defer_reads", "groups", "graphs",
             "_launched", "_pipelined", "_g_kept", "_snap_late", "spike_source", "_maybe",
             "_snap_flag", "_staging", "_moments", "_states", "_step_betas")  # fmt: skip


def probe_state(probe: OptStateProbe) -> dict[str, Any]:
    """The probe's state for a checkpoint (its waiting updates resolved first: their
    bookkeeping belongs to it)."""
    probe.resolve()
    state = {k: v for k, v in vars(probe).items() if k not in TRANSIENT}
    state["_shadow_by_position"] = probe._shadow.by_position(getattr(probe, "_param_ids", []))
    return state


def load_probe_state(probe: OptStateProbe, state: Mapping[str, Any]) -> None:
    """Restore :func:`probe_state`'s output; the buffers bind to the parameters on first use."""
    vars(probe).update({k: v for k, v in state.items() if k != "_shadow_by_position"})
    probe._pending_shadow = state.get("_shadow_by_position")
    probe._gid_of = {}  # rebuilt from the optimizer on first use
    probe._queue = []
