"""Short findings written from the data of one report (pure functions, no plotting, no I/O).

Each function takes already-loaded tables (see :func:`andrea_diag.record.load_run`) and returns
sentences. The page (html.py) shows them above the charts; the tests call them directly::

    from andrea_diag.report.arms import Arm
    from andrea_diag.report.findings import all_findings
    arms = [Arm.from_run(load_run(d)) for d in run_dirs]
    for line in all_findings(arms):
        print(line)

Findings must also say when something the seeds predict did *not* happen (no lock-in, no
collapse, no spike at the boundaries): the pilots showed the cascade is not automatic.

A run of a user's own loop (``SpikeMonitor``, the Hugging Face and Lightning callbacks: config
``kind: monitor``) has no bandit: the findings about phases, phase boundaries and data sources
are left out for it (:func:`has_bandit`), and it counts as clipped when its updates were
(:func:`is_clipped`), not only when a clip mode says so. The rules shared with training live
with it: the boundary loss change in ``train/summary.py``, collapse in ``probes/verdict.py``.
"""

from __future__ import annotations

import math

import pandas as pd

from andrea_diag.config import SOURCE_NAMES, ProbeConfig
from andrea_diag.probes.verdict import FALLBACK_DIVERGE_NATS as DIVERGE_NATS
from andrea_diag.probes.verdict import recorded_collapse_reason
from andrea_diag.report.arm_comparison import best_arm_finding
from andrea_diag.report.arms import (
    Arm,
    boundaries,
    compared_loss,
    final_loss,
    fmt,
    has_bandit,
    is_clipped,
    is_locked,
)
from andrea_diag.stats import insufficient
from andrea_diag.train.summary import boundary_loss_delta as boundary_delta_of

MAX_LISTED_SPIKES = 10
SAME_NATS = 0.05  # final-loss gaps under this are not called a cost or a benefit
FLAT_NATS = 0.02  # a mean boundary loss change smaller than this is reported as flat


def spike_list(arm: Arm, limit: int = MAX_LISTED_SPIKES) -> str:
    """'unclipped: 3 spikes: update 42 (grad_norm, cause: phase-transition+outlier), ...'."""
    ev = arm.events
    if ev.empty or "update" not in ev:
        return f"{arm.label}: no spikes detected."
    ev = ev.sort_values("update")
    parts = []
    for _, r in ev.head(limit).iterrows():
        cause = r.get("cause")
        if not isinstance(cause, str) or not cause:
            causes = r.get("causes")
            cause = "+".join(causes) if isinstance(causes, list) and causes else "unattributed"
        parts.append(f"update {int(r['update'])} ({r.get('metric', '?')}, cause: {cause})")
    more = f"; and {len(ev) - limit} more" if len(ev) > limit else ""
    noun = "spike" if len(ev) == 1 else "spikes"
    return f"{arm.label}: {len(ev)} {noun}: " + ", ".join(parts) + more + "."


def spike_boundary_finding(arm: Arm, k: int | None = None) -> str:
    """How many spikes fell within k updates after a phase boundary (from the tables, not the
    probe's own attribution, so the two can be checked against each other). ``k``: the run's
    own ``boundary_k`` unless given."""
    k = arm.boundary_k if k is None else k
    bs = boundaries(arm.metrics)
    ev = arm.events
    if ev.empty or "update" not in ev:
        return f"{arm.label}: no spikes, so none at the {len(bs)} phase boundaries."
    out = []
    # base rate: the share of all updates that sit within k after a boundary; spikes placed at
    # random would land there that often, so "near a boundary" means something only above it
    n_updates = len(arm.metrics) or 1
    near_share = sum(
        1 for u in arm.metrics.get("update", []) if any(0 <= int(u) - b <= k for b in bs)
    )
    near_share /= n_updates
    for metric, name in (("grad_norm", "grad-norm"), ("loss", "loss")):
        sel = ev[ev["metric"] == metric] if "metric" in ev else ev.iloc[0:0]
        near = sum(1 for u in sel["update"] if any(0 <= int(u) - b <= k for b in bs))
        out.append(
            f"{len(sel)} {name} spikes, {near} within {k} updates after a phase boundary "
            f"(by chance: {near_share * len(sel):.1f})"
        )
    return f"{arm.label}: " + "; ".join(out) + f" ({len(bs)} boundaries)."


