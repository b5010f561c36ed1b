"""A run directory is untrusted input: the few primitives every reader and writer of one uses.

    from andrea_diag.rundir import child, read_json, atomic_write_text, open_append

    arm_dir = child(cascade_dir, arm)                 # refuses "../x", "/abs", links out
    summary = read_json(arm_dir / "summary.json", "the arm's summary", kind=dict)
    atomic_write_text(arm_dir / "report.html", page)  # temp file + rename: replaces a link
    with open_append(arm_dir / "events.jsonl") as f:  # refuses a symlink (O_NOFOLLOW)
        f.write(line)

Someone else's sweep, a CI artifact or a shared folder is opened with ``report``, ``export`` and
``--resume``. So a name read from it (an arm, a cell) must resolve inside it, a file read from it
must be a regular file (a FIFO would hang, a device would never end), its JSON must have the
shape the reader expects, and a write into it must never follow a link out of it. Each failure
is one :class:`~andrea_diag.errors.UserError` line naming the file, never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import IO, Any

from andrea_diag.errors import UserError, unsafe
from andrea_diag.host_memory import available_memory
from andrea_diag.surrogates import mended

NAME_MAX = 255  # a path component longer than this is refused by every Linux filesystem
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
LOOP_HINT = "the run dir is damaged: remove the link"
OUT_LINK = "a link planted in the output folder: remove it, or choose another --out"
DAMAGED = "the file is damaged or not from andrea-diag"


def check_component(name: str, what: str) -> str:
    """``name`` as one safe path component (no separator, not ``.``/``..``, not too long)."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UserError(f"{what} {name!r} is not a plain name", hint="names are one path component")
    if unsafe(name):  # a control, separator or bidi character (errors.unsafe owns the set)
        # no name the toolkit writes has one; printed, an ESC would drive the user's terminal
        raise UserError(f"{what} {name!r} holds control characters", hint="not a run's name")
    if len(name.encode("utf-8", "surrogateescape")) > NAME_MAX:
        raise UserError(f"{what} is longer than {NAME_MAX} bytes: {name[:40]!r}...")
    return name


def check_path(path: Path, what: str | None = None) -> Path:
    """``path``, or one line where the system could not look it up: a component over
    ``NAME_MAX`` bytes is ``ENAMETOOLONG`` from every call. ``what``: the option, for the line."""
    of = f" of {what}" if what else ""
    for part in Path(path).parts:
        if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX:
            raise UserError(f"a path component{of} is longer than {NAME_MAX} bytes: {part[:40]}...")
    return Path(path)


def resolved(path: Path, what: str) -> Path:
    """``path`` with every link followed, or one line: a loop of links (RuntimeError), no lookup."""
    try:
        return Path(path).resolve()
    except RuntimeError:
        raise UserError(f"{what} {path} is a loop of symbolic links", hint=LOOP_HINT) from None
    except OSError as e:
        raise UserError(f"cannot look up {what} {path}: {e.strerror or e}") from None


def child(root: Path, name: str, what: str = "name", hint: str = "the run dir is damaged") -> Path:
    """``root / name``, refused unless it stays inside ``root`` (after resolving links)."""
    check_component(name, what)
    path = Path(root) / name
    real_root = resolved(Path(root), what)
    real = resolved(path, what)
    if real != real_root and real_root not in real.parents:
        raise UserError(f"{what} {name!r} points outside {root}", hint=hint)
    return path


def descend(root: Path, relative: str, what: str = "name", hint: str = OUT_LINK) -> Path:
    """``root / relative`` (``a/b/c``), each part through :func:`child`: a link out, refused."""
    path = Path(root)
    for part in relative.split("/"):
        path = child(path, part, what, hint)
    return path


