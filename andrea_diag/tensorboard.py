"""TensorBoard event files from run directories, so andrea-diag runs open beside a user's others.

    andrea-diag export --tensorboard runs/cascade-tiny-*/ --out runs/tb   # one folder per arm
    tensorboard --logdir runs/tb

    SpikeMonitor(model, opt, "runs/mine", tensorboard_dir="runs/tb/mine")  # the same, live

Every numeric metrics column becomes one scalar tag, with step = ``update`` (one row per
optimizer update), through one mapping, :func:`tensorboard_tag`, that the export and the live
writer share, the names andrea_diag.metrics declares: ``loss/…`` (training loss, per source
``loss/source/…``), ``eval/…`` (held-out loss and predictive shape, total and per source),
``grad_norm/…`` (total and per layer), ``clip/…`` (coefficient, post-clip norm, non-finite
flag), ``optstate/…`` (Adam ``m``/``v`` norms, pollution shares, per layer), ``spikes/…``
(z-scores, the spike flag, and each spike event's z and value at its update), ``lockin/…``,
``data/…`` (bandit phase and source weights), ``optim/…``, ``amp/…``, ``progress/…``; a column
that no rule names keeps its own name when it already holds a ``/``, else it goes under
``misc/``. Empty cells (a source not drawn, a probe not run at that update) write nothing; an
infinite value is written as it is. A non-finite update (``nonfinite`` set: a diverged run's
end) keeps its NaN loss and gradient norms (:data:`NAN_MEASURED`) as NaN scalars, which
TensorBoard draws, so the end of a diverged run does not vanish. Each event's wall time is the
row's own ``unix_time_s`` (stamped when the row was recorded); a run older than that column
takes ``env.json``'s start plus the summed ``time_s``. The run's config, spike events and summary are written as
text (``run/config``, ``spikes/events``, ``run/summary``).

The writer: tensorboardX, else torch's ``torch.utils.tensorboard``. Both write the same event
files through the same public API. torch's needs the ``tensorboard`` package (the viewer, with
grpcio, pillow and a data server: 27 MB downloaded and 79 MB installed beyond this project's
own dependencies), tensorboardX only ``protobuf`` (0.4 MB downloaded, 3 MB installed; MIT,
last release 2026-04). So the ``tensorboard`` extra is tensorboardX, the smaller well-kept
writer; whoever already has TensorBoard installed needs nothing more. Measured on a fresh venv:
docs/integrations.md, "TensorBoard export and static figures".
"""

from __future__ import annotations

import functools
import html
import json
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from andrea_diag import metrics
from andrea_diag.errors import UserError, visible
from andrea_diag.optional_deps import broken_install, not_installed
from andrea_diag.rundir import child, descend, make_out_dir, read_json
from andrea_diag.runread import SUMMARY, clean, log

INSTALL_HINT = 'pip install tensorboardX (the "tensorboard" extra; about 3 MB installed)'

STEP_COLUMN = "update"
TIME_COLUMN = "unix_time_s"  # record.TIME_COLUMN (the row's wall time): the event's, not a tag
# On a row flagged ``nonfinite``, NaN in these columns (and ``layer_gn/...``) is what was
# measured, not an empty cell: they are measured at every update, unlike per-source losses.
NAN_MEASURED = ("loss", "grad_norm", "grad_norm_post", "clip_coef")


@functools.lru_cache(maxsize=4096)  # a run has ~100 columns, each looked up every update
def tensorboard_tag(column: str) -> str:
    """The namespaced TensorBoard tag of one metrics column (``grad_norm`` -> ``grad_norm/total``):
    the schema's name (:func:`andrea_diag.metrics.namespaced`); an undeclared column keeps its
    own name when it holds a ``/``, else it goes under ``misc/``."""
    tag = metrics.namespaced(column)
    if tag is not None:
        return tag
    return column if "/" in column else f"misc/{column}"