def boundary_loss_delta(
    metrics: pd.DataFrame, k: int = ProbeConfig.boundary_k, column: str = "loss"
) -> tuple[float, int]:
    """(mean change, boundaries measured) of ``column`` over the phase boundaries, by the
    training summary's rule (:func:`andrea_diag.train.summary.boundary_loss_delta`, its one
    owner): the k updates from the boundary on minus the k before, boundaries without k finite
    values on both sides skipped (a skipped non-finite update must not turn the mean into inf)."""
    if metrics.empty or column not in metrics or "update" not in metrics or k < 1:
        return math.nan, 0  # k 0 (a run may take it): no update on either side to compare
    m = metrics.sort_values("update")
    flags = m["update"].isin(boundaries(metrics)).tolist()
    values = pd.to_numeric(m[column], errors="coerce").astype(float).tolist()
    d = boundary_delta_of(values, flags, k=k)
    mean = d["after_minus_before_mean"]
    return (math.nan if mean is None else float(mean)), int(d["n"])


def boundary_loss_finding(arm: Arm, k: int | None = None) -> str:
    k = arm.boundary_k if k is None else k
    delta, n = boundary_loss_delta(arm.metrics, k)
    if n == 0 and k < 1:
        return f"{arm.label}: boundary_k 0 leaves no update to compare; loss change not measured."
    if n == 0:
        return f"{arm.label}: no phase boundary with {k} updates on both sides; loss change not measured."
    # below FLAT_NATS the sign is noise: batches of different sources differ by more than that
    word = "rose" if delta > FLAT_NATS else "fell" if delta < -FLAT_NATS else "was flat"
    # The raw loss also moves because the mix moved (sources differ by nats); the spike
    # probe's mix-adjusted excess (loss_excess) is what the model did worse than usual.
    adj, n_adj = boundary_loss_delta(arm.metrics, k, column="loss_excess")
    extra = f"; mix-adjusted (loss_excess): {adj:+.3f} over {n_adj}" if n_adj else ""
    return (
        f"{arm.label}: mean loss change over the {k} updates after a boundary vs the {k} before: "
        f"{delta:+.3f} over {n} boundaries (loss {word} at the shift){extra}."
    )


def pollution_finding(arm: Arm) -> str:
    poll = arm.summary.get("pollution")
    if not arm.summary:
        return f"{arm.label}: optimizer-state pollution not known (the run did not finish)."
    if not poll or not poll.get("has_moments", True):
        return f"{arm.label}: no optimizer-state pollution measured (no Adam moments)."
    if poll.get("n_spikes_tracked") == 0:  # "peaked at a share of 0 and did not recover" before
        return (f"{arm.label}: no spike reached m and v (none flagged at an applied update), "
                "so there was no pollution to measure.")  # fmt: skip
    parts = []
    for key in ("m", "v"):
        share, rec = poll.get(f"max_{key}_share"), poll.get(f"recovery_{key}")
        if share is None:
            continue
        tail = (
            "did not recover within the run"
            if rec is None
            else f"recovered after {fmt(rec)} updates"
        )
        # m's terms have signs: where the rest of m cancels the spikes' part, ‖m_spike‖ > ‖m‖
        past = " (past 1: the rest of m partly cancelled the spikes' part)" if (
            key == "m" and isinstance(share, (int, float)) and share > 1) else ""  # fmt: skip
        parts.append(f"{key} pollution peaked at a share of {fmt(share)}{past} and {tail}")
    if not parts:
        return f"{arm.label}: pollution summary present but empty."
    cost = poll.get("shadow_bytes") or 0
    how = (
        f" (shadow buffers: {cost / 2**20:.1f} MiB)"
        if poll.get("shadow", True) and cost
        else ""
        if poll.get("shadow", True)
        else " (per spike; shadow buffers off)"
    )
    return f"{arm.label}: " + "; ".join(parts) + how + "."


def injected_finding(arm: Arm) -> str | None:
    """Injected faults and whether the spike detector caught them (None when nothing injected)."""
    m = arm.metrics
    if "injected" not in m:
        return None
    inj = m[m["injected"].notna() & (m["injected"].astype(str) != "")]
    if inj.empty:
        return None
    spike_updates = set(int(u) for u in arm.events["update"]) if "update" in arm.events else set()
    parts = []
    for _, r in inj.iterrows():
        u = int(r["update"])
        caught = [s for s in spike_updates if 0 <= s - u <= 1]
        parts.append(
            f"{r['injected']} at update {u} ({'detected' if caught else 'NOT detected'} as a spike)"
        )
    return f"{arm.label}: injected " + ", ".join(parts) + "."