def regular_file(path: Path, what: str) -> Path:
    """``path`` if it is a regular file (not a FIFO, device or directory), not a link out of its
    folder (a ``summary.json`` linked to another file read that file into a page); or one line."""
    if os.path.islink(path):
        home, real = resolved(Path(path).parent, what), resolved(Path(path), what)
        if home not in real.parents:
            raise UserError(f"{what} {path} is a link out of its run", hint="refusing to read it")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UserError(f"{what} is missing: {path}") from None
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        raise UserError(f"{what} {path} is not a regular file", hint="refusing to read it")
    return path


def open_regular(path: Path, what: str) -> IO[bytes]:
    """A regular file of the run (:func:`regular_file`) opened for reading bytes, never
    blocking (``O_NONBLOCK``); refused if what was opened is no longer a regular file (a FIFO
    swapped in after the check) or a link (``O_NOFOLLOW``: a link out swapped in was read)."""
    regular_file(path, what)
    target = resolved(path, what) if os.path.islink(path) else path  # a link inside: checked
    if target is not path and resolved(Path(path).parent, what) not in target.parents:
        raise UserError(f"{what} {path} is a link out of its run", hint="refusing to read it")
    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | _NOFOLLOW)
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"{what} {path} is not a regular file", hint="refusing to read it")
    return os.fdopen(fd, "rb")


# a run's largest JSON file is its batch plan, ~300 bytes an update (0.4 MB for 1,500): 1 GiB
# is 3.5M updates, and a planted 40 GB file is refused before it is read
MAX_JSON_BYTES = 1 << 30
JSON_EXPANSION = 32  # parsed JSON's memory per byte, at most: 19x [{"a":0},..], 25x [{},..]
JSON_FLOOR = 16 << 20  # parsed whatever the memory free says: 16 MiB is 50,000 updates' plan
# a sweep.csv row is ~300 bytes an arm: 64 MiB is 200,000 arms, and a planted 40 GB file
# (sparse: it costs its maker nothing) is refused unread; read_csv held 23 GB of memory on it
MAX_SWEEP_CSV_BYTES = 64 << 20
# a run's table (JSONL or parquet): 1,500 updates of 100 columns is ~3 MB; past 2 GiB, decoded,
# it would not fit a laptop's memory
MAX_TABLE_BYTES = 2 << 30


def check_size(path: Path, what: str, max_bytes: int, said: str = "more than any run writes",
               opened: IO[Any] | None = None) -> None:  # fmt: skip
    """Refuse, unread, a file larger than ``max_bytes``: a planted 40 GB file would be read
    whole before any check of its content. ``opened``: the file as opened, sized by ``fstat``
    (a path sized, then swapped for a larger file before its open, was read whole)."""
    size = os.fstat(opened.fileno()).st_size if opened is not None else os.stat(path).st_size
    _check_bytes(path, what, size, max_bytes, said)


def _check_bytes(
    path: Path, what: str, size: int, max_bytes: int, said: str, hint: str = DAMAGED
) -> None:
    if size > max_bytes:
        raise UserError(
            f"{what} {path} is {size_text(size, '.1f')}, {said} ({size_text(max_bytes, 'g')})",
            hint=hint,
        )


def size_text(n: int, spec: str) -> str:
    """``n`` bytes in GiB, or in MiB below one GiB (a 64 MiB cap is not '0.0625 GiB')."""
    unit, scale = ("GiB", 2**30) if n >= 2**30 else ("MiB", 2**20)
    return f"{n / scale:{spec}} {unit}"


