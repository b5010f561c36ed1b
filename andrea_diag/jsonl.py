"""The run directory's writers: JSON side files written atomically, JSONL tables appended.

    write_json(run_dir / "summary.json", summary)     # temp file + rename
    w = JsonlWriter(run_dir / "metrics.jsonl")        # appends; refuses a symlink (O_NOFOLLOW)
    w.write_many(rows); w.rewind(size); w.close()

A run directory is untrusted: a write never follows a link out of it (a link at a JSON file's
name is replaced by the rename; a linked JSONL table is refused), a full disk is one line naming
the file with no temp file left behind, and a resume never pads a table that is shorter than its
checkpoint says (it is refused). ``record.py`` re-exports these names.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import torch

from andrea_diag.errors import UserError
from andrea_diag.rundir import atomic_write_text, open_append_file

TAIL_CHUNK = 1 << 16  # bytes read at a time, backwards, to find a JSONL file's last line


def _jsonable(value: Any) -> Any:
    """Turn tensors / numpy scalars / non-finite floats into plain JSON values."""
    if isinstance(value, torch.Tensor):
        value = value.item() if value.numel() == 1 else value.tolist()
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


_AS_IS = frozenset((str, int, bool, type(None)))  # JSON values already (float: if finite)


def _row_jsonable(row: dict[str, Any]) -> dict[str, Any]:
    """:func:`_jsonable` of one metrics row, the same values, several times faster: a row is a
    flat dict of mostly finite floats, and encoding 50 rows of ~100 columns walked one by one
    held the host for ~10 ms a flush, time the device then waited through (issue 20)."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        key = k if type(k) is str else str(k)
        t = type(v)
        if (t is float and v - v == 0.0) or t in _AS_IS:  # v - v: 0.0 unless inf or nan
            out[key] = v
        else:
            out[key] = _jsonable(v)
    return out


def rows_to_host(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with every 0-dim floating tensor replaced by its Python float, brought over
    in one copy per device (one host sync per flush, not one per value). float64 holds every
    float32/bf16/fp16 value exactly, so the floats equal ``tensor.item()``'s."""
    where = [
        (i, k, v)
        for i, row in enumerate(rows)
        for k, v in row.items()
        if isinstance(v, torch.Tensor) and v.dim() == 0 and v.is_floating_point()
    ]
    if not where:
        return rows
    out = [dict(row) for row in rows]
    for device in {v.device for _, _, v in where}:
        mine = [(i, k, v) for i, k, v in where if v.device == device]
        # host sync: the flush's one copy of this device's scalars
        values = torch.stack([v.detach().double() for _, _, v in mine]).tolist()
        for (i, k, _), value in zip(mine, values, strict=True):
            out[i][k] = value
    return out


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (temp file + rename): a crash never leaves half a file, a full disk
    leaves no temp file behind (one line), and a symlink at ``path`` is replaced, not followed."""
    atomic_write_text(Path(path), json.dumps(_jsonable(obj), indent=2, sort_keys=False) + "\n")


def _open_rw(path: Path) -> int | None:
    """A read-write fd of the regular file ``path`` (None when absent); never follows a link."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == 40:  # ELOOP
            raise UserError(
                f"{path} is a symbolic link", hint="refusing to write through it"
            ) from None
        raise UserError(f"cannot open {path}: {e.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"{path} is not a regular file", hint="refusing to write to it")
    return fd


def _drop_torn_tail(path: Path) -> None:
    """Cut a file back to its last complete line (a crash can leave half a row)."""
    fd = _open_rw(path)
    if fd is None:
        return
    try:
        end = pos = os.fstat(fd).st_size
        while pos > 0:  # backwards in chunks: only the last line is read
            start = max(0, pos - TAIL_CHUNK)
            chunk = os.pread(fd, pos - start, start)
            if start + len(chunk) == end and chunk.endswith(b"\n"):
                return  # ends with a complete line
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                os.ftruncate(fd, start + nl + 1)
                return
            pos = start
        os.ftruncate(fd, 0)  # one torn line and nothing before it
    except OSError as e:
        raise UserError(f"cannot repair {path}: {e.strerror}") from None
    finally:
        os.close(fd)


class JsonlWriter:
    """Append-only JSONL; each :meth:`write` / :meth:`write_many` ends with flush + fsync."""

    def __init__(self, path: Path) -> None:
        self.path = path
        _drop_torn_tail(path)  # appending after a torn line would merge the next row into it
        self._f = open_append_file(path)  # O_NOFOLLOW: never appends through a link

    def write(self, row: dict[str, Any]) -> None:
        self.write_many([row])

    def write_many(self, rows: list[dict[str, Any]]) -> None:
        """Append ``rows`` with one write and one fsync (the batch is one string)."""
        if not rows:
            return
        text = "".join(json.dumps(_row_jsonable(row)) + "\n" for row in rows_to_host(rows))
        try:
            self._f.write(text)
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError as exc:  # a full disk: say what is kept, not a traceback
            why = "no space left on the device" if exc.errno == 28 else exc.strerror or exc
            raise UserError(
                f"cannot write {self.path} ({why})",
                hint=f"every row written before this one is kept in {self.path.parent}; "
                "free space and resume with --resume",
            ) from None

    def position(self) -> int:
        """Bytes written so far (every row is flushed): where a resume cuts the file back to."""
        return self._f.tell() if not self._f.closed else self.path.stat().st_size

    def rewind(self, size: int) -> None:
        """Cut the file back to ``size`` bytes: rows written after a checkpoint are dropped.

        A file shorter than ``size`` lost rows the checkpoint counts on: refused (truncate
        would pad it with NUL bytes), and the file left as it is."""
        self._f.flush()
        have = os.fstat(self._f.fileno()).st_size
        if size > have:
            raise UserError(
                f"{self.path} is shorter ({have} bytes) than its checkpoint says ({size} bytes)",
                hint="rows were lost after the checkpoint was written; the arm cannot continue "
                "from it: delete its checkpoints to restart it",
            )
        os.ftruncate(self._f.fileno(), size)  # the open fd: never through a link
        self._f.close()
        self._f = open_append_file(self.path)

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()
