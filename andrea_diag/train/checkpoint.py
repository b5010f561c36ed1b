"""Checkpoints: everything a run needs to continue exactly where it stopped, and no pickle.

    ckpt = Checkpointer(run_dir, every=cfg.checkpoint_every_resolved)
    if ckpt.due(update, cfg.steps): ckpt.save(trainer.checkpoint_state(), update)
    state = load_checkpoint(latest_checkpoint(run_dir), expect=trainer.identity())  # --resume

A checkpoint (``<run_dir>/checkpoints/ckpt-<update>.pt``, the last ``KEEP`` kept) holds the
model, optimizer, scheduler and loss-scaler state; every RNG (Python, numpy, torch CPU and
CUDA); the batch plan and mixer position; every probe's state; and the recorder's position (the
size of each JSONL table), so a resume cuts rows written after it.

The file is a safetensors file, not a torch pickle (the ``.pt`` name is kept so tools and
scripts that list checkpoints still find them): the tensors as safetensors, everything else as
one JSON document (``train/state_codec.py``) stored as a uint8 tensor, and a CRC-32 of every
tensor's bytes in the header's metadata. Reading one runs no code, whoever wrote it. The old
pickle format is refused with one line, never unpickled. Nor is a tensor read before the file's
size, its header's names, dtypes and shapes and its identity are checked against the run it is
to fill (``train/checkpoint_fit.py``): a header may declare 40 GiB over a sparse file.

A checkpoint carries the identity of the arm that wrote it (arm, clip mode and its parameters,
seed, lr, size, precision, batch shape: :data:`RUN_IDENTITY_KEYS`, from the run's own
``config.json``), so another arm's or run's checkpoint copied into a run is refused. It is
written atomically: temporary file, fsync, rename, fsync of the folder, so a kill at any instant
leaves the previous checkpoints and the new one or no new one, never half of one. The previous
checkpoint is kept: a newest one torn by something else falls back to it (``resume.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import tempfile
import time
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import safetensors
import safetensors.torch
import torch

from andrea_diag.errors import UserError
from andrea_diag.record import _jsonable
from andrea_diag.rundir import child, file_mode, open_regular, read_json, remove_file
from andrea_diag.train.checkpoint_fit import (
    STATE_KEY,
    Header,
    Need,
    check_file_size,
    check_layout,
    expected_need,
)
from andrea_diag.train.checkpoint_state import check_identity, check_train_state
from andrea_diag.train.state_codec import StateFormatError, decode, encode

FORMAT = "andrea-diag-checkpoint/2"  # /1 was a torch pickle: refused, never loaded
KEEP = 2  # the newest two: if the newest is somehow unreadable, the one before still is
EVERY_SECONDS = 600.0  # at least this often, whatever the update cadence
FOLDER = "checkpoints"
# config.json keys a checkpoint must share with the run resuming from it (steps may grow)
RUN_IDENTITY_KEYS = ("arm", "clip", "max_norm", "clip_params", "seed", "lr", "size", "recipe",
                     "precision", "micro_batch", "accum", "seq_len", "corpus_seed", "mixer",
                     "model_factory", "hf_config")  # fmt: skip
OLD_HINT = (
    "move {folder} aside and run --resume again: the arm restarts from its first update "
    "(its rows so far are kept aside)"
)


class UnreadableCheckpoint(UserError):
    """A checkpoint that cannot be read at all (torn, truncated, garbage): the one before it
    may still be; unlike another run's checkpoint, which is refused outright."""


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


@contextlib.contextmanager
def fitting(path: Path) -> Iterator[None]:
    """Loading a checkpoint's state into the trainer: whatever does not fit it (a tensor of
    another shape, a missing key, a bad RNG state: the CRC is no authentication, and a run
    directory is untrusted) is one line, raised before the run's tables are cut back."""
    try:
        yield
    except UserError:
        raise
    except Exception as exc:  # any component's load_state_dict: the message says which part
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UserError(
            f"checkpoint {path} does not fit this run ({type(exc).__name__}: {first})",
            hint="nothing was changed; delete the arm's checkpoints folder to restart the arm",
        ) from None


def checkpoints(run_dir: Path) -> list[Path]:
    """This run's checkpoints, oldest first by their update number (regular files named as
    :class:`Checkpointer` names them only: a link, a FIFO or ``ckpt-x.pt`` is skipped). By
    name, ``ckpt-x.pt`` planted in the folder was the newest: read first at a resume, and
    kept while the run's own older checkpoint, its fallback, was deleted; and update
    10,000,000 sorted before 9,999,999."""
    found = []
    for p in (Path(run_dir) / FOLDER).glob("ckpt-*.pt"):
        number = _NAME.fullmatch(p.name)
        if number is not None and _is_file(p):
            found.append((int(number.group(1)), p))
    return [p for _, p in sorted(found)]


