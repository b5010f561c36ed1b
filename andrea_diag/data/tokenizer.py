"""Byte-level BPE with exactly 8449 tokens, trained offline on the three sources and cached.

    >>> from andrea_diag.data.corpus import build_sources
    >>> tok, path, trained = load_or_train_tokenizer(build_sources())   # seconds, then cached
    >>> tok.get_vocab_size()
    8449

8449 = 256 byte symbols + 1 special token (``<|endoftext|>``) + 8192 merges, the ANDREA vocab.
The cache lives in ``$ANDREA_DIAG_CACHE`` or ``~/.cache/andrea-diag``, one folder per
:func:`data_key` (a hash of every source's bytes and the vocab size), holding
``tokenizer.json`` and one ``<source>.npy`` token stream per source, each stream with a
``<source>.npy.json`` sidecar (its element count, dtype, sha256 and the tokenizer's sha256)
written after it. Files are written to a temporary name, fsynced and renamed, so two processes
preparing the same data cannot see half a file.
Training is deterministic: two fresh processes (different PYTHONHASHSEED) wrote byte-identical
tokenizer.json files, so a cleared cache rebuilds the same ids.

Nothing in the cache is trusted unread: a tokenizer.json that does not parse or has the wrong
vocab size is retrained, and a stream whose bytes do not match its sidecar (truncated by an
interrupted run, a full disk, a crash between the two writes, or a cache written before the
sidecars existed: those streams are re-encoded once) is re-encoded, each with one warning line.
A folder that cannot be written (read-only, permission denied, full) is not fatal: the data is
built in memory for this run, with one warning line, and rebuilt next time.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from andrea_diag.config import VOCAB_SIZE
from andrea_diag.data.corpus import EOT, Source
from andrea_diag.errors import UserError, unsafe

SPECIAL_TOKENS = (EOT,)
# Bump when the training recipe changes, so old caches are not silently reused.
RECIPE_VERSION = "bytelevel-bpe-v1"
# Names the stream sidecar's layout; a sidecar with another value is untrusted (re-encoded).
STREAM_FORMAT = "andrea-diag-stream-v1"

log = logging.getLogger("andrea_diag.data")
# Folders already reported unwritable in this process: one warning per folder, not one per file
# (a tokenizer and three streams would otherwise print four lines for the same cause).
_unwritable_warned: set[Path] = set()


_CACHE_HINT = "unset ANDREA_DIAG_CACHE, or point it at a writable folder"


def default_cache_dir() -> Path:
    """``$ANDREA_DIAG_CACHE`` if set, else ``~/.cache/andrea-diag``. A value that cannot be
    the folder meant is one line, not a folder of that name made in the current folder
    (blank, or holding a control character such as a pasted newline) or a traceback (a
    ``~user`` with no such user)."""
    env = os.environ.get("ANDREA_DIAG_CACHE")
    if env and (not env.strip() or unsafe(env)):
        raise UserError(
            f"ANDREA_DIAG_CACHE={env!r} in the environment is not a folder path",
            hint=_CACHE_HINT,
        )
    try:
        return Path(env).expanduser() if env else Path.home() / ".cache" / "andrea-diag"
    except RuntimeError:  # pathlib: "Could not determine home directory."
        where = f"ANDREA_DIAG_CACHE={env!r}" if env else "the cache (~/.cache/andrea-diag)"
        raise UserError(f"{where}: no home folder to expand ~ to", hint=_CACHE_HINT) from None


def data_key(sources: Mapping[str, Source], vocab_size: int = VOCAB_SIZE) -> str:
    """Hex sha256 identifying (recipe, vocab size, every source's bytes): the cache key."""
    payload = {
        "recipe": RECIPE_VERSION,
        "vocab_size": vocab_size,
        "sources": {name: s.sha256 for name, s in sources.items()},
    }
    if any(_LONG_RUN.search(d) for s in sources.values() for d in s.documents):
        # trained on pieces (training_pieces): not the key of one trained whole before; the
        # pinned corpora have no such run, so their key (and resumes of their runs) stay
        payload["max_run"] = MAX_RUN
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


# A run of this many characters with no break between (no whitespace, or whitespace alone) is
# cut into pieces of this length for the BPE trainer: its merge loop is quadratic in a word's
# length and runs in Rust, where no signal reaches it, so one 1 MB line held a `cascade` past
# SIGTERM (50 MB: 16 CPU-minutes, then kill -9). No document of the pinned corpora has one, so
# their tokenizer is unchanged; encoding the long run afterwards takes well under a second.
MAX_RUN = 1000
_LONG_RUN = re.compile(rf"\S{{{MAX_RUN},}}|\s{{{MAX_RUN},}}")


def training_pieces(doc: str) -> list[str]:
    """``doc`` as the trainer's units: itself, or where it holds a run of ``MAX_RUN`` or more
    characters (see MAX_RUN), the text around each run and the run in ``MAX_RUN`` pieces.

    >>> [len(p) for p in training_pieces("a " + "x" * 2500 + " b")]
    [2, 1000, 1000, 500, 2]
    >>> training_pieces("plain text")
    ['plain text']
    """
    if _LONG_RUN.search(doc) is None:
        return [doc]
    out, pos = [], 0
    for m in _LONG_RUN.finditer(doc):
        run = m.group()
        out += [doc[pos : m.start()], *(run[i : i + MAX_RUN] for i in range(0, len(run), MAX_RUN))]
        pos = m.end()
    out.append(doc[pos:])
    return [p for p in out if p]


def train_tokenizer(sources: Mapping[str, Source], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Train a byte-level BPE on all sources' documents; the result has exactly ``vocab_size``."""
    n_base = 256 + len(SPECIAL_TOKENS)
    if vocab_size <= n_base:
        raise UserError(
            f"vocab size must exceed {n_base} (bytes + special tokens), got {vocab_size}"
        )
    tok = Tokenizer(models.BPE())
    # Byte-level: every string is encodable (no <unk>) and decode(encode(s)) == s exactly.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        # All 256 byte symbols up front, so the vocabulary size does not depend on which bytes
        # happen to occur in the corpus.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Documents, not the joined text, are the training units: EOT is never split into merges.
    docs = [piece for s in sources.values() for d in s.documents for piece in training_pieces(d)]
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    got = tok.get_vocab_size()
    if got != vocab_size:
        raise UserError(
            f"the sources are too small to train a {vocab_size}-token BPE (got {got} tokens)",
            hint="give the overridden sources more text (a few hundred KB each is plenty)",
        )
    return tok


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary sibling, fsync it, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            # Without fsync a crash soon after the rename can leave an empty or short file under
            # the final name (delayed allocation); the readers would catch it, but need not.
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # the folder may refuse this too; keep the 1st error
            Path(tmp).unlink(missing_ok=True)
        raise


def _cache_write(path: Path, data: bytes) -> bool:
    """Write one cache file; when the folder refuses it, warn once and return False.

    The caller keeps its in-memory result either way: an unwritable cache costs a rebuild next
    run, never this run.
    """
    try:
        _atomic_write_bytes(path, data)
        return True
    except OSError as exc:
        folder = path.parent
        if folder not in _unwritable_warned:
            _unwritable_warned.add(folder)
            log.warning(
                "data cache %s cannot be written (%s): using the data from memory for this run "
                "(point ANDREA_DIAG_CACHE at a writable folder to keep it)",
                folder,
                exc.strerror or exc,
            )
        return False


class _Untrusted(Exception):
    """A cache file exists but cannot be trusted; the message says why (for the warning)."""


def _read_cached(path: Path) -> bytes | None:
    """The file's bytes; None when it does not exist (a first build, nothing to warn about)."""
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:  # permission denied, an I/O error, a folder in its place
        raise _Untrusted(f"unreadable: {exc.strerror or exc}") from exc


def _one_line(exc: BaseException, limit: int = 100) -> str:
    """An exception's text on one short line, for a warning that must stay one line."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cache_folder(cache_dir: Path | None, key: str) -> Path:
    """The folder holding one data key's tokenizer and streams."""
    return (cache_dir or default_cache_dir()) / f"data-{key[:16]}"


def tokenizer_sha256(tokenizer: Tokenizer) -> str:
    """Hex sha256 of the tokenizer's JSON, the bytes its cache file holds.

    Hashing the object rather than the file also works when the cache could not be written; the
    JSON is stable (a loaded tokenizer serialises to the bytes it was loaded from).
    """
    return hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()


def _load_tokenizer(path: Path, vocab_size: int) -> Tokenizer | None:
    """The cached tokenizer if sound; None if absent; raises _Untrusted if corrupt."""
    data = _read_cached(path)
    if data is None:
        return None
    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as exc:  # tokenizers raises a bare Exception for every parse error
        raise _Untrusted(f"{len(data)} bytes that do not parse: {_one_line(exc)}") from exc
    got = tok.get_vocab_size()
    if got != vocab_size or tok.token_to_id(EOT) is None:
        # The folder is keyed by vocab size, so this is a foreign or damaged file.
        raise _Untrusted(f"{got} tokens, expected {vocab_size} including {EOT}")
    return tok


def load_or_train_tokenizer(
    sources: Mapping[str, Source],
    vocab_size: int = VOCAB_SIZE,
    cache_dir: Path | None = None,
) -> tuple[Tokenizer, Path, bool]:
    """Return (tokenizer, its cached tokenizer.json path, whether it was trained just now).

    A corrupt cache file is retrained over (one warning); an unwritable folder leaves the path
    absent and the tokenizer in memory (one warning).
    """
    folder = _cache_folder(cache_dir, data_key(sources, vocab_size))
    path = folder / "tokenizer.json"
    try:
        tok = _load_tokenizer(path, vocab_size)
    except _Untrusted as why:
        log.warning("data cache %s: retraining untrusted tokenizer.json (%s)", folder, why)
        tok = None
    if tok is not None:
        return tok, path, False
    tok = train_tokenizer(sources, vocab_size)
    _cache_write(path, tok.to_str().encode("utf-8"))
    return tok, path, True


def encode_documents(tokenizer: Tokenizer, documents: tuple[str, ...] | list[str]) -> np.ndarray:
    """One int32 stream: every document's ids followed by ``<|endoftext|>``."""
    eot = tokenizer.token_to_id(EOT)
    parts = []
    for enc in tokenizer.encode_batch(list(documents), add_special_tokens=False):
        parts.append(np.asarray(enc.ids, dtype=np.int32))
        parts.append(np.asarray([eot], dtype=np.int32))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def _sidecar(path: Path) -> Path:
    """``<name>.npy`` -> ``<name>.npy.json``, the stream's length and checksum."""
    return path.with_name(path.name + ".json")


def _load_stream(path: Path, tok_sha: str) -> np.ndarray | None:
    """The cached stream if its sidecar vouches for it; None if absent; else _Untrusted."""
    data = _read_cached(path)
    if data is None:
        return None
    raw = _read_cached(_sidecar(path))
    if raw is None:
        raise _Untrusted("no checksum sidecar: an older cache or a write cut short")
    try:
        meta = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise _Untrusted("its sidecar is not JSON") from exc
    if not isinstance(meta, dict) or meta.get("format") != STREAM_FORMAT:
        raise _Untrusted("its sidecar has an unknown format")
    # The checksum first: it catches truncation and bit rot before numpy parses anything.
    if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
        raise _Untrusted(f"{len(data)} bytes whose sha256 differs from its sidecar's")
    if meta.get("tokenizer_sha256") != tok_sha:
        raise _Untrusted("encoded with a different tokenizer")
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise _Untrusted(f"not a .npy array: {_one_line(exc)}") from exc
    if arr.dtype != np.int32 or arr.ndim != 1 or arr.size != meta.get("n_tokens"):
        raise _Untrusted(
            f"{arr.dtype} {arr.shape}, its sidecar says int32 ({meta.get('n_tokens')},)"
        )
    return arr


def _write_stream(path: Path, arr: np.ndarray, tok_sha: str) -> None:
    """Write the .npy, then its sidecar: a crash between the two leaves no sidecar or a stale
    one, and either makes the next read rebuild."""
    data = _npy_bytes(arr)
    meta = {
        "format": STREAM_FORMAT,
        "dtype": "int32",
        "n_tokens": int(arr.size),
        "sha256": hashlib.sha256(data).hexdigest(),
        "tokenizer_sha256": tok_sha,
    }
    if _cache_write(path, data):
        _cache_write(_sidecar(path), json.dumps(meta, indent=1).encode("utf-8"))


def load_or_encode_streams(
    tokenizer: Tokenizer,
    tokenizer_path: Path,
    sources: Mapping[str, Source],
) -> tuple[dict[str, np.ndarray], bool]:
    """Token streams per source, cached as ``<name>.npy`` (+ sidecar) beside the tokenizer.

    Returns (streams, whether any stream was encoded just now). The folder is keyed by the
    sources' bytes and each sidecar names the tokenizer, so a stream that passes its checks
    belongs to the same text and tokenizer. Untrusted streams are re-encoded, with one warning
    line for all of them.
    """
    tok_sha = tokenizer_sha256(tokenizer)
    out: dict[str, np.ndarray] = {}
    rebuilt: list[str] = []
    encoded = False
    for name, source in sources.items():
        path = tokenizer_path.parent / f"{name}.npy"
        try:
            arr = _load_stream(path, tok_sha)
        except _Untrusted as why:
            rebuilt.append(f"{path.name} ({why})")
            arr = None
        if arr is None:
            arr = encode_documents(tokenizer, source.documents)
            _write_stream(path, arr, tok_sha)
            encoded = True
        out[name] = arr
    if rebuilt:
        log.warning(
            "data cache %s: re-encoded untrusted token streams: %s",
            tokenizer_path.parent,
            "; ".join(rebuilt),
        )
    return out, encoded


def _npy_bytes(arr: np.ndarray) -> bytes:
    """The array as .npy file bytes (no pickles), to checksum and write in one go."""
    bio = io.BytesIO()
    np.save(bio, arr, allow_pickle=False)
    return bio.getvalue()


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