def clip_cost_findings(arms: list[Arm]) -> list[str]:
    """Clipped minus unclipped final loss for arms that differ only in clipping."""
    out = []

    def key(a: Arm) -> tuple:
        c = a.config
        return tuple(
            str(c.get(k))
            for k in ("size", "lr", "recipe", "seed", "steps", "inject", "mixer", "sources")
        )

    for u in (a for a in arms if not is_clipped(a)):
        for c in (a for a in arms if is_clipped(a) and key(a) == key(u)):
            (lc, what), (lu, _) = compared_loss(c), compared_loss(u)
            d = lc - lu
            if not math.isfinite(d):
                out.append(f"{c.label} vs {u.label}: final losses not both finite; no comparison.")
                continue
            verdict = (
                "under"
                if abs(d) < SAME_NATS
                else "clipping cost"
                if d > 0
                else "clipping helped by"
            )
            out.append(
                f"{c.size} lr {fmt(c.config.get('lr'))}: {what} {fmt(lc)} "
                f"({c.label}) vs {fmt(lu)} ({u.label}), a difference of {d:+.3f} "
                f"({verdict} {abs(d) if abs(d) >= SAME_NATS else SAME_NATS:.3f} nats) in this one "
                f"seed; {insufficient({c.size: 1}, 'a comparison')}."
            )
    if not out:
        out.append(
            "no clipped/unclipped pair with the same size, lr and seed: cost of clipping not measured."
        )
    return out


def source_loss_columns(arm: Arm) -> list[str]:
    """The per-source loss columns, ``loss_<source>``, for the run's own sources (from its
    ``w_<source>`` columns or data.json; the defaults when neither says). Not every ``loss_*``
    column: ``loss_z``, ``loss_scale`` (fp16) and ``loss_excess`` are not sources."""
    cols = arm.metrics.columns
    sources = [c[2:] for c in cols if c.startswith("w_")]
    data = arm.data.get("sources", arm.data) if isinstance(arm.data, dict) else {}
    sources += [str(s) for s in (data if isinstance(data, dict) else {})]
    given = arm.config.get("sources")  # the run sheet's replaced sources: name -> origin
    sources += [str(s) for s in (given if isinstance(given, (dict, list)) else [])]
    # a user's loop has no default sources to assume: only what its run says
    fallback = list(SOURCE_NAMES) if has_bandit(arm) else []
    sources = list(dict.fromkeys(sources)) or fallback
    return [f"loss_{s}" for s in sources if f"loss_{s}" in cols]


def collapse_reason(arm: Arm) -> str | None:
    """Why the run counts as collapsed (None if it did not): a lock-in verdict, a non-finite
    final loss, or a smoothed final loss DIVERGE_NATS above the smoothed minimum (learned, then
    lost it); smoothing is a rolling median over SMOOTH_UPDATES updates.

    A run whose summary carries the verdict's ``collapse`` (probes/verdict.py, where collapse is
    defined) is judged by that alone; the tests below are for runs recorded before it."""
    if arm.metrics.empty and not arm.summary:
        return None  # nothing recorded: not a collapse (expectation_findings says so)
    # the rule is the verdict module's (one owner); the fallback reads per-source smoothed
    # losses of the run's own sources only (not loss_scale, loss_excess, loss_z)
    cols = source_loss_columns(arm) or ["loss"]
    losses = {c: arm.metrics[c].tolist() for c in cols if c in arm.metrics}
    return recorded_collapse_reason(arm.summary.get("lockin") or {}, final_loss(arm), losses)


def collapsed(arm: Arm) -> bool:
    return collapse_reason(arm) is not None


def nonfinite_updates(arm: Arm) -> int:
    """summary.nonfinite_updates, else counted from the metrics (a crashed run has no summary)."""
    v = arm.summary.get("nonfinite_updates")
    if v is not None:
        return int(v)
    m = arm.metrics
    if "nonfinite" in m:
        return int(m["nonfinite"].fillna(False).astype(bool).sum())
    if "grad_norm" in m:
        return int((~m["grad_norm"].astype(float).apply(math.isfinite)).sum())
    return 0