def scalar_tags(row: Mapping[str, Any]) -> Iterator[tuple[str, float]]:
    """(tag, value) for every numeric, non-empty cell of one metrics row, the step excluded.

    Booleans become 0/1; strings (batch hashes, injection labels) and empty cells are left out.
    """
    for column, value in row.items():
        if column in (STEP_COLUMN, TIME_COLUMN) or value is None or isinstance(value, str):
            continue
        if hasattr(value, "item"):  # numpy / torch scalars
            try:
                value = value.item()
            except (ValueError, RuntimeError):  # an array, not a scalar: not a metric cell
                continue
        if not isinstance(value, (bool, int, float)):
            continue
        value = float(value)
        if math.isnan(value):  # NaN in the table means "not measured at this update"
            continue
        yield tensorboard_tag(column), value


def writer_backend() -> tuple[Any, Any, Any]:
    """(FileWriter, Summary proto, text summary) of tensorboardX, else of torch's writer.

    A UserError naming the extra when neither is installed. The public FileWriter with one
    Summary per metrics row, not SummaryWriter.add_scalar per cell: one event per update, not
    ~100; a 600 x 95 table took 0.4 s instead of 6-10 s (both writers, 2 busy CPU cores).
    """
    try:
        from tensorboardX import FileWriter
        from tensorboardX.proto.summary_pb2 import Summary
        from tensorboardX.summary import text
    except Exception as exc:  # absent: torch's writer; there but broken: said (optional_deps)
        if not not_installed(exc, "tensorboardX"):
            raise broken_install("tensorboardX", exc) from None
        try:  # torch's writer imports the tensorboard package, which the viewer installs
            from tensorboard.compat.proto.summary_pb2 import Summary
            from torch.utils.tensorboard.summary import text
            from torch.utils.tensorboard.writer import FileWriter
        except ImportError:  # torch's own words for an absent or too old tensorboard
            raise UserError(
                "TensorBoard export needs tensorboardX (or the tensorboard package)",
                hint=INSTALL_HINT,
            ) from None
        except Exception as exc2:  # e.g. a protobuf the installed tensorboard cannot use
            raise broken_install("tensorboard", exc2) from None
    return FileWriter, Summary, text


def _is_nan(value: Any) -> bool:
    if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
        value = value.item()  # a live row's 0-dim tensor or numpy scalar
    return isinstance(value, float) and math.isnan(value)


def nan_measured(row: Mapping[str, Any]) -> list[str]:
    """The columns of a non-finite row whose NaN is a measurement (see NAN_MEASURED)."""
    return [
        c
        for c, v in row.items()
        if (c in NAN_MEASURED or c.startswith("layer_gn/")) and (v is None or _is_nan(v))
    ]


# 9999-12-31: no row was recorded later. A damaged table's 1e308 is finite, but not in epoch
# milliseconds (MLflow's): int() of that overflowed and refused the whole export
MAX_WALLTIME = 253402300800.0


def row_walltime(row: Mapping[str, Any]) -> float | None:
    """The row's own time (seconds since the epoch), or None (the writer then uses now)."""
    t = row.get(TIME_COLUMN)
    if hasattr(t, "item"):
        t = t.item()
    if isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t < MAX_WALLTIME:
        return float(t)  # NaN fails the comparison too
    return None


def _code_block(obj: Any) -> str:
    # TensorBoard's text plugin renders markdown: indent by four spaces for a code block
    text = json.dumps(obj, indent=2, default=str)
    return "\n".join("    " + line for line in text.splitlines())


def md_cell(value: Any) -> str:
    """``value`` as one cell of TensorBoard's markdown table: a line break from a run dir ended
    the row (the rest read as rows of its own) and a ``|`` split the cell, so control
    characters are shown as escapes (:func:`~andrea_diag.errors.visible`), ``|`` as ``\\|``,
    and ``<``/``>``/``&`` as entities, so that a tag in an event's cause is shown as text."""
    text = html.escape(visible("" if value is None else str(value)), quote=False)
    return text.replace("|", "\\|")


