"""The report's view of one run: the :class:`Arm` record and the numbers every page shows.

``findings.py`` writes sentences from these, ``figures.py`` and ``probe_figures.py`` draw them,
``html.py`` fills the summary table with :func:`summary_row`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from andrea_diag.config import ProbeConfig
from andrea_diag.fields import MAX_UPDATES
from andrea_diag.metrics import CLIPPED_BELOW
from andrea_diag.probes.lockin import judge_tables
from andrea_diag.probes.verdict import LOCKED_VERDICTS  # the verdicts are defined there only


@dataclass
class Arm:
    """One run directory, labelled for the report (label is unique within a report)."""

    label: str
    arm: str
    size: str
    config: dict[str, Any]
    summary: dict[str, Any]
    metrics: pd.DataFrame
    events: pd.DataFrame
    samples: pd.DataFrame
    data: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    dir: str = ""
    probe_failures: list[dict[str, Any]] = field(default_factory=list)
    summary_note: str = ""  # summary.json disagreed with the run's table (summary_check.py)

    @classmethod
    def from_run(cls, run: dict[str, Any], label: str | None = None) -> Arm:
        """Build from the dict :func:`andrea_diag.record.load_run` returns."""
        config = run.get("config") or {}
        arm = str(config.get("arm") or config.get("clip") or run["dir"].name)
        metrics = run.get("metrics") if run.get("metrics") is not None else pd.DataFrame()
        samples = run.get("samples") if run.get("samples") is not None else pd.DataFrame()
        return cls(
            label=label or arm,
            arm=arm,
            size=str(config.get("size", "?")),
            config=config,
            summary=rejudged(run.get("summary") or {}, config, metrics, samples),
            metrics=metrics,
            events=run.get("events") if run.get("events") is not None else pd.DataFrame(),
            samples=samples,
            data=run.get("data") or {},
            env=run.get("env") or {},
            dir=str(run["dir"]),
            probe_failures=list(run.get("probe_failures") or []),
            summary_note=str(run.get("summary_mismatch") or ""),
        )

    @property
    def boundary_k(self) -> int:
        """The run's own phase-transition window: what its spike probe attributed with."""
        thresholds = (self.summary.get("spikes") or {}).get("thresholds") or {}
        probes = self.config.get("probes") or {}
        for value in (thresholds.get("boundary_k"), probes.get("boundary_k"),
                      self.config.get("boundary_k")):  # fmt: skip
            # the last: run directories from before ProbeConfig. Typed by runread, not bounded:
            # a window of -5 updates, which no run takes, read "-5 updates after a boundary"
            if value is not None and 0 <= value <= MAX_UPDATES:
                return int(value)
        return ProbeConfig.boundary_k

    @property
    def clipped(self) -> bool:
        return str(self.config.get("clip", "none")) != "none"


def has_bandit(arm: Arm) -> bool:
    """Whether the run is one of the toolkit's own arms (a bandit of sources and phases), not a
    user's loop: ``SpikeMonitor`` and the framework callbacks write ``kind: monitor``."""
    return arm.config.get("kind") != "monitor" and "framework" not in arm.config


