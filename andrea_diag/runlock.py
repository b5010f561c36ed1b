"""One writer per run directory: a ``run.lock`` file naming the process that writes it.

    from andrea_diag.runlock import RunLock, lock_state
    with RunLock(run_dir) as lock:        # UserError if a live process holds run_dir
        if lock.took_over_from:           # a dead process left its lock behind
            print(f"taking over from dead process {lock.took_over_from}")
        ...                               # write the run
    lock_state(run_dir)                   # "running" | "killed" | "free"

The lock is a small JSON file ``{"pid", "host", "started"}``. It is *advisory*: it stops a
second ``andrea-diag`` from appending to a directory a first one still writes (two writers would
interleave metrics rows), and it lets the report tell a killed run (lock left by a dead
process) from one still running (lock held by a live process). A process killed with SIGKILL
cannot remove its lock; the next writer sees the pid is gone and takes the lock over.

Liveness is checked with ``os.kill(pid, 0)``, which only means something on the host that
wrote the lock: a lock from another host (a shared filesystem) is treated as held, and the
error says how to clear it by hand. A dead pid reused by an unrelated process reads as alive;
the error names the pid and the start time so a user can see that and delete the file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from andrea_diag.errors import UserError
from andrea_diag.rundir import atomic_write_bytes, file_mode
from andrea_diag.surrogates import mended

LOCK_NAME = "run.lock"
MAX_LOCK_BYTES = 4096  # a lock is one short JSON line
# a pid is a C int (pid_t; Linux's pid_max is at most 2**22): os.kill of a larger one raises
# OverflowError, so a lock naming one is corrupt, not a process to ask after
MAX_PID = 2**31 - 1


@dataclass(frozen=True)
class LockInfo:
    """What a lock file says; ``pid`` is None when the file is unreadable or corrupt."""

    pid: int | None
    host: str | None
    started: str | None

    @property
    def on_this_host(self) -> bool:
        return self.host is None or self.host == socket.gethostname()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists on this host (signal 0 sends nothing)."""
    if not 0 < pid <= MAX_PID:
        return False  # 0 and negatives address process groups; past pid_t, no process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it just belongs to another user
    except OSError:
        return False
    return True


def _read_small(path: Path) -> str:
    """A lock file's text. A link, a FIFO or a device is never read through (it could point
    out of the run or hang): OSError; so is a file too big to be a lock."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        raw = os.read(fd, MAX_LOCK_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_LOCK_BYTES:
        raise OSError(errno.EFBIG, "too big for a lock")
    return raw.decode("utf-8")


def read_lock(run_dir: str | Path) -> LockInfo | None:
    """The lock of ``run_dir``: None when there is none, ``pid=None`` when it is corrupt (or a
    link, a FIFO, anything but a small regular file)."""
    path = Path(run_dir) / LOCK_NAME
    try:
        raw = _read_small(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return LockInfo(None, None, None)
    try:
        data = mended(json.loads(raw), raw)  # a host of "\ud800" is named in lines and pages
        pid = data["pid"]
        if not isinstance(pid, int) or isinstance(pid, bool) or abs(pid) > MAX_PID:
            raise TypeError(pid)
    except (json.JSONDecodeError, KeyError, TypeError, RecursionError):
        return LockInfo(None, None, None)
    host, started = data.get("host"), data.get("started")
    return LockInfo(pid, str(host) if host else None, str(started) if started else None)


def holder_alive(info: LockInfo | None) -> bool:
    """Whether the lock's process may still be writing (locks from other hosts count as live)."""
    if info is None or info.pid is None:
        return False
    if not info.on_this_host:
        return True  # os.kill cannot see another host's processes: assume the worst
    return pid_alive(info.pid)


def lock_state(run_dir: str | Path) -> str:
    """``"running"`` (held by a live process), ``"killed"`` (left by a dead process, or
    corrupt), or ``"free"`` (no lock)."""
    info = read_lock(run_dir)
    if info is None:
        return "free"
    return "running" if holder_alive(info) else "killed"


def _create_exclusive(path: Path, payload: bytes) -> None:
    """Create ``path`` holding ``payload``; FileExistsError if it exists.

    The content is written to a private temp file first and hard-linked into place: link, like
    O_CREAT|O_EXCL, fails when the name exists, and a reader can never see the lock empty (an
    empty lock would read as corrupt and be taken over). Filesystems without hard links get
    O_CREAT|O_EXCL and a write straight after.
    """
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)  # a fresh name (O_EXCL): never a link planted in the run dir
    try:
        os.fchmod(fd, file_mode())  # others may read a lock (the report does)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.link(tmp, path)
        return
    except FileExistsError:
        raise
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(payload)


def _replace(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` atomically (temp file + rename: a link is replaced)."""
    atomic_write_bytes(path, payload)


class RunLock:
    """The lock of one run directory; see the module docstring.

    ``took_over_from``: after :meth:`acquire`, the pid of a dead process whose lock was replaced
    (None when the directory was free, or the lock was corrupt and named no pid).
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.took_over_from: int | None = None
        self.held = False
        self._mine: dict[str, Any] = {}

    def acquire(self) -> RunLock:
        """Take the lock; raises :class:`UserError` when a live process holds it."""
        if self.held:
            return self
        self._mine = {"pid": os.getpid(), "host": socket.gethostname(), "started": _now()}
        payload = (json.dumps(self._mine) + "\n").encode()
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            try:
                _create_exclusive(self.path, payload)
            except FileExistsError:
                self._take_over(payload)
        except OSError as e:  # a read-only run dir, a full disk: one line, nothing taken
            why = "no space left on the device" if e.errno == errno.ENOSPC else e.strerror
            raise UserError(
                f"cannot take the lock {self.path} ({why})",
                hint="the run dir must be writable to run or resume in it",
            ) from None
        self.held = True
        return self

    def _take_over(self, payload: bytes) -> None:
        """Replace a lock whose process is gone (or our own, or a corrupt one)."""
        info = read_lock(self.run_dir)
        if info is None:  # released between our create and our read: try once more
            try:
                _create_exclusive(self.path, payload)
                return
            except FileExistsError:
                info = read_lock(self.run_dir)
        ours = info is not None and info.pid == os.getpid() and info.on_this_host
        if info is not None and not ours and holder_alive(info):
            raise self._in_use(info)
        _replace(self.path, payload)
        # Two processes taking over the same stale lock at once both replace it; the last
        # rename wins. Reading it back makes the loser notice in all but a tiny window.
        now = read_lock(self.run_dir)
        if now is None or now.pid != os.getpid():
            raise self._in_use(now or LockInfo(None, None, None))
        if info is not None and not ours:
            self.took_over_from = info.pid

    def _in_use(self, info: LockInfo) -> UserError:
        """The one-line error for a lock held by another live process."""
        where = "" if info.on_this_host else f" on host {info.host}"
        return UserError(
            f"{self.run_dir} is in use by process {info.pid}{where} "
            f"(started {info.started or 'at an unknown time'})",
            hint=(
                "wait for it to finish, or choose another --out; if that process is gone "
                f"(another host, or a reused pid), delete {self.path}"
            ),
        )

    def release(self) -> None:
        """Remove the lock file if it is still ours (never another process's lock)."""
        if not self.held:
            return
        self.held = False
        info = read_lock(self.run_dir)
        if (
            info is not None
            and info.pid == self._mine["pid"]
            and info.started == self._mine["started"]
        ):
            with contextlib.suppress(OSError):  # gone already, or the dir turned read-only
                self.path.unlink()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()
