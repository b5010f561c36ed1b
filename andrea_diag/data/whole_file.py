"""A user's data file (a ``--source`` text, .jsonl or token-id file) read whole, or one line.

    raw = read_whole(Path("books/a.txt"), "gutenberg", TEXT_COPIES)

A source is read into memory whole, then decoded or widened to int64 ids: a file larger than
the memory free for those copies ended in a ``MemoryError`` traceback (a sparse 40 GiB file
costs its maker nothing) or in the kernel's OOM killer. Its size is compared with the memory
available before a byte is read; an allocation refused anyway (a ``ulimit -v``) is the same
line.
"""

from __future__ import annotations

from pathlib import Path

from andrea_diag.errors import UserError
from andrea_diag.host_memory import available_memory

# Copies of a file's size held at once while it becomes a source: text is the bytes, the
# decoded str (up to 4 bytes a character for non-ASCII) and its documents; token ids are the
# bytes, the array and its int64 copy (4x a uint16 file's size).
TEXT_COPIES = 3
TOKEN_COPIES = 6


def _too_big(path: Path, name: str, size: int, need: int, free: int | None) -> UserError:
    have = f", {free:,} free" if free is not None else ", more than this process may allocate"
    return UserError(
        f"source {name}: {str(path)!r} is {size:,} bytes: reading it takes about {need:,} "
        f"bytes of memory{have}",
        hint="give a smaller file (a slice of it), or run where more memory is free",
    )


def check_size(path: Path, name: str, copies: int) -> int:
    """``path``'s size, refused in one line when ``copies`` of it would not fit in the memory
    available (nothing is read)."""
    size = path.stat().st_size
    free = available_memory()
    if free is not None and size * copies > free:
        raise _too_big(path, name, size, size * copies, free)
    return size


def read_whole(path: Path, name: str, copies: int) -> bytes:
    """``path``'s bytes (a regular file: the caller checked), refused in one line when
    ``copies`` of its size would not fit in the memory available."""
    size = check_size(path, name, copies)
    try:
        return path.read_bytes()
    except MemoryError:  # an address-space limit the free memory does not show
        raise _too_big(path, name, size, size * copies, None) from None
