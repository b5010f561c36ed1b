"""The run directory's writers: JSON side files written atomically, JSONL tables appended.

    write_json(run_dir / "summary.json", summary)     # temp file + rename
    w = JsonlWriter(run_dir / "metrics.jsonl")        # appends; refuses a symlink (O_NOFOLLOW)
    w.write_many(rows); w.rewind(size); w.close()
    JsonlWriter(path, sync_behind=True)               # the fsync on a worker (SyncBehind)

Rows are JSON lines written by orjson (:func:`encode_rows`), the values of :func:`_jsonable`.

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
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import torch

from andrea_diag.errors import UserError
from andrea_diag.rundir import atomic_write_text, open_append_file, unshare

TAIL_CHUNK = 1 << 16  # bytes read at a time, backwards, to find a JSONL file's last line
MAX_ROW_BYTES = 1 << 20  # a row is a few kB: a longer last line without its newline is torn


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


_NEWLINE = orjson.OPT_APPEND_NEWLINE


def encode_row(row: dict[str, Any]) -> bytes:
    r"""One row as a JSON line, the values :func:`_jsonable` gives (:func:`encode_rows`).

    >>> encode_row({"update": 3, "loss": 0.5, "nan": float("nan"), "inf": float("inf")})
    b'{"update":3,"loss":0.5,"nan":null,"inf":"inf"}\n'
    """
    return encode_rows([row])


def encode_rows(rows: list[dict[str, Any]]) -> bytes:
    r"""The rows as JSON lines, the values :func:`_jsonable` gives, in one pass of orjson's C
    over most of them. A metrics row is a flat dict of mostly finite floats; orjson writes it
    about 10x faster than ``json.dumps`` of the walked row (the write of 50 rows of ~150
    columns held the H200's host 5-7 ms a flush, time the device then sat idle through:
    issue 20). A row orjson refuses (a tensor, a numpy value, a key that is not a string)
    comes to the host with the others (:func:`rows_to_host`, one copy per dtype) and takes
    the walk; so does a row whose line has a ``null`` that is a nan or an inf (orjson writes
    both as ``null``, the walk inf as ``"inf"``), found by :func:`_finite`. No Python loop
    looks at every value first: at the H200's flush that scan cost more than orjson itself.

    >>> encode_rows([{"a": 1.0}, {"b": None, "c": [float("-inf")]}, {"d": torch.tensor(2.5)}])
    b'{"a":1.0}\n{"b":null,"c":["-inf"]}\n{"d":2.5}\n'
    """
    lines: list[bytes] = []
    slow: list[int] = []
    for row in rows:
        try:
            line = orjson.dumps(row, option=_NEWLINE)
        except TypeError:  # orjson's JSONEncodeError: a value or key it does not take as is
            line = b""
        if not line or (b"null" in line and not _finite(row, line)):
            slow.append(len(lines))
        lines.append(line)
    if slow:
        for i, row in zip(slow, rows_to_host([rows[i] for i in slow]), strict=True):
            lines[i] = _dumps(_jsonable(row))
    return b"".join(lines)


def _dumps(row: dict[str, Any]) -> bytes:
    """One walked row's line. orjson writes 64-bit ints only: an int past them (``10**30``
    from a user's column) raised at the flush and lost the batch with it. The standard
    library writes it exactly, and anything else it does not know (a set) as its ``str``."""
    try:
        return orjson.dumps(row, option=_NEWLINE)
    except TypeError:
        return (json.dumps(row, default=str) + "\n").encode()


def _finite(row: dict[str, Any], line: bytes) -> bool:
    """Whether no float in ``row`` (its ``line`` from orjson) is a nan or an inf. The top
    level's floats in one sum (a comprehension: a loop with a test per value cost 4x more);
    nested dicts, lists and tuples, where the line has one, walked. Finite floats whose sum
    overflows read as not finite: the walk, exact anyway."""
    if not math.isfinite(sum([v for v in row.values() if type(v) is float])):
        return False
    if b"[" not in line and line.count(b"{") == 1:  # flat (a bracket in a string: walked)
        return True
    return _nested_finite(row.values())


def _nested_finite(values: Any) -> bool:
    for v in values:
        if type(v) is float and not math.isfinite(v):
            return False
        inner = v.values() if isinstance(v, dict) else v
        if isinstance(v, (dict, list, tuple)) and not _nested_finite(inner):
            return False
    return True


def rows_to_host(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with every 0-dim floating tensor replaced by its Python float, brought over
    in one copy per (device, dtype): one stack, no kernel per value (a ``.double()`` each was
    a launch each on CUDA), and one host sync per flush. A Python float holds every
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
    for device, dtype in {(v.device, v.dtype) for _, _, v in where}:
        mine = [(i, k, v) for i, k, v in where if v.device == device and v.dtype == dtype]
        # host sync: the flush's one copy of these scalars
        values = torch.stack([v.detach() for _, _, v in mine]).tolist()
        for (i, k, _), value in zip(mine, values, strict=True):
            out[i][k] = value
    return out


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (temp file + rename): a crash never leaves half a file, a full disk
    leaves no temp file behind (one line), and a symlink at ``path`` is replaced, not followed."""
    atomic_write_text(Path(path), json.dumps(_jsonable(obj), indent=2, sort_keys=False) + "\n")