class TensorBoardRun:
    """One run's event files. ``log`` per metrics row; ``events``, ``summary`` and ``close`` at
    the end. The export and :class:`~andrea_diag.monitor.SpikeMonitor` both write through it."""

    def __init__(self, logdir: str | Path, config: Mapping[str, Any] | None = None) -> None:
        self.logdir = Path(logdir)
        file_writer, self._summary, self._text = writer_backend()
        self._writer = file_writer(str(self.logdir))
        self._last_step = 0
        if config:
            self._writer.add_summary(self._text("run/config", _code_block(config)), 0)

    def _scalars(
        self, pairs: list[tuple[str, float]], step: int, walltime: float | None = None
    ) -> None:
        value = [self._summary.Value(tag=tag, simple_value=v) for tag, v in pairs]
        if value:
            self._writer.add_summary(self._summary(value=value), step, walltime=walltime)

    def log(self, row: Mapping[str, Any]) -> None:
        """One metrics row (one optimizer update): every numeric cell at step = ``update``, at
        the row's own wall time; a non-finite update's NaN loss and norms included."""
        step = int(row[STEP_COLUMN])
        pairs = list(scalar_tags(row))
        if row.get("nonfinite") == 1:  # True, 1 or numpy's True; NaN and None are not
            pairs += [(tensorboard_tag(c), math.nan) for c in nan_measured(row)]
        self._scalars(pairs, step, walltime=row_walltime(row))
        self._last_step = max(self._last_step, step)

    def events(self, events: pd.DataFrame) -> None:
        """Spike events (events.jsonl): z and value at the spike's update, and one text table."""
        if events.empty or "update" not in events:
            return
        lines = ["| update | metric | z | cause |", "|---|---|---|---|"]
        for ev in events.to_dict("records"):
            metric, step = str(ev.get("metric", "value")), int(ev["update"])
            pairs = [
                (f"spikes/event_{key}/{metric}", float(ev[key]))
                for key in ("z", "value")
                if isinstance(ev.get(key), (int, float)) and not math.isnan(ev[key])
            ]
            self._scalars(pairs, step)
            z = ev.get("z")
            z_text = f"{z:.1f}" if isinstance(z, (int, float)) else ""
            cause = ev.get("cause", "")
            lines.append(f"| {step} | {md_cell(metric)} | {z_text} | {md_cell(cause)} |")
        self._writer.add_summary(self._text("spikes/events", "\n".join(lines)), self._last_step)

    def summary(self, summary: Mapping[str, Any] | None) -> None:
        """summary.json (or partial_summary.json) as text at the last update."""
        if summary:
            self._writer.add_summary(
                self._text("run/summary", _code_block(summary)), self._last_step
            )

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()


def with_row_times(metrics: pd.DataFrame, env: Mapping[str, Any] | None) -> pd.DataFrame:
    """The rows with a ``unix_time_s``: their own, else (a run recorded before that column)
    env.json's start plus the summed per-update ``time_s``, else none (the writer's now)."""
    if TIME_COLUMN in metrics or "time_s" not in metrics:
        return metrics
    from datetime import datetime

    try:
        started = datetime.fromisoformat(str((env or {}).get("started"))).timestamp()
    except ValueError:
        return metrics
    spent = pd.to_numeric(metrics["time_s"], errors="coerce").fillna(0.0).cumsum()
    return metrics.assign(**{TIME_COLUMN: started + spent})


def run_summary(run: Path, loaded: Mapping[str, Any]) -> dict[str, Any] | None:
    """summary.json, else (a run that stopped) its checked partial_summary.json, else None."""
    summary = loaded["summary"]
    # lexists: a dangling link or a loop there is read_json's one line, not a summary skipped
    if summary is None and os.path.lexists(run / "partial_summary.json"):
        partial = read_json(run / "partial_summary.json", "partial_summary.json", kind=dict)
        summary = clean(partial, SUMMARY, str(run / "partial_summary.json"))
    return summary


