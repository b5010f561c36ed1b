"""CUDA MPS for many cells per GPU: one control daemon for the length of one sweep or ladder.

    with mps_session("auto", cuda=True, jobs=8, console=console) as state:
        ...  # cell processes started here inherit CUDA_MPS_PIPE_DIRECTORY: they are MPS clients

Without MPS, N processes on one GPU time-slice it: each kernel of one waits for the others'.
NVIDIA's Multi-Process Service lets their kernels run side by side; on the H200 it took a 12m
sweep from 2.0x to 2.65x (4 jobs) and 3.9x (8 jobs) the updates/s of one job (DEVICE.md).

``--mps`` modes:

- ``auto`` (default): start a daemon when cells run on CUDA, more than one at a time
  (``--jobs`` > 1, local executor), and none is running already; if it cannot start, one line
  says so and the cells run without it;
- ``on``: the same, but a daemon that cannot start (or a CPU run) is an error;
- ``off``: never start one (a daemon someone else started still serves the cells).

A daemon this module started is stopped when the block ends, whatever ends it (a crashed cell,
Ctrl-C, SIGTERM): ``echo quit | nvidia-cuda-mps-control``, with the same pipe directory. One
daemon serves every GPU the sweep sees, so cells pinned to different GPUs by
``CUDA_VISIBLE_DEVICES`` are all its clients.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from andrea_diag.errors import UserError

MPS_MODES = ("auto", "on", "off")
CONTROL = "nvidia-cuda-mps-control"
PIPE_VAR, LOG_VAR = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
DEFAULT_PIPE = "/tmp/nvidia-mps"  # the daemon's pipe directory when the variable is unset
START_TIMEOUT_S = 30.0


@dataclass
class MpsState:
    """What the session did: ``active`` (cells are MPS clients), ``started`` (by us), why."""

    active: bool
    started: bool
    reason: str


def running_daemon() -> Path | None:
    """The pipe directory of a control daemon already running for this environment, or None."""
    pipe = Path(os.environ.get(PIPE_VAR) or DEFAULT_PIPE)
    return pipe if (pipe / "control").exists() else None


def check_mode(mode: str) -> str:
    if mode not in MPS_MODES:
        raise UserError(f"unknown --mps {mode!r}", hint=f"choose from {', '.join(MPS_MODES)}")
    return mode


def _start(env: dict[str, str]) -> str | None:
    """Start the daemon; None on success, else the reason in a few words."""
    exe = shutil.which(CONTROL)
    if exe is None:
        return f"{CONTROL} is not on PATH"
    try:
        res = subprocess.run([exe, "-d"], env=env, capture_output=True, text=True,
                             timeout=START_TIMEOUT_S)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{CONTROL} -d failed ({e})"
    if res.returncode != 0:
        first = (res.stderr or res.stdout).strip().splitlines()
        return f"{CONTROL} -d exited {res.returncode}" + (f": {first[0]}" if first else "")
    return None


def _stop(env: dict[str, str]) -> None:
    exe = shutil.which(CONTROL) or CONTROL
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run([exe], input="quit\n", env=env, capture_output=True, text=True,
                       timeout=START_TIMEOUT_S)  # fmt: skip


@contextlib.contextmanager
def mps_session(mode: str, *, cuda: bool, jobs: int, console: Console) -> Iterator[MpsState]:
    """Run the block with an MPS daemon per ``mode`` (module docstring); stops what it starts."""
    check_mode(mode)
    if mode == "on" and not cuda:
        raise UserError("--mps on needs cells on a CUDA device", hint="use --device cuda")
    existing = running_daemon()
    if mode == "off" or not cuda or (mode == "auto" and jobs < 2) or existing is not None:
        why = f"already running ({existing})" if existing else f"not used (--mps {mode})"
        yield MpsState(active=existing is not None, started=False, reason=why)
        return
    tmp = Path(tempfile.mkdtemp(prefix="andrea-mps-"))
    saved = {k: os.environ.get(k) for k in (PIPE_VAR, LOG_VAR)}
    env = {**os.environ, PIPE_VAR: str(tmp / "pipe"), LOG_VAR: str(tmp / "log")}
    (tmp / "pipe").mkdir()
    (tmp / "log").mkdir()
    reason = _start(env)
    if reason is not None:
        shutil.rmtree(tmp, ignore_errors=True)
        if mode == "on":
            raise UserError(f"CUDA MPS could not start: {reason}", hint="or use --mps off")
        console.print(f"[yellow]CUDA MPS could not start[/] ({reason}); cells run without it")
        yield MpsState(active=False, started=False, reason=reason)
        return
    os.environ[PIPE_VAR], os.environ[LOG_VAR] = env[PIPE_VAR], env[LOG_VAR]  # cells inherit
    console.print(f"CUDA MPS daemon started for this run ({env[PIPE_VAR]})")
    try:
        yield MpsState(active=True, started=True, reason="started for this run")
    finally:
        _stop(env)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(tmp, ignore_errors=True)
        console.print("CUDA MPS daemon stopped")
