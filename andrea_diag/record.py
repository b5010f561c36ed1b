"""The run directory: a self-describing, crash-safe record of one training arm.

Layout (every file is plain JSON/JSONL or parquet, readable without this package)::

    RUN_DIR/
      config.json      resolved RunConfig (+ model/recipe/effective batch)
      env.json         torch, CUDA, GPU, python, platform, git commit, andrea-diag version
      data.json        sources: origin, generated?, bytes, tokens, sha256; tokenizer hash
      metrics.jsonl    one row per optimizer update, appended in batches (``flush_every``)
      metrics.parquet  the same table, written by close()
      eval.csv         the held-out evaluations alone (update + eval_* columns), by close():
                       small enough to publish where the per-update rows are left out
      events.jsonl     spike events (one row per spike), written by the probes
      samples.jsonl    lock-in samples and their metrics
      summary.json     per-run summary and verdicts, written by close()
      framework.jsonl  what HF's Trainer / Lightning logged themselves (callback runs only)
      schedule.json    the bandit schedule and per-update batch hashes (replayed by other arms)

Crash contract. Metric rows are buffered and written to ``metrics.jsonl`` in one write every
``flush_every`` rows (N, ``RunConfig.flush_every``, default 50; 1 = a row at a time), and also
at every checkpoint (:meth:`Recorder.positions`), at the end and on the crash path (an
exception: :meth:`Recorder.close`). Between flushes at most N-1 finished rows wait in memory,
so a kill -9 loses at most N-1 finished updates' rows (plus the update in flight); only a kill
landing inside the flush's own write can tear that batch, losing at most N. The write hands the
rows to the kernel; with N > 1 its fsync runs on a worker thread (``jsonl.SyncBehind``: the
host does not wait for the disk), so a power cut can also lose the batch whose fsync had not
ended. A checkpoint waits for it: it never points at rows the disk may not have. A torn last
line is skipped by :func:`read_jsonl` and cut by a resume. Rows may hold 0-dim tensors until
then: they are brought to the host together at the flush (:func:`_jsonable`), not one by one.
Events and samples are rare and still written and fsync'd per row. :func:`load_run` reads
``metrics.jsonl`` when the parquet file is missing.
"""

from __future__ import annotations

import io
import logging
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from andrea_diag.errors import UserError
from andrea_diag.jsonl import JsonlWriter, _jsonable, rows_to_host, write_json  # noqa: F401 - re-exported
from andrea_diag.rundir import atomic_write_bytes, remove_file
from andrea_diag.runlock import RunLock

# the reading side lives in runread.py (validated loaders); these names stay importable here
from andrea_diag.runread import clean_table, load_run, read_cascade_meta, read_jsonl
from andrea_diag.table_width import MAX_TABLE_COLUMNS
from andrea_diag.tables import csv_text

__all__ = ["NullRecorder", "Recorder", "load_run", "read_cascade_meta", "read_jsonl", "write_json"]

