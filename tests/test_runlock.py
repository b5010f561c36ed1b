"""One writer per run directory: ``run.lock`` refuses a second live writer, a dead writer's lock
is taken over, and ``lock_state`` tells a running run from a killed one.

python -m pytest -q tests/test_runlock.py
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from andrea_diag.errors import UserError
from andrea_diag.runlock import LOCK_NAME, RunLock, lock_state, read_lock


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write_lock(run_dir: Path, pid: int, host: str | None = None) -> None:
    """A lock file as another process would have written it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = {
        "pid": pid,
        "host": host or socket.gethostname(),
        "started": "2025-01-02T03:04:05+00:00",
    }
    (run_dir / LOCK_NAME).write_text(json.dumps(lock))


def test_acquire_writes_pid_host_and_start_and_release_removes_it(tmp_path: Path) -> None:
    lock = RunLock(tmp_path / "run").acquire()
    data = json.loads((tmp_path / "run" / LOCK_NAME).read_text())
    assert data["pid"] == os.getpid() and data["host"] == socket.gethostname()
    assert data["started"].startswith("20")
    assert lock.took_over_from is None
    assert lock_state(tmp_path / "run") == "running"
    lock.release()
    assert not (tmp_path / "run" / LOCK_NAME).exists()
    assert lock_state(tmp_path / "run") == "free"
    assert [p.name for p in (tmp_path / "run").iterdir()] == []  # no temp file left behind


def test_context_manager_releases_even_when_the_body_raises(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), RunLock(tmp_path):
        assert (tmp_path / LOCK_NAME).exists()
        raise RuntimeError("boom")
    assert not (tmp_path / LOCK_NAME).exists()


def test_live_process_on_this_host_blocks_a_second_writer_with_one_line(tmp_path: Path) -> None:
    _write_lock(tmp_path, os.getppid())  # our parent: alive, and not us
    with pytest.raises(UserError) as e:
        RunLock(tmp_path).acquire()
    msg = e.value.message
    assert (
        msg == f"{tmp_path} is in use by process {os.getppid()} (started 2025-01-02T03:04:05+00:00)"
    )
    assert "\n" not in msg and e.value.hint
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getppid()  # untouched


def test_a_lock_held_in_another_process_blocks_until_it_is_released(tmp_path: Path) -> None:
    """The real thing: a child process holds the lock until we close its stdin."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from andrea_diag.runlock import RunLock\n"
            f"with RunLock({str(tmp_path)!r}):\n"
            "    print('locked', flush=True); sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        assert lock_state(tmp_path) == "running"
        with pytest.raises(UserError, match=f"in use by process {child.pid}"):
            RunLock(tmp_path).acquire()
    finally:
        child.communicate(input="")  # closes stdin: the child leaves its with-block
    assert child.returncode == 0
    assert lock_state(tmp_path) == "free"
    with RunLock(tmp_path) as lock:
        assert lock.took_over_from is None


def test_dead_process_lock_is_taken_over_and_reported(tmp_path: Path) -> None:
    dead = _dead_pid()
    _write_lock(tmp_path, dead)
    assert lock_state(tmp_path) == "killed"
    lock = RunLock(tmp_path).acquire()
    assert lock.took_over_from == dead
    info = read_lock(tmp_path)
    assert info is not None and info.pid == os.getpid()
    lock.release()
    assert lock_state(tmp_path) == "free"


@pytest.mark.parametrize("content", ["", "{not json", '{"host": "x"}', '{"pid": "12"}', "[1]"])
def test_corrupt_lock_reads_as_killed_and_is_taken_over(tmp_path: Path, content: str) -> None:
    (tmp_path / LOCK_NAME).write_text(content)
    assert lock_state(tmp_path) == "killed"
    with RunLock(tmp_path) as lock:
        assert lock.took_over_from is None  # no pid to name
        assert read_lock(tmp_path).pid == os.getpid()


def test_our_own_stale_lock_is_reacquired_without_error(tmp_path: Path) -> None:
    _write_lock(tmp_path, os.getpid())
    with RunLock(tmp_path) as lock:
        assert lock.took_over_from is None
    assert lock_state(tmp_path) == "free"


def test_lock_from_another_host_counts_as_held(tmp_path: Path) -> None:
    """os.kill cannot see another host's processes: refuse rather than guess."""
    _write_lock(tmp_path, _dead_pid(), host="some-other-host.invalid")
    assert lock_state(tmp_path) == "running"
    with pytest.raises(UserError, match=re.escape("on host some-other-host.invalid")) as e:
        RunLock(tmp_path).acquire()
    assert str(tmp_path / LOCK_NAME) in (e.value.hint or "")


def test_release_never_removes_another_process_lock(tmp_path: Path) -> None:
    lock = RunLock(tmp_path).acquire()
    _write_lock(tmp_path, os.getppid())  # someone replaced it (took it over from us)
    lock.release()
    assert read_lock(tmp_path).pid == os.getppid()


def test_acquire_creates_the_run_directory(tmp_path: Path) -> None:
    with RunLock(tmp_path / "a" / "b"):
        assert (tmp_path / "a" / "b" / LOCK_NAME).exists()
