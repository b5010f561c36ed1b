"""SIGTERM and SIGHUP stop a run the way Ctrl-C does: rows flushed, a partial summary written,
the locks released, one line, and the shell's exit code for the signal (143, 129).

    with stop_on_signals():          # the command wrapper (commands/errors.py) does this
        run()                        # a signal raises Terminated here, in the main thread

Slurm, Kubernetes and ``timeout`` stop a job with SIGTERM; a closed terminal sends SIGHUP.
Python's default for both is to die on the spot, like kill -9: nothing flushed, no
``partial_summary.json``, the lock left behind. Raising a :class:`BaseException` in the main
thread instead unwinds the same ``except BaseException`` / ``finally`` paths as
``KeyboardInterrupt`` (the trainer's crash path, the locks' context managers). A second signal
while that cleanup runs is ignored, so the cleanup itself is never cut short.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


class Terminated(BaseException):
    """The process was asked to stop by ``signum``; ``exit_code`` is the shell's 128 + signum."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _Handler:
    def __init__(self) -> None:
        self.fired = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self.fired:  # already unwinding: let the cleanup finish
            return
        self.fired = True
        raise Terminated(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread; the
    previous handlers come back afterwards. Outside the main thread (signals can only be
    handled there) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = _Handler()
    previous: dict[int, Any] = {}
    for sig in SIGNALS:
        previous[sig] = signal.getsignal(sig)
        if previous[sig] == signal.SIG_IGN:  # nohup: the user asked for SIGHUP to be ignored
            continue
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


@contextlib.contextmanager
def before_any_output() -> Iterator[None]:
    """A stop in the block (Ctrl-C, or a signal :func:`stop_on_signals` turned into
    :class:`Terminated`) is marked ``nothing_written``: the command's stop line then says so,
    instead of advising ``--resume`` of a folder that was never made (a stop while the data
    was prepared)."""
    try:
        yield
    except (KeyboardInterrupt, Terminated) as e:
        e.nothing_written = True  # type: ignore[union-attr]
        raise