def expectation_findings(arms: list[Arm]) -> list[str]:
    """Say plainly what the seeds predict and whether it appeared."""
    out = []
    locked = [a.label for a in arms if is_locked(a)]
    out.append(f"locked in: {', '.join(locked)}." if locked else "no arm locked in.")
    for a in arms:
        why = collapse_reason(a)
        kind = "clipped" if is_clipped(a) else "unclipped"
        verdict = (a.summary.get("lockin") or {}).get("verdict")
        if a.metrics.empty and not a.summary:
            out.append(f"{a.label}: no loss recorded, so nothing to say about collapse.")
        elif why:
            out.append(f"the {kind} arm {a.label} collapsed ({why}).")
        elif verdict == "never-learned":
            out.append(f"the {kind} arm {a.label} never learned, so it could not collapse.")
        elif not is_clipped(a):
            judged = (
                "collapse" in (a.summary.get("lockin") or {}) and verdict != "insufficient-data"
            )
            basis = (
                f"verdict {verdict}"
                if judged
                else f"no lock-in, smoothed loss finite and within {DIVERGE_NATS:g} nat of its "
                "smoothed minimum"
            )
            out.append(f"the unclipped arm {a.label} did not collapse ({basis}).")
    for a in arms:
        lock = a.summary.get("lockin") or {}
        verdict = lock.get("verdict")
        if verdict and verdict != "healthy":
            # the verdict's own name and numbers: "never-learned" must not read as a lock-in,
            # nor "repetitive-throughout" as healthy (probes/verdict.py defines each)
            why = lock.get("reason") or "; ".join(map(str, lock.get("reasons") or []))
            out.append(f"{a.label}: verdict: {verdict}" + (f" ({why})." if why else "."))
    unfinished = [a.label for a in arms if not a.summary]
    if unfinished:
        out.append(
            f"no summary.json for {', '.join(unfinished)}: the run did not finish "
            "(crashed, killed or still running: the box at the top says which); values come "
            "from the metrics rows written so far."
        )
    nonfin = [(a.label, nonfinite_updates(a)) for a in arms if nonfinite_updates(a) > 0]
    out.append(
        "non-finite updates (skipped): " + ", ".join(f"{lab} {n}" for lab, n in nonfin) + "."
        if nonfin
        else "no arm had a non-finite update."
    )
    return out


def data_finding(arms: list[Arm]) -> str:
    """Which sources are generated (synthetic) and which are real text: the report must say so."""
    gen, real, ids = set(), set(), set()
    for a in arms:
        for name, src in (a.data.get("sources", a.data) or {}).items():
            if isinstance(src, dict) and "generated" in src:
                kind = ids if src.get("kind") == "token-ids" else real  # data/token_ids.py
                (gen if src["generated"] else kind).add(name)
    if not gen and not real and not ids:
        return "data sources: unknown (no data.json) — cannot tell generated from real data."
    parts = []
    if gen:
        parts.append(f"GENERATED (synthetic) sources: {', '.join(sorted(gen))}")
    if real:
        parts.append(f"real-text sources: {', '.join(sorted(real))}")
    if ids:
        parts.append(f"token-id sources (their own vocabulary): {', '.join(sorted(ids))}")
    return "; ".join(parts) + "."


def probe_failure_findings(arms: list[Arm]) -> list[str]:
    """A probe that raised was disabled mid-run: the reader must know its columns stop there."""
    out = []
    for a in arms:
        failures = a.summary.get("probe_failures") or a.probe_failures
        for f in [f for f in failures if isinstance(f, dict)]:
            where = f"at update {f['update']}" if f.get("update") is not None else "at close"
            out.append(
                f"{a.label}: WARNING: probe {f.get('probe')} failed {where} in {f.get('hook')} "
                f"({f.get('error')}) and was disabled; training went on, but its columns and "
                "summary cover only the updates before that."
            )
    return out


def all_findings(arms: list[Arm]) -> list[str]:
    """Every finding for the page, in reading order (the bandit's only for runs that have one)."""
    bandit = [a for a in arms if has_bandit(a)]
    out = [data_finding(bandit)] if bandit else []
    out += probe_failure_findings(arms)
    for a in arms:
        if has_bandit(a):
            out.append(spike_boundary_finding(a))
        out.append(spike_list(a))
        inj = injected_finding(a)
        if inj:
            out.append(inj)
        if has_bandit(a):
            out.append(boundary_loss_finding(a))
        out.append(pollution_finding(a))
    out += clip_cost_findings(arms)
    best = best_arm_finding(arms)
    if best:
        out.append(best)
    out += expectation_findings(arms)
    return out
