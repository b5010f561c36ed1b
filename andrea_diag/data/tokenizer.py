"""Byte-level BPE with exactly 8449 tokens, trained offline on the three sources and cached.

    >>> from andrea_diag.data.corpus import build_sources
    >>> tok, path, trained = load_or_train_tokenizer(build_sources())   # seconds, then cached
    >>> tok.get_vocab_size()
    8449

8449 = 256 byte symbols + 1 special token (``<|endoftext|>``) + 8192 merges, the ANDREA vocab.
The cache lives in ``$ANDREA_DIAG_CACHE`` or ``~/.cache/andrea-diag``, one folder per
:func:`data_key` (a hash of every source's bytes and the vocab size), holding
``tokenizer.json`` and one ``<source>.npy`` token stream per source. Files are written to a
temporary name and renamed, so two processes preparing the same data cannot see half a file.
Training is deterministic: two fresh processes (different PYTHONHASHSEED) wrote byte-identical
tokenizer.json files, so a cleared cache rebuilds the same ids.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from andrea_diag.config import VOCAB_SIZE
from andrea_diag.data.corpus import EOT, Source
from andrea_diag.errors import UserError

SPECIAL_TOKENS = (EOT,)
# Bump when the training recipe changes, so old caches are not silently reused.
RECIPE_VERSION = "bytelevel-bpe-v1"


def default_cache_dir() -> Path:
    """``$ANDREA_DIAG_CACHE`` if set, else ``~/.cache/andrea-diag``."""
    env = os.environ.get("ANDREA_DIAG_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "andrea-diag"


def data_key(sources: Mapping[str, Source], vocab_size: int = VOCAB_SIZE) -> str:
    """Hex sha256 identifying (recipe, vocab size, every source's bytes): the cache key."""
    payload = {
        "recipe": RECIPE_VERSION,
        "vocab_size": vocab_size,
        "sources": {name: s.sha256 for name, s in sources.items()},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


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
    docs = [d for s in sources.values() for d in s.documents]
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    got = tok.get_vocab_size()
    if got != vocab_size:
        raise UserError(
            f"the sources are too small to train a {vocab_size}-token BPE (got {got} tokens)",
            hint="give the overridden sources more text (a few hundred KB each is plenty)",
        )
    return tok


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cache_folder(cache_dir: Path | None, key: str) -> Path:
    return (cache_dir or default_cache_dir()) / f"data-{key[:16]}"


def load_or_train_tokenizer(
    sources: Mapping[str, Source],
    vocab_size: int = VOCAB_SIZE,
    cache_dir: Path | None = None,
) -> tuple[Tokenizer, Path, bool]:
    """Return (tokenizer, its cached tokenizer.json path, whether it was trained just now)."""
    folder = _cache_folder(cache_dir, data_key(sources, vocab_size))
    path = folder / "tokenizer.json"
    if path.is_file():
        tok = Tokenizer.from_file(str(path))
        if tok.get_vocab_size() == vocab_size:
            return tok, path, False
        # A corrupt or foreign file: fall through and retrain over it.
    tok = train_tokenizer(sources, vocab_size)
    _atomic_write_bytes(path, tok.to_str().encode("utf-8"))
    return tok, path, True


def encode_documents(tokenizer: Tokenizer, documents: tuple[str, ...] | list[str]) -> np.ndarray:
    """One int32 stream: every document's ids followed by ``<|endoftext|>``."""
    eot = tokenizer.token_to_id(EOT)
    parts = []
    for enc in tokenizer.encode_batch(list(documents), add_special_tokens=False):
        parts.append(np.asarray(enc.ids, dtype=np.int32))
        parts.append(np.asarray([eot], dtype=np.int32))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def load_or_encode_streams(
    tokenizer: Tokenizer,
    tokenizer_path: Path,
    sources: Mapping[str, Source],
) -> tuple[dict[str, np.ndarray], bool]:
    """Token streams per source, cached as ``<name>.npy`` beside the tokenizer.

    Returns (streams, whether any stream was encoded just now). The folder is keyed by the
    sources' bytes, so a cached stream always belongs to the same text and tokenizer.
    """
    out: dict[str, np.ndarray] = {}
    encoded = False
    for name, source in sources.items():
        path = tokenizer_path.parent / f"{name}.npy"
        if path.is_file():
            try:
                out[name] = np.load(path)
                continue
            except (ValueError, OSError):  # truncated file: re-encode below
                pass
        arr = encode_documents(tokenizer, source.documents)
        buf = _npy_bytes(arr)
        _atomic_write_bytes(path, buf)
        out[name] = arr
        encoded = True
    return out, encoded


def _npy_bytes(arr: np.ndarray) -> bytes:
    import io

    bio = io.BytesIO()
    np.save(bio, arr, allow_pickle=False)
    return bio.getvalue()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
