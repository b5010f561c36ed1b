"""The cell processes of one sweep invocation, so that a stopped sweep can stop them and wait.

Each cell runs as its own process group (``start_new_session``): SIGTERM to the group reaches the
cell and anything it started. Once :meth:`CellProcesses.stop_all` has run, no new cell starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from typing import Any


class CellProcesses:
    """The cell processes running now, so that a stopped sweep can stop them and wait."""

    GRACE_S = 120.0  # a cell's flush + partial summary; after this it is killed

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()
        self.stopping = threading.Event()  # set: no new cell starts

    def run(self, cmd: list[str], env: dict[str, str], log: Any) -> int | None:
        """Run one cell to its end; None if the sweep was stopping before it could start."""
        with self._lock:
            if self.stopping.is_set():
                return None
            # its own process group: the signal reaches the cell and anything it started
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
            self._procs.add(proc)
        try:
            return proc.wait()
        finally:
            with self._lock:
                self._procs.discard(proc)

    def stop_all(self) -> None:
        """SIGTERM to every running cell's group, then wait (SIGKILL after ``GRACE_S``)."""
        with self._lock:
            self.stopping.set()
            procs = list(self._procs)
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.GRACE_S
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