log = logging.getLogger("andrea_diag.record")
# Wall-clock measurements: they differ between two runs of the same config (and between a run
# and its resumed copy), so comparisons of runs leave them out.
WALL_CLOCK_COLUMNS = ("time_s", "clip_ms", "unix_time_s")
# When each row was logged (seconds since the Unix epoch): the row's own time for exports
# (TensorBoard's wall_time, MLflow's timestamp), stamped by Recorder.log unless the row has one.
TIME_COLUMN = "unix_time_s"
WALL_CLOCK_SUMMARY = ("wall_s", "clip_ms_median")


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict[str, Any]:
    """What ran: versions, device, commit. Saved as env.json."""
    from andrea_diag import __version__

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "andrea_diag": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": gpu,
        "cpu_threads": torch.get_num_threads(),
        "git_commit": _git_commit(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


class Recorder:
    """Writes one run directory. Used by the training loop and by ``andrea_diag.monitor``.

    ``flush_every``: metric rows per write to ``metrics.jsonl`` (the crash contract above)."""

    def __init__(
        self,
        run_dir: str | Path,
        config: dict[str, Any],
        *,
        resume: bool = False,
        flush_every: int = 1,
    ) -> None:
        if flush_every < 1:
            raise UserError(f"--flush-every must be at least 1, got {flush_every}")
        self.flush_every = flush_every
        self._pending: list[dict[str, Any]] = []  # metric rows not yet in metrics.jsonl
        self._said_wide = False  # the too-wide table's warning, once per run
        self._columns: set[str] = set()  # every metrics key logged so far (its width)
        # called first in every flush: probes that defer device reads fill their columns there
        self.before_flush: list[Callable[[], None]] = []
        self.run_dir = Path(run_dir)
        if self.run_dir.exists() and any(self.run_dir.iterdir()) and not resume:
            raise UserError(
                f"run directory {self.run_dir} already exists and is not empty",
                hint="choose another --out, or delete it first; nothing was overwritten",
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # one writer per run directory: a second process is refused, a dead one's lock taken over
        self._lock = RunLock(self.run_dir).acquire()
        write_json(self.run_dir / "config.json", config)
        write_json(self.run_dir / "env.json", environment())
        # a batch's fsync behind its write (jsonl.SyncBehind): the host does not wait for the disk
        self._metrics = JsonlWriter(self.run_dir / "metrics.jsonl", sync_behind=flush_every > 1)
        self._events = JsonlWriter(self.run_dir / "events.jsonl")
        self._samples = JsonlWriter(self.run_dir / "samples.jsonl")

    def log(self, row: dict[str, Any]) -> None:
        """One metrics row per optimizer update; written once ``flush_every`` rows wait."""
        row.setdefault(TIME_COLUMN, time.time())
        if not self._said_wide and not row.keys() <= self._columns:  # a key first seen
            self._columns.update(row)  # the table's width is every row's keys together
            if len(self._columns) > MAX_TABLE_COLUMNS:
                # said when it happens, not at close: every row is still kept, but report and
                # export refuse a table this wide (table_width), and the user can act now
                self._said_wide = True
                log.warning(
                    "%s: the metrics table has %d columns, past the %s that report and export "
                    "read back; metrics.jsonl keeps every row, but fewer layer groups "
                    "(SpikeMonitor's layer_groups) keep the run readable",
                    self.run_dir, len(self._columns), f"{MAX_TABLE_COLUMNS:,}",
                )  # fmt: skip
        self._pending.append(row)
        if len(self._pending) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Write the waiting metric rows (their tensors reach the host here, all at once)."""
        for hook in self.before_flush:
            hook()
        # let go of the rows before the write: one that fails (a full disk) keeps their bytes
        # in the file's buffer, written with the next batch; sent again, they were doubled
        rows, self._pending = self._pending, []
        self._metrics.write_many(rows)

    def event(self, row: dict[str, Any]) -> None:
        self._events.write(row)

    def sample(self, row: dict[str, Any]) -> None:
        self._samples.write(row)

    def write(self, name: str, obj: Any) -> None:
        """A JSON side file (data.json, schedule.json, summary.json ...)."""
        write_json(self.run_dir / name, obj)

    def positions(self) -> dict[str, int]:
        """Each JSONL table's size now: a checkpoint stores it, a resume rewinds to it. The
        waiting rows are written first, so a checkpoint never points before its own rows."""
        self.flush()
        return {w.path.name: w.position() for w in (self._metrics, self._events, self._samples)}

    def rewind(self, positions: dict[str, int]) -> None:
        """Back to a checkpoint: rows after it are cut, files written only at the end removed."""
        self._pending = []
        for w in (self._metrics, self._events, self._samples):
            w.rewind(int(positions.get(w.path.name, 0)))
        for stale in (
            "metrics.parquet",
            "eval.csv",
            "summary.json",
            "partial_summary.json",
            "schedule.json",
        ):
            remove_file(self.run_dir / stale, "the stale end-of-run file")

    def close(self, summary: dict[str, Any] | None = None) -> None:
        """Flush the JSONL files, write metrics.parquet and summary.json."""
        try:
            self.flush()  # nothing waiting (a second close): no write
        finally:
            for w in (self._metrics, self._events, self._samples):
                w.close()
        try:
            self._write_parquet()
            if summary is not None:
                self.write("summary.json", summary)
        finally:
            # a finished run gives the directory up even when a write failed (a full disk);
            # a crashed one releases after its partial summary (release())
            if summary is not None:
                self._lock.release()

    def _write_parquet(self) -> None:
        """metrics.parquet from metrics.jsonl. A table this host will not read back (past the
        memory free, or wider than any run writes: jsonl_read's bounds) stays as JSONL, said
        in a warning, and the run's summary is still written: the parquet is a copy, and a
        refusal here lost a long run's summary.json."""
        try:
            df = read_jsonl(self.run_dir / "metrics.jsonl")
        except UserError as e:
            log.warning("%s: metrics.parquet not written (%s); metrics.jsonl holds every row",
                        self.run_dir, e)  # fmt: skip
            return
        if len(df):  # to memory, then atomically: a full disk leaves no 0-byte parquet
            buf = io.BytesIO()
            try:
                df.to_parquet(buf, index=False)
            # pyarrow's ArrowInvalid is a ValueError; ArrowNotImplementedError (a cell of
            # {}: a struct of no field) a NotImplementedError
            except (ValueError, TypeError, OverflowError, NotImplementedError):
                # a resumed run's kept rows are the run dir's word: one of the wrong type
                # (an integer past int64) is cleaned as the report cleans it, not fatal
                path = self.run_dir / "metrics.jsonl"
                df, buf = clean_table(df, "metrics", path), io.BytesIO()
                df.to_parquet(buf, index=False)
            atomic_write_bytes(self.run_dir / "metrics.parquet", buf.getvalue())
            _write_eval_table(self.run_dir, df)

    def release(self) -> None:
        """Give the directory up (after ``partial_summary.json``, or when a run stops early)."""
        self._lock.release()


def _write_eval_table(run_dir: Path, df: pd.DataFrame) -> None:
    """``eval.csv``: the rows that carry a held-out evaluation, and only their eval columns."""
    if "eval_loss" not in df:
        return
    cols = ["update", *[c for c in df.columns if c.startswith("eval_")]]
    ev = df.loc[df["eval_loss"].notna(), cols]
    atomic_write_bytes(run_dir / "eval.csv", csv_text(ev).encode())


class NullRecorder:
    """A replica that is not rank 0: the same calls as :class:`Recorder`, nothing written."""

    run_dir = None

    def log(self, row: dict[str, Any]) -> None:
        del row

    def flush(self) -> None:
        pass

    def event(self, row: dict[str, Any]) -> None:
        del row

    def sample(self, row: dict[str, Any]) -> None:
        del row

    def write(self, name: str, obj: Any) -> None:
        del name, obj

    def close(self, summary: dict[str, Any] | None = None) -> None:
        del summary

    def positions(self) -> dict[str, int]:
        return {}

    def release(self) -> None:
        pass

    def rewind(self, positions: dict[str, int]) -> None:
        del positions
