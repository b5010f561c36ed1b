"""One call from sources to token streams: :func:`prepare_data`.

    >>> from andrea_diag.data import prepare_data
    >>> data = prepare_data()                       # first time: ~5 s on 2 cores, then cached
    >>> data.streams["gutenberg"].shape             # 1-D int64 token ids   # doctest: +SKIP
    >>> json.dumps(data.describe())                 # saved as data.json in run directories

``seed`` is the *corpus* seed: it picks the bytes of the generated sources. Keep it fixed (the
default 0) across a sweep over training seeds, so every run shares one tokenizer and its token
ids (and losses) stay comparable; the training seed belongs to the mixer and the batches.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from andrea_diag.config import SOURCE_NAMES, VOCAB_SIZE
from andrea_diag.data.corpus import DEFAULT_TARGET_BYTES, EOT, Source, build_sources
from andrea_diag.data.tokenizer import (
    RECIPE_VERSION,
    SPECIAL_TOKENS,
    data_key,
    load_or_encode_streams,
    load_or_train_tokenizer,
    tokenizer_sha256,
)


@dataclasses.dataclass
class PreparedData:
    """Sources, tokenizer and 1-D int64 token streams, in ``SOURCE_NAMES`` order."""

    sources: dict[str, Source]
    tokenizer: Tokenizer
    streams: dict[str, torch.Tensor]  # name -> (n_tokens,) int64
    key: str  # data_key(): identifies the sources' bytes + vocab size
    tokenizer_path: Path  # its cache file; absent when the cache folder was unwritable
    seed: int
    trained: bool  # True when this call trained the tokenizer (False: loaded from the cache)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def eot_id(self) -> int:
        return int(self.tokenizer.token_to_id(EOT))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int] | torch.Tensor) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    @cached_property
    def token_counts(self) -> torch.Tensor:
        """(vocab,) int64: how often each id occurs across all streams."""
        counts = torch.zeros(self.vocab_size, dtype=torch.int64)
        for s in self.streams.values():
            counts += torch.bincount(s, minlength=self.vocab_size)
        return counts

    def rare_token_ids(self, k: int = 256) -> torch.Tensor:
        """The ``k`` ids that occur least in the streams (special tokens excluded), ties by id.

        These feed the outlier injection: a sequence built from them is a "very rare token
        combination" in the seeds' sense, so its loss and gradient sit far from the mean.
        """
        counts = self.token_counts.clone()
        for tok in SPECIAL_TOKENS:
            counts[self.tokenizer.token_to_id(tok)] = torch.iinfo(torch.int64).max
        order = torch.argsort(counts, stable=True)  # stable: ties broken by id, deterministic
        return order[: min(k, self.vocab_size - len(SPECIAL_TOKENS))]

    def describe(self) -> dict[str, Any]:
        """JSON-able summary, saved as ``data.json`` in a run directory."""
        return {
            "data_key": self.key,
            "corpus_seed": self.seed,
            "tokenizer": {
                "kind": RECIPE_VERSION,
                "vocab_size": self.vocab_size,
                "special_tokens": list(SPECIAL_TOKENS),
                "path": str(self.tokenizer_path),
                # Hashed from the tokenizer itself (equal to the cache file's sha256): the file
                # is absent when the cache folder could not be written.
                "sha256": tokenizer_sha256(self.tokenizer),
            },
            "sources": {
                name: {**src.describe(), "n_tokens": int(self.streams[name].numel())}
                for name, src in self.sources.items()
            },
            "generated_sources": [n for n, s in self.sources.items() if s.generated],
        }


def prepare_data(
    overrides: dict[str, str] | None = None,
    seed: int = 0,
    cache_dir: Path | str | None = None,
    *,
    vocab_size: int = VOCAB_SIZE,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    given: dict[str, Source] | None = None,
) -> PreparedData:
    """Build the sources, then load or train the tokenizer and load or encode the streams.

    ``overrides`` maps source names to user paths (see :func:`corpus.load_override`);
    ``given`` holds sources already built (``--data``'s factory: ``andrea_diag.factories``);
    ``seed`` is the corpus seed (see the module docstring); ``cache_dir`` defaults to
    ``$ANDREA_DIAG_CACHE`` or ``~/.cache/andrea-diag``. Every cached file is verified before use
    and rebuilt when truncated or corrupt; an unwritable cache folder means this call works from
    memory (one warning line each; see :mod:`andrea_diag.data.tokenizer`).
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else None
    sources = build_sources(overrides, seed=seed, target_bytes=target_bytes, given=given)
    tok, path, trained = load_or_train_tokenizer(sources, vocab_size, cache)
    arrays, _ = load_or_encode_streams(tok, path, sources)
    streams = {
        name: torch.from_numpy(arrays[name].astype(np.int64, copy=False)) for name in SOURCE_NAMES
    }
    return PreparedData(
        sources=sources,
        tokenizer=tok,
        streams=streams,
        key=data_key(sources, vocab_size),
        tokenizer_path=path,
        seed=seed,
        trained=trained,
    )