def _open_rw(path: Path) -> int | None:
    """A read-write fd of the regular file ``path`` (None when absent); never follows a link,
    and never writes a hard-linked inode shared with a file outside the run (``unshare``)."""
    unshare(path)
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
    """Cut a file back to its last complete line (a crash can leave half a row). A last row
    that is whole but has no newline (cut right before it, or written by another tool) is
    kept and given one: cutting it lost a recorded row, and a file of one such row went to 0
    bytes."""
    fd = _open_rw(path)
    if fd is None:
        return
    try:
        end = os.fstat(fd).st_size
        cut = _after_last_newline(fd, end)
        if cut == end:
            return  # ends with a complete line
        if end - cut <= MAX_ROW_BYTES and _whole_row(os.pread(fd, end - cut, cut)):
            os.pwrite(fd, b"\n", end)
        else:
            os.ftruncate(fd, cut)
    except OSError as e:
        raise UserError(f"cannot repair {path}: {e.strerror}") from None
    finally:
        os.close(fd)


def _after_last_newline(fd: int, end: int) -> int:
    """The offset just past the last newline of the file's first ``end`` bytes (0: none),
    read backwards in chunks, so that only the last line is read."""
    pos = end
    while pos > 0:
        start = max(0, pos - TAIL_CHUNK)
        nl = os.pread(fd, pos - start, start).rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        pos = start
    return 0


def _whole_row(data: bytes) -> bool:
    """Whether ``data`` is one complete JSON object (a torn row never is: its closing brace
    is the last byte written)."""
    try:
        return isinstance(json.loads(data), dict)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, a 5000-digit number
        return False


def _write_failed(path: Path, exc: OSError) -> UserError:
    """A failed write or fsync (a full disk), as one line that says what is kept."""
    why = "no space left on the device" if exc.errno == 28 else exc.strerror or exc
    return UserError(
        f"cannot write {path} ({why})",
        hint=f"every row written before this one is kept in {path.parent}; "
        "free space and resume with --resume",
    )


class SyncBehind:
    """``os.fsync`` of one file on a worker thread, so that the writer does not wait for the
    disk: on the H200's host a metrics batch's fsync took 0.7-0.9 ms, time the device sat idle
    through (reports/bench-train/h200-2026-12-03/). A failure is raised at the next
    :meth:`check`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="andrea-fsync")
        self._pending: list[Future[None]] = []

    def submit(self, fd: int) -> None:
        self.check()
        self._pending.append(self._pool.submit(os.fsync, fd))

    def check(self, wait: bool = False) -> None:
        """Raise the first failed fsync (``wait``: after every submitted one has finished)."""
        if wait:
            futures.wait(self._pending)
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        for f in done:
            exc = f.exception()
            if isinstance(exc, OSError):
                raise _write_failed(self.path, exc) from None
            if exc is not None:
                raise exc

    def close(self) -> None:
        try:
            self.check(wait=True)
        finally:
            self._pool.shutdown(wait=True)


class JsonlWriter:
    """Append-only JSONL; each :meth:`write` / :meth:`write_many` ends with flush + fsync.

    ``sync_behind``: the fsync runs on a worker thread (:class:`SyncBehind`). The rows reach
    the kernel in the write itself, so a killed process loses none of them; the disk has
    them once that fsync ends, which :meth:`position`, :meth:`rewind` and :meth:`close`
    wait for (a checkpoint never points at rows the disk may not have)."""

    def __init__(self, path: Path, sync_behind: bool = False) -> None:
        self.path = path
        _drop_torn_tail(path)  # appending after a torn line would merge the next row into it
        self._f = open_append_file(path)  # O_NOFOLLOW: never appends through a link
        self._behind = SyncBehind(path) if sync_behind else None

    def write(self, row: dict[str, Any]) -> None:
        self.write_many([row])

    def write_many(self, rows: list[dict[str, Any]]) -> None:
        """Append ``rows`` with one write and one fsync (the batch is one string)."""
        if not rows:
            return
        text = encode_rows(rows).decode()
        try:
            self._f.write(text)
            self._f.flush()
            if self._behind is not None:
                self._behind.submit(self._f.fileno())
            else:
                os.fsync(self._f.fileno())
        except OSError as exc:  # a full disk: say what is kept, not a traceback
            raise _write_failed(self.path, exc) from None

    def _synced(self) -> None:
        if self._behind is not None and not self._f.closed:
            self._behind.check(wait=True)

    def position(self) -> int:
        """Bytes written so far (every row is flushed, and on disk): where a resume cuts the
        file back to."""
        self._synced()
        return self._f.tell() if not self._f.closed else self.path.stat().st_size

    def rewind(self, size: int) -> None:
        """Cut the file back to ``size`` bytes: rows written after a checkpoint are dropped.

        A file shorter than ``size`` lost rows the checkpoint counts on: refused (truncate
        would pad it with NUL bytes), and the file left as it is."""
        self._f.flush()
        self._synced()
        have = os.fstat(self._f.fileno()).st_size
        if size > have:
            raise UserError(
                f"{self.path} is shorter ({have} bytes) than its checkpoint says ({size} bytes)",
                hint="rows were lost after the checkpoint was written; the arm cannot continue "
                "from it: delete its checkpoints to restart it",
            )
        try:
            os.ftruncate(self._f.fileno(), size)  # the open fd: never through a link
        except OSError as exc:  # a read-only or failing disk: one line, the file as it was
            raise UserError(f"cannot cut {self.path} back to its checkpoint ({exc.strerror})",
                            hint="make the run dir writable, then resume") from None  # fmt: skip
        self._f.close()
        self._f = open_append_file(self.path)

    def close(self) -> None:
        try:
            if self._behind is not None:
                self._behind.close()
        finally:
            if not self._f.closed:
                self._f.close()
