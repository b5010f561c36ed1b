"""Pre-tokenized sources: token ids with their own vocabulary, which skip the toolkit tokenizer.

    andrea-diag cascade --source gutenberg=train.bin --vocab-size 50304     # nanoGPT's uint16
    andrea-diag cascade --source gutenberg=ids.bin:uint32 --vocab-size 100277
    andrea-diag cascade --source gutenberg=ids.npy --vocab-size 50304      # any integer .npy

A token source is one of:

- ``NAME=PATH.bin[:DTYPE]``: raw little-endian token ids, no header (nanoGPT's ``train.bin``).
  DTYPE is ``uint16`` (the default, as nanoGPT writes it), ``uint32``, ``int32`` or ``int64``.
- ``NAME=PATH.npy``: a 1-D ``.npy`` array of integers (its header names the dtype; no pickles).
- a ``--data`` factory's value: a 1-D integer ``torch.Tensor`` or ``numpy.ndarray``.

Every source of a run is then token ids of one vocabulary, declared with ``--vocab-size``: text
and token ids cannot be mixed (no text shares a foreign vocabulary), and only the given sources
are used. Each source's stream is split into training part and held-out tail like text
(``heldout.py``). Every user-caused problem is one :class:`~andrea_diag.errors.UserError` line.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from andrea_diag.data.whole_file import TOKEN_COPIES, read_whole
from andrea_diag.errors import UserError

TOKEN_SUFFIXES = (".bin", ".npy")
BIN_DTYPES = ("uint16", "uint32", "int32", "int64")  # raw .bin ids, little-endian
DEFAULT_BIN_DTYPE = "uint16"  # nanoGPT's prepare.py writes np.uint16
TOKEN_RECIPE = "token-ids-v1"  # part of the data key: token streams never share a text key


@dataclass(frozen=True)
class TokenSource:
    """One source given as token ids: the 1-D int64 stream and where it came from."""

    name: str
    ids: torch.Tensor = field(repr=False)  # (n_tokens,) int64
    origin: str  # "token ids: /data/train.bin (uint16)" or "data factory: mod:load"
    path: str | None  # the file, resolved; None for a factory's tensor
    dtype: str  # as stored: the file's dtype or the factory tensor's
    sha256: str  # of the file's bytes (``sha256sum`` agrees); of the ids as int64 LE otherwise
    vocab_size: int
    n_bytes: int  # the file's size, or the factory array's
    generated: bool = False

    def describe(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "generated": False,
            "kind": "token-ids",
            "path": self.path,
            "dtype": self.dtype,
            "n_bytes": self.n_bytes,
            "n_tokens": int(self.ids.numel()),
            "sha256": self.sha256,
            "vocab_size": self.vocab_size,
        }


def split_spec(path: str) -> tuple[str, str | None] | None:
    """``(file, dtype or None)`` when ``path`` names a token file (``.bin``/``.npy``), else None."""
    file, sep, dtype = path.rpartition(":")
    if sep and file.lower().endswith(TOKEN_SUFFIXES) and dtype and "/" not in dtype:
        return file, dtype.strip().lower()
    return (path, None) if path.lower().endswith(TOKEN_SUFFIXES) else None


def is_token_spec(path: str) -> bool:
    return split_spec(path) is not None


def _read_bytes(p: Path, name: str) -> bytes:
    try:
        if not p.is_file():
            what = "does not exist" if not p.exists() else "is not a regular file"
            raise UserError(f"source {name}: {str(p)!r} {what}")
        return read_whole(p, name, TOKEN_COPIES)  # too large for memory: one line
    except OSError as exc:
        raise UserError(f"source {name}: cannot read {str(p)!r} ({exc.strerror})") from None


def _from_bin(raw: bytes, p: Path, name: str, dtype: str) -> np.ndarray:
    if dtype not in BIN_DTYPES:
        raise UserError(
            f"source {name}: unknown token dtype {dtype!r} for {str(p)!r}",
            hint=f"write PATH.bin:DTYPE with DTYPE one of {', '.join(BIN_DTYPES)}",
        )
    width = np.dtype(dtype).itemsize
    if len(raw) % width:
        raise UserError(
            f"source {name}: {str(p)!r} has {len(raw)} bytes, not a whole number of {dtype} "
            f"ids ({width} bytes each)",
            hint="a .bin of token ids is raw little-endian integers; name its dtype: "
            f"{p.name}:uint16 (nanoGPT) or :uint32",
        )
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))


def _from_npy(raw: bytes, p: Path, name: str) -> np.ndarray:
    import io

    try:
        arr = np.load(io.BytesIO(raw), allow_pickle=False)  # a run never unpickles user files
    except (ValueError, OSError, EOFError) as exc:
        if "pickle" in str(exc).lower():  # numpy's words advise loading it unsafely: not ours
            raise UserError(
                f"source {name}: {str(p)!r} holds Python objects (pickled data), not token ids",
                hint="a run never unpickles a file: save integer ids (np.save of an int array)",
            ) from None
        raise UserError(f"source {name}: {str(p)!r} is not a readable .npy array ({exc})") from None
    if not isinstance(arr, np.ndarray):
        raise UserError(f"source {name}: {str(p)!r} holds several arrays (.npz), not one")
    return arr


def check_ids(arr: Any, name: str, where: str, vocab_size: int | None) -> torch.Tensor:
    """A 1-D integer array with ids in ``[0, vocab_size)`` as an int64 tensor, or one line."""
    if isinstance(arr, torch.Tensor):
        if arr.is_floating_point() or arr.is_complex() or arr.dtype == torch.bool:
            raise UserError(
                f"source {name}: {where} holds {arr.dtype} values, not integer token ids",
                hint="token ids are integers (uint16, uint32, int32 or int64)",
            )
        arr = arr.detach().cpu().numpy()
    if arr.dtype.kind not in "iu":
        raise UserError(
            f"source {name}: {where} holds {arr.dtype} values, not integer token ids",
            hint="token ids are integers (uint16, uint32, int32 or int64)",
        )
    if arr.ndim != 1:
        raise UserError(f"source {name}: {where} has shape {arr.shape}, not a 1-D token stream")
    if arr.size == 0:
        raise UserError(f"source {name}: {where} holds no token ids")
    if vocab_size is None:
        raise UserError(
            f"source {name}: {where} is token ids, but no vocabulary size was declared",
            hint="add --vocab-size N (e.g. 50304 for nanoGPT's GPT-2 ids)",
        )
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise UserError(
            f"source {name}: {where} holds token id {bad}, outside the vocabulary "
            f"0..{vocab_size - 1} (--vocab-size {vocab_size})",
            hint="declare the vocabulary the ids were made with, e.g. --vocab-size 50304",
        )
    return torch.from_numpy(arr.astype(np.int64))


def load_token_file(name: str, spec: str, vocab_size: int | None) -> TokenSource:
    """Read ``PATH.bin[:DTYPE]`` or ``PATH.npy`` as source ``name``'s token ids."""
    file, dtype = split_spec(spec) or (spec, None)
    p = Path(file).expanduser()
    raw = _read_bytes(p, name)
    if not raw:
        raise UserError(f"source {name}: {str(p)!r} is empty")
    if p.suffix.lower() == ".npy":
        if dtype is not None:
            raise UserError(
                f"source {name}: a .npy names its own dtype; drop ':{dtype}' from {spec!r}"
            )
        arr = _from_npy(raw, p, name)
    else:
        arr = _from_bin(raw, p, name, dtype or DEFAULT_BIN_DTYPE)
    ids = check_ids(arr, name, repr(str(p)), vocab_size)
    stored = str(arr.dtype)
    return TokenSource(
        name, ids, f"token ids: {p.resolve()} ({stored})", str(p.resolve()), stored,
        hashlib.sha256(raw).hexdigest(), int(vocab_size), len(raw),  # type: ignore[arg-type]
    )  # fmt: skip


def token_source(name: str, value: Any, origin: str, vocab_size: int | None) -> TokenSource:
    """A factory's tensor or array as a token source (its sha256: the ids as int64 LE)."""
    ids = check_ids(value, name, "the --data factory's value", vocab_size)
    sha = hashlib.sha256(ids.numpy().astype("<i8", copy=False).tobytes()).hexdigest()
    return TokenSource(
        name,
        ids,
        origin,
        None,
        str(value.dtype).removeprefix("torch."),
        sha,
        int(vocab_size),  # type: ignore[arg-type]
        int(value.numel() * value.element_size())
        if isinstance(value, torch.Tensor)
        else value.nbytes,
    )


def is_token_value(value: Any) -> bool:
    """A factory value that is an array or tensor (token ids), not a list of documents."""
    return isinstance(value, (torch.Tensor, np.ndarray))


def token_data_key(sources: dict[str, TokenSource], vocab_size: int) -> str:
    """Hex sha256 of (recipe, vocab size, every source's sha256): a resume's data identity."""
    payload = {
        "recipe": TOKEN_RECIPE,
        "vocab_size": vocab_size,
        "sources": {n: s.sha256 for n, s in sources.items()},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
