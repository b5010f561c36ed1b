"""Batched metric flushing and its crash contract (record.py): a kill -9 loses at most
``flush_every - 1`` finished rows, and the rows kept are those of an unkilled run.

python -m pytest -q tests/test_flush.py

The kill test parks a real ``andrea-diag train`` (a subprocess) at a known update: a wrapper
around ``train_arm``'s progress callback prints ``reached U`` after update U's row was handed to
the recorder, then blocks on stdin until the test answers. So when the test sends SIGKILL, the
last finished update is exactly U: no polling race, no sleep.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from parked_child import PARKED_CHILD
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.record import WALL_CLOCK_COLUMNS, Recorder, read_jsonl

STEPS, FLUSH, CKPT = 16, 4, 6
# Flushes: rows 1-4 (the 4th row), 5-6 (checkpoint at 6), 7-10, 11-12 (checkpoint), 13-16.
# Parked at update 9, rows 7, 8, 9 wait in memory: the worst case, FLUSH - 1 rows behind.
KILL_AT = 9
ARGS = ["train", "--size", "tiny", "--device", "cpu", "--steps", str(STEPS),
        "--checkpoint-every", str(CKPT), "--lr", "3e-3", "--inject", "outlier@8"]  # fmt: skip


def _rows(path: Path) -> list[dict]:
    """metrics.jsonl's rows without ``time_s`` (wall clock, the one column runs may differ in)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_COLUMNS} for r in rows]