def find_runs(path: Path) -> list[Path]:
    """The run directories under one CLI argument: a run, a cascade (its arms) or a sweep."""
    if not path.exists():
        raise UserError(f"{path} does not exist")
    if (path / "config.json").exists():
        return [path]
    if (path / "cascade.json").exists():
        from andrea_diag.record import read_cascade_meta

        # arm names are checked there to stay inside the cascade (a run dir is untrusted); an
        # arm listed twice is one run, exported once
        arms = [child(path, str(a), "cascade.json: arm")
                for a in dict.fromkeys(read_cascade_meta(path)["arms"])]  # fmt: skip
        # an arm that never started has no config.json; a dangling link or a loop in its place
        # is damage, said by load_run, not an arm left out without a word
        return [a for a in arms if os.path.lexists(a / "config.json")]
    if (path / "sweep.json").exists():  # a cell linked out of the sweep is refused (child)
        cells = [
            child(path, c.parent.name, "sweep cell") for c in sorted(path.glob("*/cascade.json"))
        ]
        return [run for c in cells for run in find_runs(c)]
    raise UserError(
        f"{path} is not a run, cascade or sweep directory (no config.json, cascade.json or "
        "sweep.json)",
        hint="pass a directory written by `train`, `cascade`, `sweep` or SpikeMonitor",
    )


def folder_names(args: list[Path]) -> dict[Path, str]:
    """One TensorBoard folder per run: its path below the argument's parent (``none``,
    ``cascade-x/none``, ``sweep/cell/none``), lengthened by parent folders until unique."""
    runs = [
        (r, r.resolve().relative_to(a.resolve().parent).parts) for a in args for r in find_runs(a)
    ]
    seen: dict[Path, Path] = {}
    for r, _ in runs:  # an arm linked to its sibling is that sibling: the line names both
        first = seen.setdefault(r.resolve(), r)
        if first is not r:
            both = str(r) if first == r else f"{first} and {r}"
            raise UserError(f"the same run directory was given twice: {both}",
                            hint="give each run once; a link in a run dir to another is damage")  # fmt: skip
    full = {r: r.resolve().parts for r, _ in runs}
    extra = 0
    while True:  # ends: distinct resolved paths differ in some suffix
        names = {r: "/".join(full[r][-max(extra, len(rel)) :]) for r, rel in runs}
        if len(set(names.values())) == len(names):
            return names
        extra += 1


def runs_to_export(paths: list[Path]) -> tuple[dict[Path, str], dict[Path, dict[str, Any]]]:
    """Every run under ``paths`` with its folder name (:func:`folder_names`), and those holding
    a metric row, loaded. A run without one (killed before its first row, or every row torn)
    is left out with a warning naming it, so an export of two runs that writes one says so;
    no run at all, or none with a row, is a UserError. Shared by every export's back end."""
    from andrea_diag.record import load_run

    if not paths:
        raise UserError("no run directories given", hint="pass one or more run directories")
    names = folder_names(paths)
    if not names:
        raise UserError(f"no run directory (with a config.json) in {', '.join(map(str, paths))}")
    loaded = {run: load_run(run) for run in names}
    todo = {run: r for run, r in loaded.items() if not r["metrics"].empty}
    if not todo:
        raise UserError("no metric rows in any of these runs: nothing to export")
    for run in (run for run in names if run not in todo):
        log.warning("%s: no metric rows; not exported", run)
    return names, todo


def export_tensorboard(paths: list[Path], out: Path) -> list[tuple[Path, Path]]:
    """Write event files for every run under ``paths`` into ``out/<folder>``; returns (run
    directory, event folder) pairs. Runs without a metric row are left out (:func:`runs_to_export`);
    a folder that already holds event files is a UserError."""
    names, todo = runs_to_export(paths)
    # --out may hold someone's folders: a link planted at any depth is refused, up front
    targets = {run: descend(out, names[run], "--out: folder") for run in todo}
    for target in targets.values():
        if target.is_dir() and any(target.glob("events.out.tfevents.*")):
            raise UserError(
                f"{target} already holds TensorBoard event files",
                hint="delete it or choose another --out; nothing was written",
            )
    writer_backend()  # a missing writer is one line, before any folder is made
    # every folder made and proven writable before the first event file: a file in the place
    # of the third run's folder must not leave the first two exported and the rest not
    for target in targets.values():
        make_out_dir(target, "the TensorBoard folder")
    written = []
    for run, r in todo.items():
        tb = TensorBoardRun(targets[run], r["config"])
        for row in with_row_times(r["metrics"], r["env"]).to_dict("records"):
            tb.log(row)
        tb.events(r["events"])
        tb.summary(run_summary(run, r))
        tb.close()
        written.append((run, targets[run]))
    return written
