"""``ProbeDriver``: the one place that runs probes, for the trainer and for ``SpikeMonitor``.

    driver = ProbeDriver(probes, recorder)
    ctx = UpdateContext(update=u, model=..., ..., recorder=driver.recorder,
                        phase=batch.phase, boundary=driver.enter_phase(batch.phase))
    driver.after_clip(ctx)      # gradients final, optimizer not stepped
    optimizer.step()
    driver.after_step(ctx)      # parameters and m/v updated, gradients still in .grad
    summary.update(driver.close(run_dir))

What it owns, so no caller restates it:

- **Order.** Probes declare what they exchange through the context: ``writes`` (fields they
  set on ``UpdateContext``, e.g. the spike probe's ``spike``) and ``reads`` (fields they need).
  Writers run before readers in every hook. At close, a probe that reads another's summary
  (``close_reads``, e.g. the spike events' recovery columns read ``pollution``) closes after
  the probe that returns that key (``summary_key``). A cycle is a programming error.
- **Phase boundaries**, detected once (:meth:`ProbeDriver.enter_phase`): the first update whose
  phase differs from the last one. The caller builds the :class:`UpdateContext` from its own
  facts; the boundary is the one field that needs memory of the updates before.
- **Deferred reads** (``defer=True``, the trainer): probes with a ``resolve()`` (layers,
  optstate) keep their per-update scalars on the device and finish their host arithmetic at the
  recorder's flush (``Recorder.before_flush``), so an update needs no host sync of theirs; a
  probe that also has ``resolve_ready()`` finishes, at every pipelined update, those whose own
  host copies have landed (train/pipeline.py). With ``defer=False`` (the monitor) the driver
  resolves at the end of every ``after_step``.
- **Columns.** Each probe declares the metrics columns it writes (``columns``: entries of
  :mod:`andrea_diag.metrics`). During its hooks (and its deferred ``resolve``) a probe sees
  ``ctx.row`` through a guard that refuses any other write: an undeclared column, or one the
  schema gives to the loop, the evaluator or another probe, raises
  :class:`~andrea_diag.metrics.ColumnCollision`, which fails the probe like any error (below),
  and the owner's value is kept. Each name is checked the first time a probe writes it; after
  that a write costs one set lookup.
- **Isolation.** A probe that raises is disabled for the rest of the run: training goes on,
  ``events.jsonl`` gets a ``{"kind": "probe_failure", ...}`` row, stderr gets one line, and the
  summary's ``probe_failures`` says which probe failed, where and why. A probe is a
  measurement; it must never take the run it measures down (issue 11: a shadow-buffer
  overflow ended a whole sweep).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from andrea_diag.metrics import ProbeColumns
from andrea_diag.probes.base import Probe, UpdateContext

if TYPE_CHECKING:
    from andrea_diag.record import Recorder

FAILURE_KIND = "probe_failure"  # the ``kind`` of a failure row in events.jsonl


def probe_name(probe: Probe) -> str:
    return str(getattr(probe, "name", type(probe).__name__))


def _ordered(items: Sequence[Probe], needs: Callable[[Probe, Probe], bool]) -> list[Probe]:
    """Stable topological order: ``b`` before ``a`` whenever ``needs(a, b)``."""
    left, out = list(items), []
    while left:
        ready = next((a for a in left if not any(b is not a and needs(a, b) for b in left)), None)
        if ready is None:
            names = ", ".join(probe_name(p) for p in left)
            raise ValueError(f"probe dependencies form a cycle among: {names}")
        out.append(ready)
        left.remove(ready)
    return out


def _reads_from(a: Probe, b: Probe) -> bool:
    return bool(set(getattr(a, "reads", ())) & set(getattr(b, "writes", ())))


def _closes_after(a: Probe, b: Probe) -> bool:
    return getattr(b, "summary_key", None) in set(getattr(a, "close_reads", ()))


class GuardedRow(MutableMapping[str, Any]):
    """One probe's view of a metrics row: reads pass through, writes must be the probe's own
    (:class:`~andrea_diag.metrics.ProbeColumns`). A probe that keeps the view (the optimizer
    state's deferred columns) stays checked when it writes at the recorder's flush."""

    __slots__ = ("_cols", "_row")

    def __init__(self, row: MutableMapping[str, Any], cols: ProbeColumns) -> None:
        self._row, self._cols = row, cols

    def __getitem__(self, key: str) -> Any:
        return self._row[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self._cols.allowed:  # first write of this name by this probe
            self._cols.check(key)
        self._row[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self._cols.allowed:
            self._cols.check(key)
        del self._row[key]

    def __contains__(self, key: object) -> bool:
        return key in self._row

    def __iter__(self) -> Iterator[str]:
        return iter(self._row)

    def __len__(self) -> int:
        return len(self._row)

    def get(self, key: str, default: Any = None) -> Any:
        return self._row.get(key, default)

    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        items = dict(other, **kwargs)
        allowed = self._cols.allowed
        for key in items:  # every name checked, in the write's order, before any is written
            if key not in allowed:
                self._cols.check(key)
        self._row.update(items)


class ProbeDriver:
    """Runs a list of probes in dependency order, isolating each one's failures."""

    def __init__(
        self,
        probes: Sequence[Probe],
        recorder: Recorder,
        warn: Callable[[str], None] | None = None,
        *,
        defer: bool = False,
    ) -> None:
        self.probes = _ordered(probes, _reads_from)
        self.recorder = recorder
        # deferring needs a flush to resolve at; a recorder without the hook resolves per update
        self.defer = defer and hasattr(recorder, "before_flush")
        for probe in self.probes:
            if hasattr(probe, "defer_reads"):
                probe.defer_reads = self.defer
        if self.defer:
            recorder.before_flush.append(self.resolve)
        self._columns = {
            id(p): ProbeColumns(probe_name(p), getattr(p, "columns", ())) for p in self.probes
        }
        self.failures: list[dict[str, Any]] = []
        self._failed: set[int] = set()  # id() of disabled probes
        self._warn = warn or (lambda line: print(line, file=sys.stderr))
        self.prev_phase: int | None = None
        self.summary: dict[str, Any] | None = None
        # bench-train: per-probe (start, end) marks of every hook call, when asked (time_hooks)
        self._marks: dict[str, list[tuple[Any, Any]]] | None = None
        self._cuda_marks = False

    # -- per update ------------------------------------------------------------------------
    def enter_phase(self, phase: int | None) -> bool:
        """Note this update's phase; True when it starts a new one (the first update whose phase
        differs from the last one seen). ``None``: the loop has no phases (never a boundary).

        Call it once per update, before building the :class:`UpdateContext`: the caller holds
        the update's facts and builds the context itself; the boundary (``ctx.boundary``) is the
        one field that needs the updates before, and this driver keeps that memory."""
        boundary = phase is not None and self.prev_phase is not None and phase != self.prev_phase
        if phase is not None:
            self.prev_phase = phase
        return boundary

    def after_clip(self, ctx: UpdateContext) -> None:
        self._run("after_clip", ctx)

    def after_step(self, ctx: UpdateContext) -> None:
        self._run("after_step", ctx)
        if not self.defer:
            self.resolve()

    def launch(self, hook: str, ctx: UpdateContext) -> None:
        """The pipelined update's device work (``train/pipeline.py``): ``launch_<hook>`` of each
        probe that has one, before the update's values are read; isolated like a hook."""
        self._run("launch_" + hook, ctx)

    def pipeline_refusal(self) -> str | None:
        """Why these probes cannot run pipelined (None: they can). A probe can when its hooks
        need no gradient once the update's values are known (``pipeline_safe``, True or a
        reason): its device work on the gradients runs in ``launch_<hook>``."""
        for probe in self.probes:
            safe = getattr(probe, "pipeline_safe", f"{probe_name(probe)} does not say it can")
            if safe is not True:
                return str(safe)
        return None

    def resolve(self, ready_only: bool = False) -> None:
        """Finish every probe's deferred device reads (one host sync per probe that has any;
        none for values already on their way to the host). ``ready_only``: only those whose
        copies have landed, no wait (the pipelined update, every update), of the probes that
        can say so (``resolve_ready``)."""
        hook = "resolve_ready" if ready_only else "resolve"
        for probe in self.probes:
            if id(probe) in self._failed or not hasattr(probe, hook):
                continue
            try:
                getattr(probe, hook)()
            except Exception as exc:  # isolated like a hook
                self._fail(probe, "resolve", None, exc)

    def _run(self, hook: str, ctx: UpdateContext) -> None:
        row = ctx.row  # the caller's row; each probe sees it through its own guard
        try:
            for probe in self.probes:
                if id(probe) in self._failed or not hasattr(probe, hook):  # launch_: optional
                    continue
                start = self._mark() if self._marks is not None else None
                ctx.row = GuardedRow(row, self._columns[id(probe)])
                try:
                    getattr(probe, hook)(ctx)
                except Exception as exc:  # any probe error is isolated, by design
                    self._fail(probe, hook, ctx.update, exc)
                if self._marks is not None:
                    self._marks.setdefault(probe_name(probe), []).append((start, self._mark()))
        finally:
            ctx.row = row

    # -- hook timing (bench-train) ------------------------------------------------------------
    def time_hooks(self, device: torch.device) -> None:
        """From now on, time every probe's hooks: CUDA events on a GPU (no sync per hook; the
        stream's time between them), ``perf_counter`` on the CPU. Restarts the tally."""
        self._cuda_marks = device.type == "cuda"
        self._marks = {}

    def _mark(self) -> Any:
        if self._cuda_marks:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def hook_ms(self) -> dict[str, float]:
        """Milliseconds each probe's hooks took since :meth:`time_hooks`, summed (syncs)."""
        if self._cuda_marks:
            torch.cuda.synchronize()  # host sync: the events must have completed
            return {n: sum(a.elapsed_time(b) for a, b in m) for n, m in (self._marks or {}).items()}
        return {n: 1e3 * sum(b - a for a, b in m) for n, m in (self._marks or {}).items()}

    def _fail(self, probe: Probe, hook: str, update: int | None, exc: Exception) -> None:
        self._failed.add(id(probe))
        row = {
            "kind": FAILURE_KIND,
            "probe": probe_name(probe),
            "hook": hook,
            "update": update,
            "error": f"{type(exc).__name__}: {exc}",
        }
        self.failures.append(row)
        with contextlib.suppress(Exception):  # a full disk must not turn a warning into a crash
            self.recorder.event(row)
        where = f"at update {update}" if update is not None else "at close"
        self._warn(
            f"andrea-diag: probe {row['probe']} failed {where} in {hook} ({row['error']}); "
            "disabled for the rest of the run, training continues"
        )

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The driver's own state (the probes' windows and buffers are their own)."""
        return {"prev_phase": self.prev_phase, "failures": [dict(f) for f in self.failures]}

    def probe_states(self) -> dict[str, Any]:
        """Every probe's own state (windows, buffers, samples), by probe name."""
        self.resolve()
        return {probe_name(p): p.state_dict() for p in self.probes if hasattr(p, "state_dict")}

    def load_probe_states(self, states: Mapping[str, Any]) -> None:
        for p in self.probes:
            if probe_name(p) in states and hasattr(p, "load_state_dict"):
                p.load_state_dict(states[probe_name(p)])

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.prev_phase = state["prev_phase"]
        self.failures = [dict(f) for f in state["failures"]]
        failed = {f["probe"] for f in self.failures}
        self._failed = {id(p) for p in self.probes if probe_name(p) in failed}

    # -- end of run ------------------------------------------------------------------------
    def close(self, run_dir: Path) -> dict[str, Any]:
        """Every probe's summary fields (dependency order), plus ``probe_failures``. Idempotent.

        A probe disabled during the run still closes: its summary then covers the updates
        before it failed, and ``probe_failures`` says from when.
        """
        if self.summary is not None:
            return self.summary
        self.resolve()
        summary: dict[str, Any] = {}
        for probe in _ordered(self.probes, _closes_after):
            try:
                summary.update(probe.close(run_dir, summary))
            except Exception as exc:
                if id(probe) not in self._failed:
                    self._fail(probe, "close", None, exc)
                else:  # already reported; closing a broken probe may break again
                    first = next(f for f in self.failures if f["probe"] == probe_name(probe))
                    first.setdefault("close_error", f"{type(exc).__name__}: {exc}")
        summary["probe_failures"] = list(self.failures)
        self.summary = summary
        return summary
