"""A cascade's status in ``cascade.json``, and what a stopped one says on the way out.

    with marks_interruption(out_dir, meta, console):   # cascade.py, around the arms
        run_arms(...)

>>> import json
>>> Status.INTERRUPTED == "interrupted", json.dumps({"status": Status.NOT_RUN})
(True, '{"status": "not run"}')

Every status an experiment writes is a :class:`Status` (a ``str`` enum, so the JSON on disk is
its value and old runs read back the same). A cascade's is one of :data:`STATUSES`: ``running``
while the arms train (also what a kill -9 leaves), ``done`` once every arm finished,
``interrupted`` when Ctrl-C (KeyboardInterrupt) or a SIGTERM/SIGHUP
(:class:`~andrea_diag.signals.Terminated`) stopped it. An interrupted cascade prints one line
with the exact command that continues it; ``--resume`` treats it like a ``running`` one
(finished arms kept, a stopped arm continued from its newest checkpoint). A sweep's
``sweep.json`` adds ``crashed`` and ``partial``, and its table's arms ``crashed`` and ``not run``.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from andrea_diag.record import write_json
from andrea_diag.signals import Terminated


class Status(StrEnum):
    """The ``status`` of cascade.json, sweep.json and a sweep table's arm rows."""

    RUNNING = "running"  # arms training (also what a kill -9 leaves)
    DONE = "done"  # every arm (cell) finished
    INTERRUPTED = "interrupted"  # Ctrl-C or a stop signal: --resume continues it
    CRASHED = "crashed"  # a sweep cell's job failed (sweep.json), or that cell's unfinished arm
    PARTIAL = "partial"  # sweep --merge-only: some cells are still to come
    NOT_RUN = "not run"  # a sweep arm no job has written yet


RUNNING, DONE, INTERRUPTED = Status.RUNNING, Status.DONE, Status.INTERRUPTED
STATUSES = (RUNNING, DONE, INTERRUPTED)  # a cascade's
# commands whose cells resume by running the same command again (sweep.py: finished cells kept)
RERUN_RESUMES = ("sweep", "ladder")


def resume_command(out_dir: Path, command: str) -> str:
    """The command that continues the cascade in ``out_dir``, from how it was started
    (``command``: cascade.json's, ``andrea-diag`` + the process's arguments). A sweep or
    ladder cell resumes by its grid's command run again on the same folder, named with
    ``--out`` when the command did not give one."""
    words = shlex.split(command) if command else []
    sub = words[1] if len(words) > 1 else ""
    if sub in RERUN_RESUMES:  # out_dir is a cell: the grid's folder is its parent
        if any(w == "--out" or w.startswith("--out=") for w in words):
            return command
        # without --out the same command would start a fresh runs/<kind>-<time> folder
        return f"{command} --out {shlex.quote(str(out_dir.parent))}"
    sub = sub if sub in ("cascade", "train") else "cascade"  # the Python API: the CLI's cascade
    return f"andrea-diag {sub} --resume {shlex.quote(str(out_dir))}"


@contextlib.contextmanager
def marks_interruption(
    out_dir: Path, meta: dict[str, Any], console: Console, *, main: bool = True
) -> Iterator[None]:
    """On Ctrl-C or a stop signal inside the block: ``cascade.json`` says ``interrupted`` and
    one line gives the resume command; the interruption then goes on up (exit 130/143/129)."""
    try:
        yield
    except (KeyboardInterrupt, Terminated):
        if main:
            with contextlib.suppress(Exception):  # must never replace the interruption
                write_json(out_dir / "cascade.json", {**meta, "status": INTERRUPTED})
            again = resume_command(out_dir, str(meta.get("command", "")))
            console.print(f"[yellow]interrupted[/]: resume with  {escape(again)}", highlight=False,
                          soft_wrap=True)  # fmt: skip
        raise