def is_clipped(arm: Arm) -> bool:
    """The toolkit's arm: its clip mode. A user's loop: a clip mode or max_norm recorded (the
    framework's ``max_grad_norm`` / ``gradient_clip_val`` > 0), or any update's ``clip_coef``
    below 1 (``SpikeMonitor`` under ``clip_grad_norm_`` records no clip mode)."""
    if arm.clipped or has_bandit(arm):
        return arm.clipped
    settings = arm.config.get("framework_settings") or {}
    for key in ("max_grad_norm", "gradient_clip_val"):
        v = settings.get(key) if isinstance(settings, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf:
            return True
    if "clip_coef" not in arm.metrics:
        return False
    return bool((pd.to_numeric(arm.metrics["clip_coef"], errors="coerce") < CLIPPED_BELOW).any())


def rejudged(
    summary: dict[str, Any], config: dict[str, Any], metrics: pd.DataFrame, samples: pd.DataFrame
) -> dict[str, Any]:
    """The summary with ``lockin`` judged again by today's verdict code from the run's tables
    (the stored verdict is kept as ``lockin_recorded``): old run directories are re-read, and
    one recorded before the held-out distribution columns gets ``insufficient-data`` with the
    missing evidence named, never the verdict of the code that wrote it."""
    if not summary or metrics.empty or "loss" not in metrics:
        return summary  # unfinished (no summary) or never logged: the page says so
    stored = summary.get("lockin") or {}
    vocab = (config.get("model_config") or {}).get("vocab_size")
    if not vocab or vocab < 2:  # config.json's type is checked (runread.py), not its range
        return summary  # a foreign model of unknown vocabulary: keep what its run recorded
    unigram = stored.get("unigram_entropy")
    fresh = judge_tables(metrics, samples, int(vocab), unigram)
    # the sampling facts belong to the run, not to the verdict: keep them
    keep = {k: stored[k] for k in ("n_sample_events", "sample_updates", "every", "n_new")
            if k in stored}  # fmt: skip
    out = {**summary, "lockin": {**fresh, **keep, "rejudged": True}}
    if stored:
        out["lockin_recorded"] = stored
    return out


def fmt(x: Any, digits: int = 3) -> str:
    """A compact number: 3 significant digits, '-' for missing."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return f"{x:.{digits}g}"
    return str(x)


def boundaries(metrics: pd.DataFrame) -> list[int]:
    """Updates that start a new bandit phase (update 1 excluded: it is the start, not a shift)."""
    if metrics.empty or "boundary" not in metrics or "update" not in metrics:
        return []
    b = metrics.loc[metrics["boundary"].fillna(False).astype(bool), "update"]
    return [int(u) for u in b if int(u) > 1]


def final_loss(arm: Arm) -> float:
    """summary.final_loss, else the last loss in the metrics table (NaN if none)."""
    v = arm.summary.get("final_loss")
    if v is not None:
        return float(v)
    if "loss" in arm.metrics and len(arm.metrics):
        return float(arm.metrics["loss"].iloc[-1])
    return math.nan


def compared_loss(arm: Arm) -> tuple[float, str]:
    """The loss arms are compared on, and its name: the held-out loss at the run's last
    evaluation when the run has one, else (older runs) the final training loss."""
    v = arm.summary.get("final_eval_loss")
    if v is None and "eval_loss" in arm.metrics:
        ev = arm.metrics["eval_loss"].dropna()
        v = float(ev.iloc[-1]) if len(ev) else None
    if v is not None:
        return float(v), "held-out loss"
    return final_loss(arm), "final training loss"


def summary_row(arm: Arm) -> dict[str, Any]:
    """The summary-table values of one arm; falls back to the metrics when summary.json lacks them."""
    s, m = arm.summary, arm.metrics
    spikes = s.get("spikes") or {}
    poll = s.get("pollution") or {}
    lock = s.get("lockin") or {}
    max_gn = s.get("max_grad_norm")
    if max_gn is None and "grad_norm" in m and len(m):
        max_gn = float(m["grad_norm"].max())
    pct = s.get("pct_clipped")
    if pct is None and "clip_coef" in m and len(m):
        pct = float((m["clip_coef"] < CLIPPED_BELOW).mean() * 100.0)
    n_spikes = spikes.get("n_spikes", len(arm.events) if not arm.events.empty else 0)
    shares = [poll.get("max_m_share"), poll.get("max_v_share")]
    shares = [float(x) for x in shares if x is not None]
    return {
        "arm": arm.label,
        "final loss": final_loss(arm),
        "spikes": n_spikes,
        "spike score (loss / grad)": (
            f"{fmt(spikes.get('spike_score_loss'))} / {fmt(spikes.get('spike_score_grad'))}"
        ),
        "max grad norm": max_gn,
        "% clipped": pct,
        "max pollution share": max(shares) if shares else None,
        "recovery m / v (updates)": (
            f"{recovery_text(poll, 'm')} / {recovery_text(poll, 'v')}" if poll else "-"
        ),
        "verdict": lock.get("verdict", "-"),  # the run verdict (probes/verdict.py)
    }


def recovery_text(poll: dict[str, Any], key: str) -> str:
    """An arm's recovery of ``m`` or ``v`` (``key``) as a table says it: its updates, "not
    recovered" (a spike the run ended on first), "no spike" (none reached the optimizer-state
    probe: a run without spikes was shown as "not recovered"), "not measured" (no Adam moments).

    >>> [recovery_text(p, "v") for p in ({"recovery_v": 12}, {"n_spikes_tracked": 0},
    ...                                   {"has_moments": False}, {"n_spikes_tracked": 2})]
    ['12', 'no spike', 'not measured', 'not recovered']
    """
    rec = poll.get(f"recovery_{key}")
    if poll.get("has_moments") is False:
        return "not measured"
    if poll.get("n_spikes_tracked") == 0 and rec is None:
        return "no spike"
    return "not recovered" if rec is None else fmt(rec)


def is_locked(arm: Arm) -> bool:
    """The run's verdict is a lock-in (``locked-in``; not ``repetitive-throughout``)."""
    verdict = str((arm.summary.get("lockin") or {}).get("verdict", "")).lower()
    return verdict in LOCKED_VERDICTS