def read_text(path: Path, what: str, max_bytes: int | None = None,
              said: str = "more than any run writes", hint: str = DAMAGED) -> str:  # fmt: skip
    """The UTF-8 text of a regular file (at most ``max_bytes``, or one line ``said`` of it),
    sized and read through one descriptor (:func:`open_regular`): a file swapped for a FIFO
    after the check hung the reader, one swapped for a larger file was read whole."""
    try:
        with open_regular(path, what) as f:
            size = os.fstat(f.fileno()).st_size
            if max_bytes is not None:
                _check_bytes(path, what, size, max_bytes, said, hint)
            # read(n) reserves n bytes first: the file's own size (+1 to see it grow), not the cap
            raw = f.read() if max_bytes is None else f.read(min(size, max_bytes) + 1)
            if max_bytes is not None and len(raw) > size:  # grown while read: the rest, to the cap
                raw += f.read(max_bytes + 1 - len(raw))
        if max_bytes is not None:  # grown since the fstat: still never more than the cap
            _check_bytes(path, what, len(raw), max_bytes, said, hint)
        return raw.decode("utf-8")
    except MemoryError:  # an address-space limit (ulimit -v) the free memory does not show
        raise UserError(f"{what} {path} is more than this process can hold in memory",
                        hint="raise the memory limit, or free memory, and retry") from None  # fmt: skip
    except UnicodeDecodeError:
        raise UserError(f"{what} {path} is not UTF-8 text") from None
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e.strerror}") from None


# levels of [ and { a run's JSON may nest (its files use < 10): json.loads takes ~1,000, code
# walking it recursively less (a cascade.json 500 deep written back at --resume: a traceback)
MAX_DEPTH = 100