def _kill_parked(out: Path, at: int, log: Path) -> int:
    """Run ``train`` with --flush-every FLUSH; SIGKILL it parked after update ``at``.
    Returns the last update the child reported, read from its stdout."""
    args = [*ARGS, "--flush-every", str(FLUSH), "--out", str(out)]
    cmd = [sys.executable, "-c", PARKED_CHILD, *args]  # parked_child.py: the CLI, parked
    with open(log, "wb") as err:  # a file, not a pipe: an unread pipe could block the child
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        assert proc.stdin is not None and proc.stdout is not None
        reached = 0
        try:
            while reached < at:
                line = proc.stdout.readline().decode()
                assert line, f"the run ended before update {at}: {log.read_text()[-2000:]}"
                if line.startswith("reached "):
                    reached = int(line.split()[1])
                    if reached < at:
                        proc.stdin.write(b"go\n")
                        proc.stdin.flush()
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    return reached


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The unkilled run, same seed, one row per write (--flush-every 1: the old behaviour)."""
    out = tmp_path_factory.mktemp("ref") / "t"
    cmd = [sys.executable, "-m", "andrea_diag.cli", *ARGS, "--flush-every", "1", "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    return _rows(out / "global" / "metrics.jsonl")


def test_a_killed_run_loses_at_most_flush_every_minus_one_rows_and_resumes_exactly(
    reference: list[dict], tmp_path: Path
) -> None:
    out = tmp_path / "t"
    last = _kill_parked(out, KILL_AT, tmp_path / "stderr.txt")
    assert last == KILL_AT  # the child finished exactly this many updates before the kill
    metrics = out / "global" / "metrics.jsonl"
    kept = _rows(metrics)
    assert len(kept) >= FLUSH  # at least one batch reached the disk before the kill
    assert last - len(kept) <= FLUSH - 1  # the documented bound
    assert len(kept) == CKPT  # exactly: the checkpoint at 6 was the last write
    assert [r["update"] for r in kept] == list(range(1, len(kept) + 1))
    assert kept == reference[: len(kept)]  # value-identical to the unkilled run's rows

    # the killed directory still renders, and resumes to the unkilled run's table
    res = CliRunner().invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "report.html").exists()
    resume = [sys.executable, "-m", "andrea_diag.cli", "train", "--resume", str(out)]
    res = subprocess.run(resume, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert _rows(metrics) == reference
    assert json.loads((out / "global" / "config.json").read_text())["flush_every"] == FLUSH


def test_rows_wait_in_memory_until_flush_every_or_a_checkpoint(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "r", {}, flush_every=3)
    path = tmp_path / "r" / "metrics.jsonl"
    value = torch.tensor(1.1, dtype=torch.float32)  # a 0-dim device scalar, as the trainer logs
    rec.log({"update": 1, "loss": value, "loss_src": math.nan})
    rec.log({"update": 2, "loss": value * 2})
    assert path.read_text() == ""  # two rows wait
    rec.log({"update": 3, "loss": 3.0})
    assert [r["update"] for r in _rows(path)] == [1, 2, 3]
    assert _rows(path)[0]["loss"] == value.item()  # the same float as a per-row .item()
    rec.log({"update": 4, "loss": 4.0})
    positions = rec.positions()  # a checkpoint: the waiting row is written first
    assert positions["metrics.jsonl"] == path.stat().st_size
    assert [r["update"] for r in _rows(path)] == [1, 2, 3, 4]
    rec.log({"update": 5, "loss": 5.0})
    rec.close({"status": "done"})  # the end (and the crash path) writes what waits
    assert read_jsonl(path)["update"].tolist() == [1, 2, 3, 4, 5]


def test_flush_every_below_one_is_one_clear_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, [*ARGS, "--flush-every", "0", "--out", str(tmp_path / "t")])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "--flush-every must be at least 1, got 0" in res.output


def test_a_metrics_batch_reaches_the_file_at_once_and_its_fsync_runs_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    release, synced = threading.Event(), []
    real_fsync = os.fsync

    def slow_disk(fd: int) -> None:  # the disk holds the fsync until the test releases it
        release.wait(timeout=30)
        synced.append(threading.current_thread() is not threading.main_thread())
        real_fsync(fd)

    rec = Recorder(tmp_path / "r", {}, flush_every=2)
    monkeypatch.setattr(os, "fsync", slow_disk)  # after the set-up files' own fsyncs
    path = tmp_path / "r" / "metrics.jsonl"
    rec.log({"update": 1, "loss": 1.0})
    rec.log({"update": 2, "loss": torch.tensor(2.0)})  # the flush: returns with the fsync held
    assert [r["update"] for r in _rows(path)] == [1, 2]  # a killed process would keep both
    assert synced == []  # the fsync has not ended, and the writer did not wait for it
    waiter = threading.Thread(target=lambda: synced.append(rec.positions()))
    waiter.start()
    waiter.join(timeout=0.5)
    assert waiter.is_alive()  # a checkpoint's positions wait for the disk
    release.set()
    waiter.join(timeout=30)
    assert synced[0] is True and synced[-1]["metrics.jsonl"] == path.stat().st_size
    rec.close({"status": "done"})


def test_a_metrics_fsync_that_fails_behind_the_write_is_one_clear_line_at_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from andrea_diag.errors import UserError

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    rec = Recorder(tmp_path / "r", {}, flush_every=2)
    monkeypatch.setattr(os, "fsync", full)
    rec.log({"update": 1, "loss": 1.0})
    rec.log({"update": 2, "loss": 2.0})  # written; its fsync fails on the worker
    with pytest.raises(UserError, match="no space left on the device") as err:
        rec.positions()
    assert "kept in" in (err.value.hint or "")
    monkeypatch.undo()
    rec.close()
    assert [r["update"] for r in _rows(tmp_path / "r" / "metrics.jsonl")] == [1, 2]


def test_flush_every_one_fsyncs_each_row_before_the_write_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    where: list[bool] = []
    real_fsync = os.fsync

    def on_which_thread(fd: int) -> None:
        where.append(threading.current_thread() is threading.main_thread())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", on_which_thread)
    rec = Recorder(tmp_path / "r", {}, flush_every=1)
    n = len(where)  # the set-up files' own fsyncs
    rec.log({"update": 1, "loss": 1.0})
    assert where[n:] == [True]  # 1: every row written and fsync'd as it comes (the CLI's help)
    rec.close()


def test_the_flush_brings_scalars_of_every_dtype_as_their_item(tmp_path: Path) -> None:
    from andrea_diag.jsonl import rows_to_host

    vals = [torch.tensor(1 / 3, dtype=dt) for dt in (torch.float32, torch.bfloat16, torch.float16)]
    rows = [{"update": i, "a": v, "b": v * 3, "n": torch.tensor(7)} for i, v in enumerate(vals)]
    out = rows_to_host(rows)
    for row, host in zip(rows, out, strict=True):
        assert host["a"] == row["a"].item() and host["b"] == row["b"].item()
        assert type(host["a"]) is float and host["n"] is row["n"]  # integers: left to the encoder
