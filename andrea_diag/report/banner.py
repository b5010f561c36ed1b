"""Where and why each arm of a report stopped: the banner at the top of an unfinished run's page.

    from andrea_diag.report.banner import arm_status, banner_html
    st = arm_status(Path("out/global"), "global")
    st.line()  # "global: stopped at update 17 of 40 — killed (no summary, lock left by ...)"
    banner_html([st])  # "" when every arm finished

An arm's state comes from the files it left, in this order of evidence:

- ``summary.json``: the run finished (``close()`` writes it last);
- ``partial_summary.json`` with ``status: crashed``: the trainer caught an exception;
- ``run.lock`` (:mod:`andrea_diag.runlock`): held by a live process, the arm is still running;
  left by a dead one, the process was killed (SIGKILL, OOM killer, a lost node);
- none of these: it stopped without a trace: killed, or still running under a version that
  wrote no lock (the report cannot tell which, and says so);
- no directory, or no metric row: it never started (a cascade lists its arms in cascade.json).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from andrea_diag.errors import UserError
from andrea_diag.fields import MAX_UPDATES
from andrea_diag.record import read_jsonl
from andrea_diag.report.safe import esc
from andrea_diag.rundir import read_json
from andrea_diag.runlock import LOCK_NAME, LockInfo, holder_alive, read_lock
from andrea_diag.runread import clean_table, read_parquet

FINISHED = "finished"
CRASHED = "crashed"
RUNNING = "running"
KILLED = "killed"
STOPPED = "stopped"  # no summary, no lock: killed or still running, nothing tells which
NEVER_STARTED = "never started"

CSS = """
.banner{border:2px solid #c2410c;background:#fff7ed;color:#431407;padding:10px 16px;
border-radius:6px;margin:12px 0 20px 0} .banner strong{color:#9a3412}
.banner ul{margin:6px 0} .banner li{margin:2px 0}
"""


@dataclass
class ArmStatus:
    """One arm's end state, as far as its files tell."""

    name: str
    state: str
    last_update: int | None = None  # the last metrics row's update; None without rows
    steps: int | None = None  # updates the run was configured for (config.json ``steps``)
    detail: str = ""  # the why: error, pid, what is missing
    probe_failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.state == FINISHED

    def line(self) -> str:
        """One sentence for the banner (plain text; the caller escapes it)."""
        of = f" of {self.steps}" if self.steps else ""
        at = f"update {self.last_update}{of}"
        if self.state == NEVER_STARTED:
            text = f"{self.name}: never started"
        elif self.state == FINISHED:  # a summary beside an empty table: no update to name
            where = f"at {at}" if self.last_update is not None else "with no metric row recorded"
            text = f"{self.name}: finished {where}"
        elif self.state == RUNNING:
            where = "no update recorded yet" if self.last_update is None else f"at {at} so far"
            text = f"{self.name}: {where} — still running"
        else:
            where = "before its first update" if self.last_update is None else f"at {at}"
            text = f"{self.name}: stopped {where}"
            if self.state != STOPPED:  # "stopped at ... — stopped" says nothing twice
                text += f" — {self.state}"
        if self.detail:
            text += f" ({self.detail})"
        if self.probe_failures:
            text += "; probe failures: " + ", ".join(_failure(f) for f in self.probe_failures)
        return text


def _failure(f: dict[str, Any]) -> str:
    """'pollution at update 5 in after_step (ValueError: x)'."""
    where = f"update {f['update']}" if f.get("update") is not None else "close"
    return f"{f.get('probe', '?')} at {where} in {f.get('hook', '?')} ({f.get('error', '?')})"


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object, or None when absent or unreadable (the banner must never crash)."""
    if not path.exists():
        return None
    try:
        return read_json(path, path.name, kind=dict)  # regular files only: a FIFO never ends
    except UserError:
        return None


def read_metrics(run_dir: Path) -> pd.DataFrame:
    """The metric rows as :func:`andrea_diag.record.load_run` reads them (parquet, else JSONL)."""
    parquet = run_dir / "metrics.parquet"
    try:
        if parquet.exists():
            return clean_table(read_parquet(parquet), "metrics", parquet)
        path = run_dir / "metrics.jsonl"
        return clean_table(read_jsonl(path), "metrics", path)
    except UserError:
        return pd.DataFrame()  # the banner says what it can; load_run says what is damaged


def _last_update(metrics: pd.DataFrame) -> int | None:
    """The last recorded update (the row count when rows lack an ``update`` column)."""
    if metrics.empty:
        return None
    if "update" in metrics:
        last = pd.to_numeric(metrics["update"], errors="coerce").max()
        if last == last:  # not NaN
            return int(last)
    return len(metrics)


def _steps(run_dir: Path) -> int | None:
    """The updates the run was started for, from config.json (None when unknown)."""
    steps = (_read_json(run_dir / "config.json") or {}).get("steps")
    # untrusted: Infinity and 10**400 (int() and isfinite() raise), NaN, true (a bool is an
    # int) are no count
    if isinstance(steps, bool) or not isinstance(steps, (int, float)):
        return None
    if isinstance(steps, float) and not math.isfinite(steps):
        return None
    return int(steps) if 0 < steps <= MAX_UPDATES else None


def _lock(run_dir: Path) -> LockInfo | None:
    """The run's lock; one that is not a regular file (a FIFO would never end) is corrupt."""
    path = run_dir / LOCK_NAME
    if (path.exists() or path.is_symlink()) and not path.is_file():
        return LockInfo(None, None, None)
    return read_lock(run_dir)


def arm_status(run_dir: Path, name: str, metrics: pd.DataFrame | None = None) -> ArmStatus:
    """The state of the run in ``run_dir``; ``metrics``: its rows when already loaded."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return ArmStatus(name, NEVER_STARTED, detail="no run directory")
    if metrics is None:
        metrics = read_metrics(run_dir)
    st = ArmStatus(name, STOPPED, last_update=_last_update(metrics), steps=_steps(run_dir))
    partial = _read_json(run_dir / "partial_summary.json")
    if (run_dir / "summary.json").exists():
        st.state = FINISHED
    elif partial is not None and partial.get("status") == "crashed":
        st.state = CRASHED
        st.detail = str(partial.get("error") or "error not recorded; see the run's output")
        failures = partial.get("probe_failures")  # untrusted: only the objects in a list
        st.probe_failures = (
            [f for f in failures if isinstance(f, dict)] if isinstance(failures, list) else []
        )
    else:
        lock = _lock(run_dir)
        if lock is not None and holder_alive(lock):
            st.state = RUNNING
            host = "" if lock.on_this_host else f" on host {lock.host}"
            st.detail = f"process {lock.pid}{host}"
        elif lock is not None:
            st.state = KILLED
            who = f"dead process {lock.pid}" if lock.pid is not None else "a corrupt lock file"
            st.detail = f"no summary, lock left by {who}"
        elif st.last_update is None:
            st.state = NEVER_STARTED
            st.detail = "no metric rows"
        else:
            st.detail = "killed or still running; no lock to tell which"
    return st


def banner_html(statuses: list[ArmStatus], run_status: str | None = None) -> str:
    """The banner's HTML, or ``""`` when every arm finished and the run says it is done.

    ``run_status``: the cascade's own ``status`` (cascade.json), shown when it is not "done".
    """
    unfinished = [s for s in statuses if not s.finished]
    odd_status = run_status is not None and run_status != "done"
    if not unfinished and not odd_status:
        return ""
    if unfinished:
        lead = "This run did not finish. The plots and findings below cover the updates "
        lead += "recorded so far."
    else:
        lead = "Every arm finished, but the run did not record its own end."
    if odd_status:
        lead += f" cascade.json status: {run_status}."
    items = "\n".join(f"<li>{esc(s.line())}</li>" for s in statuses)
    return (
        "<div class='banner' id='run-status' role='status'>\n"
        f"<strong>{esc(lead)}</strong>\n<ul>\n{items}\n</ul>\n</div>"
    )
