"""Checkpoints: everything a run needs to continue exactly where it stopped.

    ckpt = Checkpointer(run_dir, every=cfg.checkpoint_every_resolved)
    if ckpt.due(update, cfg.steps): ckpt.save(trainer.checkpoint_state(), update)
    state = load_checkpoint(latest_checkpoint(run_dir), expect=trainer.identity())  # --resume

A checkpoint (``<run_dir>/checkpoints/ckpt-<update>.pt``, the last ``KEEP`` kept) holds the
model, optimizer, scheduler and loss-scaler state; every RNG (Python, numpy, torch CPU and
CUDA); the batch plan and mixer position; every probe's state; and the recorder's position (the
size of each JSONL table), so a resume cuts rows written after it. It is written atomically:
temporary file, fsync, rename, fsync of the folder, so a kill at any instant leaves either the
previous checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from andrea_diag.errors import UserError

FORMAT = "andrea-diag-checkpoint/1"
KEEP = 2  # the newest two: if the newest is somehow unreadable, the one before still is
EVERY_SECONDS = 600.0  # at least this often, whatever the update cadence
FOLDER = "checkpoints"


def rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoints(run_dir: Path) -> list[Path]:
    """This run's checkpoints, oldest first."""
    return sorted((Path(run_dir) / FOLDER).glob("ckpt-*.pt"))


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


class Checkpointer:
    """Decides when a checkpoint is due and writes it; keeps the last ``KEEP``."""

    def __init__(self, run_dir: Path, every: int, every_s: float = EVERY_SECONDS) -> None:
        self.folder = Path(run_dir) / FOLDER
        self.every, self.every_s = every, every_s
        self._last_time = time.monotonic()
        self.last_bytes = 0

    def due(self, update: int, steps: int) -> bool:
        """Every ``every`` updates and every ``every_s`` seconds; never at the last update (the
        run's own files are complete then)."""
        if self.every <= 0 or update >= steps:
            return False
        return update % self.every == 0 or time.monotonic() - self._last_time >= self.every_s

    def save(self, state: dict[str, Any], update: int) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"ckpt-{update:07d}.pt"
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                torch.save({"format": FORMAT, **state}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            dir_fd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the rename itself survives a power cut
            finally:
                os.close(dir_fd)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise UserError(
                f"cannot write checkpoint {path} ({exc.strerror or exc})",
                hint="the run's rows so far are kept; free space and resume with --resume",
            ) from None
        for old in checkpoints(self.folder.parent)[:-KEEP]:
            old.unlink(missing_ok=True)
        self.last_bytes = path.stat().st_size
        self._last_time = time.monotonic()
        return path


def load_checkpoint(path: Path, expect: dict[str, Any]) -> dict[str, Any]:
    """Read a checkpoint and check it belongs to this run (``expect``: size, vocab, n_params).

    A corrupt file, another size or vocabulary, or another checkpoint format is one clear
    ``UserError``, never a traceback.
    """
    try:
        # our own file, written by torch.save: it holds Python objects (probe state), not only
        # tensors, so weights_only loading cannot read it
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # truncated zip, garbage bytes, unpickling errors
        raise UserError(
            f"checkpoint {path} cannot be read ({type(exc).__name__})",
            hint="delete it to resume from the one before (the last two are kept)",
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        fmt = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise UserError(f"{path} is not an andrea-diag checkpoint of format {FORMAT} ({fmt})")
    for key, want in expect.items():
        if state.get("identity", {}).get(key) != want:
            raise UserError(
                f"checkpoint {path} is from another run: {key} "
                f"{state.get('identity', {}).get(key)!r}, this run {want!r}",
                hint="resume with the options the run was started with",
            )
    return state