# the names Checkpointer writes (ckpt-{update:07d}.pt): keep the two in step. ASCII digits only:
# "ckpt-٣.pt" is not ours
_NAME = re.compile(r"ckpt-([0-9]{7,18})\.pt")


def _is_file(path: Path) -> bool:
    with contextlib.suppress(OSError):
        return path.is_file() and not path.is_symlink()
    return False


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


def run_identity(config: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a run's config a checkpoint must match, as JSON values (config.json's)."""
    return json.loads(json.dumps(_jsonable({k: config.get(k) for k in RUN_IDENTITY_KEYS})))


def _crc(tensors: Mapping[str, torch.Tensor]) -> str:
    crc = 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.numel():
            crc = zlib.crc32(t.reshape(-1).view(torch.uint8).numpy().data, crc)
    return f"{crc:08x}"


class Checkpointer:
    """Decides when a checkpoint is due and writes it; keeps the last ``KEEP``."""

    def __init__(self, run_dir: Path, every: int, every_s: float = EVERY_SECONDS) -> None:
        self.folder = Path(run_dir) / FOLDER
        self.every, self.every_s = every, every_s
        self._last_time = time.monotonic()
        self.last_bytes = 0
        self._run: dict[str, Any] | None = None

    def due(self, update: int, steps: int) -> bool:
        """Every ``every`` updates and every ``every_s`` seconds; never at the last update (the
        run's own files are complete then)."""
        if self.every <= 0 or update >= steps:
            return False
        return update % self.every == 0 or time.monotonic() - self._last_time >= self.every_s

    def _identity(self) -> dict[str, Any]:
        """The writing arm's identity, from the config.json this process wrote at its start."""
        if self._run is None:
            cfg = read_json(self.folder.parent / "config.json", "the run's config", kind=dict)
            self._run = run_identity(cfg)
        return self._run

    def save(self, state: dict[str, Any], update: int) -> Path:
        # a checkpoints folder linked out of the run would take the writes (and the deletes
        # of old checkpoints) with it
        child(self.folder.parent, FOLDER, "the checkpoints folder")
        path = self.folder / f"ckpt-{update:07d}.pt"
        for stale in self.folder.glob(".ckpt-*.tmp"):  # left by a kill during a save
            if _is_file(stale):
                remove_file(stale, "a stale checkpoint temp file")
        full = {"format": FORMAT, **state, "run": self._identity()}
        try:
            tree, tensors = encode(full)
        except StateFormatError as exc:  # a bug of ours, not the user's: say what it was
            raise RuntimeError(f"checkpoint state cannot be written: it holds {exc}") from None
        named = {f"t{i:06d}": t for i, t in enumerate(tensors)}
        named[STATE_KEY] = torch.frombuffer(bytearray(json.dumps(tree).encode()), dtype=torch.uint8)
        _write_atomic(path, named, {"format": FORMAT, "crc32": _crc(named)})
        for old in checkpoints(self.folder.parent)[:-KEEP]:
            remove_file(old, "an old checkpoint")  # a directory in its place: one line
        self.last_bytes = path.stat().st_size
        self._last_time = time.monotonic()
        return path


def _write_atomic(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    """safetensors to a temp file in the folder, fsync, rename, fsync the folder; on any error
    (a full disk) the temp file is removed and one line raised."""
    tmp: str | None = None
    fd = -1
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, file_mode())
        os.close(fd)
        fd = -1
        # safetensors writes its own temp file beside ``tmp`` and renames it over: a link at
        # ``tmp`` is replaced, never written through
        safetensors.torch.save_file(tensors, tmp, metadata=meta)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)  # replaces a link at ``path``: never writes through it
        tmp = None
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a power cut
        finally:
            os.close(dir_fd)
    except (OSError, safetensors.SafetensorError) as exc:
        full = (isinstance(exc, OSError) and exc.errno == 28) or "No space" in str(exc)
        why = "no space left on the device" if full else getattr(exc, "strerror", None) or exc
        # a folder planted at the checkpoint's name: freeing space would not help
        planted = isinstance(exc, IsADirectoryError) or os.path.isdir(path)
        raise UserError(
            f"cannot write checkpoint {path} ({why})",
            hint="the run's rows so far are kept; "
            + ("move that folder out of the run" if planted else "free space")
            + " and resume with --resume",
        ) from None
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _old_format(f: IO[bytes]) -> bool:
    """A torch pickle (zip or legacy): the format before /2, refused unread."""
    head = f.read(4)
    return head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"