def shallow(value: Any, most: int = MAX_DEPTH) -> Any:
    """``value``, or RecursionError where a list or dict in it nests past ``most`` levels."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > most:
            raise RecursionError(f"JSON nested more than {most} levels deep")
        items = node.values() if isinstance(node, dict) else node
        stack.extend((v, depth + 1) for v in items if isinstance(v, (dict, list)))
    return value


def read_json(path: Path, what: str, kind: type | None = None) -> Any:
    """Parsed JSON of a regular file; with ``kind``, refused unless the top level is one, and
    unread when parsing it could take more memory than is free (``JSON_EXPANSION``)."""
    free = available_memory()
    parsable = MAX_JSON_BYTES if free is None else max(JSON_FLOOR, free // JSON_EXPANSION)
    with contextlib.suppress(OSError):  # past any run's size: the file's fault, said so first
        if os.stat(path).st_size > MAX_JSON_BYTES:
            parsable = MAX_JSON_BYTES
    if parsable < MAX_JSON_BYTES:  # the memory is the bound: not the file's fault
        said = f"more than {size_text(free or 0, '.1f')} of free memory may parse"
        text = read_text(path, what, parsable, said, hint="free memory, then retry")
    else:
        text = read_text(path, what, MAX_JSON_BYTES)
    try:
        # a lone "\ud800" no page or frame can encode; nested past what a walker of it takes
        value = shallow(mended(json.loads(text), text))
    except MemoryError:  # an address-space limit (ulimit -v) the free memory does not show
        raise UserError(f"{what} {path} is {size_text(len(text), '.1f')} of JSON, more than this "
                        "process can parse", hint="the file is damaged or not from andrea-diag") from None  # fmt: skip
    except json.JSONDecodeError as e:
        raise UserError(f"{what} {path} is not valid JSON ({e.msg}, line {e.lineno})") from None
    except ValueError as e:  # int()'s own digit limit (4300): no JSONDecodeError, no e.msg
        raise UserError(f"{what} {path} is not a run's JSON ({e})") from None
    except RecursionError:  # over MAX_DEPTH nested brackets: no run dir writes that
        raise UserError(f"{what} {path} is nested too deeply to be a run's JSON") from None
    if kind is not None and not isinstance(value, kind):
        raise UserError(
            f"{what} {path} holds a {type(value).__name__}, not a {kind.__name__}",
            hint="the file is damaged or not from andrea-diag",
        )
    return value


def _write_error(path: Path, e: OSError) -> UserError:
    if e.errno == 28:  # ENOSPC
        return UserError(f"no space left on the device writing {path}",
                         hint="free space, then resume")  # fmt: skip
    return UserError(f"cannot write {path}: {e.strerror}")


def remove_file(path: Path, what: str) -> None:
    """Remove a file the run rewrites (a link is removed, never followed); nothing there is
    fine. Anything else in its place (a directory, say) is one line: it is not ours to delete."""
    try:
        Path(path).unlink(missing_ok=True)
    except IsADirectoryError:
        raise UserError(f"{what} {path} is a directory, not the file the run writes",
                        hint="move it out of the run, then resume") from None  # fmt: skip
    except OSError as e:
        raise UserError(f"cannot remove {what} {path}: {e.strerror}") from None


def make_out_dir(path: Path, what: str = "--out") -> Path:
    """Create the output folder ``path`` (with its parents) and prove it writable, or one line.

    Called before the work: a file in its place or a read-only disk found after minutes of
    measuring would cost the measurement. The probe is a fresh temp file (``O_EXCL``): a link
    planted in the folder is never written through."""
    path = check_path(path, what)
    try:  # exists() too: a path too long in all (PATH_MAX) is an OSError there
        if path.exists() and not path.is_dir():
            raise UserError(f"{what} {path} is a file, not a directory", hint="give another --out")
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test.", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UserError(
            f"cannot create or write the output directory {path} ({e.strerror or e})",
            hint="choose an --out on a writable disk",
        ) from None
    return path


def make_fresh_dir(parent: Path, prefix: str, what: str) -> Path:
    """A new, empty folder in ``parent`` (``prefix`` + a random tail): ``mkdir`` fails on any
    existing name, a planted link too. Mode: ``mkdir``'s (0777 less umask), not mkdtemp's 0700."""
    try:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        os.chmod(path, 0o777 & ~_umask())
    except OSError as e:
        raise UserError(f"cannot create {what} in {parent}: {e.strerror or e}") from None
    return path


def open_new_file(path: Path, what: str) -> IO[bytes]:
    """``path`` emptied and opened for writing bytes (a log), never through a link: whatever
    file or link was there is removed first (:func:`remove_file`), then made with ``O_EXCL``."""
    remove_file(path, what)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
    try:
        fd = os.open(path, flags, file_mode())
    except OSError as e:
        raise _write_error(Path(path), e) from None
    return os.fdopen(fd, "wb")


def file_mode() -> int:
    """The mode ``open(path, "w")`` gives (0666 less the umask): mkstemp's 0600 hides a run."""
    return 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it: put straight back
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and a rename: a link at
    ``path`` is replaced, not written through, and a reader never sees half a file. On any
    error (a full disk) the temp file is removed and one line raised."""
    path = Path(path)
    fd, tmp = -1, None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:40]}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as f:
            fd = -1  # owned by f now
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise _write_error(path, e) from None
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write_bytes` of UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def unshare(path: Path) -> None:
    """Give ``path`` an inode of its own before it is changed in place (appended to, cut
    back): a regular file with other hard links is copied to a fresh file of the same name
    (atomic rename). A link planted in a run to an outside file, or a run copied with
    ``cp -al``, then keeps the other name's bytes as they were."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise _write_error(Path(path), e) from None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink <= 1:
        return
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:200]}.", dir=path.parent)
    try:
        src = os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(src, "rb") as fin, os.fdopen(fd, "wb") as fout:
            fd = -1  # the with block closes it
            shutil.copyfileobj(fin, fout)
            fout.flush()
            os.fsync(fout.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        os.replace(tmp, path)
    except OSError as e:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _write_error(path, e) from None


def open_append_file(path: Path) -> IO[str]:
    """Like :func:`open_append`, for a file kept open (the caller closes it). A file with
    other hard links is first given its own inode (:func:`unshare`): appending never changes
    a file outside the run."""
    unshare(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == 40:  # ELOOP: the name is a symlink
            raise UserError(
                f"{path} is a symbolic link", hint="refusing to write through it"
            ) from None
        raise _write_error(Path(path), e) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"{path} is not a regular file", hint="refusing to write to it")
    return os.fdopen(fd, "a", encoding="utf-8")


# a file object is its own context manager: ``with open_append(path) as f`` closes it
open_append = open_append_file