def fd_path(fd: int, path: Path) -> str:
    """A name safetensors opens as the file behind ``fd`` (Linux ``/proc/self/fd``, else
    ``/dev/fd``): the file read is the file checked (one swapped in after the check is never
    opened), and a folder named in another encoding (``run\\udcff``) still opens. safetensors
    refuses such a path itself ("not valid UTF-8"), which read as a torn checkpoint, to delete.
    Without either folder: the path, or one line where it is not UTF-8."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        # the entry itself, not the folder: FreeBSD's /dev/fd without fdescfs holds 0-2 only,
        # and a name that opens nothing read as a torn checkpoint ("delete it")
        if os.path.exists(f"{folder}/{fd}"):
            return f"{folder}/{fd}"
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"checkpoint {path} is in a folder whose name is not UTF-8, which "
                        "safetensors cannot open here", hint="rename the folder in UTF-8") from None  # fmt: skip
    return str(path)


def _document(doc: torch.Tensor | None) -> tuple[Any, Exception | None]:
    """The JSON document's tree (its size checked with the header), or the error parsing it:
    said only once the CRC holds (a torn document is a torn file, not a hostile one)."""
    if doc is None:
        return None, None
    try:
        return json.loads(bytes(doc.numpy()).decode("utf-8")), None
    except (ValueError, RecursionError) as exc:
        return None, exc


def read_checkpoint(
    path: Path, need: Need | None = None, expect: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The state in a checkpoint file; :class:`UnreadableCheckpoint` if it cannot be read, a
    :class:`UserError` for the old pickle format (never unpickled).

    Before any tensor data is read (``checkpoint_fit.py``): the file's size against the memory
    free and ``need`` (what the model and optimizer it is to fill hold), its header's names,
    the identity in its JSON document against ``expect`` (:func:`check_identity`), and each
    model and optimizer tensor's dtype and shape against ``need``. Every check and every read
    is of the one descriptor :func:`~andrea_diag.rundir.open_regular` opened."""
    unreadable = UnreadableCheckpoint(
        f"checkpoint {path} cannot be read",
        hint="it is torn or damaged; delete it to resume from the one before (two are kept)",
    )
    with open_regular(path, "checkpoint") as raw:
        try:
            old = _old_format(raw)
        except OSError:
            raise unreadable from None
        if old:
            raise UserError(
                f"checkpoint {path} is in the old pickle format, which is never loaded "
                "(reading it could run code)",
                hint=OLD_HINT.format(folder=path.parent),
            )
        check_file_size(path, need, raw)  # by fstat: safetensors maps the whole file
        tree, bad, tensors = _read_tensors(raw, path, need, expect, unreadable)
    try:
        if bad is not None:  # a document that does not parse under a CRC that holds: crafted
            raise bad
        state = decode(tree, [tensors[f"t{i:06d}"] for i in range(len(tensors))])
    except (ValueError, RecursionError, StateFormatError) as exc:
        raise UserError(f"checkpoint {path} holds {exc}", hint="it is not one we wrote") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UserError(f"{path} is not an andrea-diag checkpoint of format {FORMAT}")
    check_train_state(state, path)  # the trainer sets its counters as given: checked first
    return state


def _read_tensors(
    raw: IO[bytes], path: Path, need: Need | None, expect: Mapping[str, Any] | None,
    unreadable: UnreadableCheckpoint,
) -> tuple[Any, Exception | None, dict[str, torch.Tensor]]:  # fmt: skip
    """The JSON document's tree (or its parse error) and the tensors but the document's, read
    once the header fits ``need`` and the document ``expect``, and the CRC checked."""
    try:
        with safetensors.safe_open(fd_path(raw.fileno(), path), framework="pt") as f:
            head = Header.of(f, path)
            doc = f.get_tensor(STATE_KEY) if STATE_KEY in head.specs else None  # read once
            tree, bad = _document(doc)
            ours = isinstance(tree, dict) and tree.get("format") == FORMAT
            if head.meta.get("format") != FORMAT or (bad is None and not ours):
                raise UserError(f"{path} is not an andrea-diag checkpoint of format {FORMAT}")
            if bad is None and expect is not None:
                check_identity(tree, path, expect)
            if bad is None and need is not None:
                check_layout(path, head, tree, need)
            tensors = {k: f.get_tensor(k) for k in head.specs if k != STATE_KEY}
    except UserError:
        raise
    except Exception:  # SafetensorError, OSError, a truncated header: all "cannot be read"
        raise unreadable from None
    if head.meta.get("crc32") != _crc({**tensors, STATE_KEY: doc} if doc is not None else tensors):
        raise unreadable
    return tree, bad, tensors


def load_checkpoint(path: Path, expect: dict[str, Any], need: Need | None = None) -> dict[str, Any]:
    """Read a checkpoint and check it belongs to this run: ``expect`` (the trainer's identity:
    size, vocab, n_params ...) and the arm's identity in the run's config.json (written by this
    process before it restores), and that it fits ``need`` (the trainer's model and optimizer;
    by default the toolkit GPT's from that config.json, else a budget from ``n_params``), all
    before its tensors are read. Every failure is one clear ``UserError``, never a traceback."""
    config = path.parent.parent / "config.json"
    cfg = read_json(config, "the run's config", kind=dict) if config.exists() else None
    run = run_identity(cfg) if cfg is not None else {}
    if need is None:
        need = expected_need(cfg, expect)
    return read_checkpoint(path, need, {**expect, **run})
