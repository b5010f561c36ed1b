"""One call from sources to token streams: :func:`prepare_data`.

    >>> from andrea_diag.data import prepare_data
    >>> data = prepare_data()                       # first time: ~5 s on 2 cores, then cached
    >>> data.streams["gutenberg"].shape             # 1-D int64 token ids   # doctest: +SKIP
    >>> import json
    >>> text = json.dumps(data.describe())          # saved as data.json in run directories

``seed`` is the *corpus* seed: it picks the bytes of the generated sources. Keep it fixed (the
default 0) across a sweep over training seeds, so every run shares one tokenizer and its token
ids (and losses) stay comparable; the training seed belongs to the mixer and the batches.

Token-id sources (``.bin``/``.npy`` files or a factory's tensors, :mod:`token_ids`) skip the
tokenizer: ``tokenizer`` is None and ``vocab_size`` is the declared one. ``only=True`` (the CLI's
``--sources only``, implied by token ids) keeps just the given sources; otherwise the defaults
fill the rest, and ``note`` names them for the caller to print.
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
from andrea_diag.data.token_ids import TokenSource, is_token_spec, load_token_file, token_data_key
from andrea_diag.data.tokenizer import (
    RECIPE_VERSION,
    SPECIAL_TOKENS,
    data_key,
    load_or_encode_streams,
    load_or_train_tokenizer,
    tokenizer_sha256,
)
from andrea_diag.errors import UserError


@dataclasses.dataclass
class PreparedData:
    """Sources, tokenizer and 1-D int64 token streams, in ``SOURCE_NAMES`` order (the used
    sources only: ``names``)."""

    sources: dict[str, Source | TokenSource]
    tokenizer: Tokenizer | None  # None: token-id sources, which have their own vocabulary
    streams: dict[str, torch.Tensor]  # name -> (n_tokens,) int64
    key: str  # data_key(): identifies the sources' bytes + vocab size
    tokenizer_path: Path | None  # its cache file; absent when the cache folder was unwritable
    seed: int
    trained: bool  # True when this call trained the tokenizer (False: loaded from the cache)
    declared_vocab: int | None = None  # --vocab-size of token-id sources
    note: str = ""  # one line for the user: the default sources mixed in with given ones

    @property
    def names(self) -> tuple[str, ...]:
        """The sources this data mixes, in ``SOURCE_NAMES`` order."""
        return tuple(self.streams)

    @property
    def vocab_size(self) -> int:
        if self.tokenizer is None:
            return int(self.declared_vocab)  # type: ignore[arg-type]
        return self.tokenizer.get_vocab_size()

    @property
    def eot_id(self) -> int | None:
        return None if self.tokenizer is None else int(self.tokenizer.token_to_id(EOT))

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise UserError("token-id sources have no tokenizer: text cannot be encoded")
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int] | torch.Tensor) -> str:
        """The text of ``ids``; for token-id sources (no tokenizer) the ids themselves."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        if self.tokenizer is None:
            return " ".join(map(str, ids))
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
        specials = SPECIAL_TOKENS if self.tokenizer is not None else ()  # token ids: none known
        for tok in specials:
            counts[self.tokenizer.token_to_id(tok)] = torch.iinfo(torch.int64).max  # type: ignore[union-attr]
        order = torch.argsort(counts, stable=True)  # stable: ties broken by id, deterministic
        return order[: min(k, self.vocab_size - len(specials))]

    def describe(self) -> dict[str, Any]:
        """JSON-able summary, saved as ``data.json`` in a run directory."""
        if self.tokenizer is None:
            return {
                "data_key": self.key,
                "corpus_seed": self.seed,
                "tokenizer": None,  # token-id sources: their own vocabulary, no tokenizer
                "vocab": {"kind": "token-ids", "vocab_size": self.vocab_size},
                "sources": {name: src.describe() for name, src in self.sources.items()},
                "generated_sources": [],
            }
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
    given: dict[str, Source | TokenSource] | None = None,
    declared_vocab: int | None = None,
    only: bool = False,
) -> PreparedData:
    """Build the sources, then load or train the tokenizer and load or encode the streams.

    ``overrides`` maps source names to user paths (see :func:`corpus.load_override`; a
    ``.bin``/``.npy`` path is token ids, :mod:`token_ids`); ``given`` holds sources already
    built (``--data``'s factory: ``andrea_diag.factories``); ``declared_vocab`` is token ids'
    ``--vocab-size``; ``only`` drops the default sources (token ids imply it). ``seed`` is the
    corpus seed (see the module docstring); ``cache_dir`` defaults to ``$ANDREA_DIAG_CACHE`` or
    ``~/.cache/andrea-diag``. Every cached file is verified before use and rebuilt when
    truncated or corrupt; an unwritable cache folder means this call works from memory (one
    warning line each; see :mod:`andrea_diag.data.tokenizer`).
    """
    overrides, given = dict(overrides or {}), dict(given or {})
    tokens = [n for n, p in overrides.items() if is_token_spec(p)]
    tokens += [n for n, s in given.items() if isinstance(s, TokenSource)]
    if tokens:
        return _token_data(overrides, given, tokens, declared_vocab, seed)
    if declared_vocab is not None:
        raise UserError(
            f"--vocab-size {declared_vocab} declares the vocabulary of token-id sources, but "
            "every source here is text",
            hint=f"drop --vocab-size (text uses the toolkit tokenizer, vocab {vocab_size}), or "
            "give token ids (NAME=ids.bin or NAME=ids.npy)",
        )
    if only and not (overrides or given):
        raise UserError(
            "--sources only keeps just the given sources, and none was given",
            hint="add --source NAME=PATH or --data module:factory, or drop --sources only",
        )
    cache = Path(cache_dir).expanduser() if cache_dir is not None else None
    sources = build_sources(overrides, seed=seed, target_bytes=target_bytes, given=given)
    mine = overrides.keys() | given.keys()
    if only:
        sources = {n: s for n, s in sources.items() if n in mine}
    tok, path, trained = load_or_train_tokenizer(sources, vocab_size, cache)
    arrays, _ = load_or_encode_streams(tok, path, sources)
    streams = {
        name: torch.from_numpy(arrays[name].astype(np.int64, copy=False)) for name in sources
    }
    return PreparedData(
        sources=sources,
        tokenizer=tok,
        streams=streams,
        key=data_key(sources, vocab_size),
        tokenizer_path=path,
        seed=seed,
        trained=trained,
        note=_mixed_in_note(sources, mine),
    )


def _mixed_in_note(sources: dict[str, Source], mine: set[str]) -> str:
    """One line naming the default sources mixed in with given ones ("" when none or no given)."""
    defaults = [n for n in sources if n not in mine]
    if not mine or not defaults:
        return ""
    return (
        f"default sources mixed in with yours: {', '.join(defaults)} "
        "(--sources only trains on the given sources alone)"
    )


def _token_data(
    overrides: dict[str, str],
    given: dict[str, Source | TokenSource],
    tokens: list[str],
    declared_vocab: int | None,
    seed: int,
) -> PreparedData:
    """Token-id sources only: no tokenizer, no default text (none shares their vocabulary)."""
    for name in sorted({*tokens} - {*SOURCE_NAMES}) + sorted(overrides.keys() & given.keys()):
        why = "comes from both --source and --data" if name in SOURCE_NAMES else "is unknown"
        raise UserError(
            f"source {name!r} {why}", hint=f"give each of {', '.join(SOURCE_NAMES)} once"
        )
    text = sorted((overrides.keys() | given.keys()) - set(tokens))
    if text:
        raise UserError(
            f"{_named(sorted(tokens))} token ids but {_named(text)} text: a run's sources "
            "must all be token ids of one vocabulary (no text shares their vocabulary)",
            hint="give every source as .bin/.npy token ids, or every source as text",
        )
    got: dict[str, TokenSource] = {}
    for name in SOURCE_NAMES:  # the mixer's order
        if name in overrides:
            got[name] = load_token_file(name, overrides[name], declared_vocab)
        elif name in given:
            src = given[name]
            assert isinstance(src, TokenSource)
            if src.vocab_size != declared_vocab:
                raise UserError(f"source {name}: vocab size {src.vocab_size} is not "
                                f"--vocab-size {declared_vocab}")  # fmt: skip
            got[name] = src
    vocab = int(declared_vocab)  # type: ignore[arg-type]  # load_token_file refused None
    return PreparedData(
        sources=got,  # type: ignore[arg-type]
        tokenizer=None,
        streams={n: s.ids for n, s in got.items()},
        key=token_data_key(got, vocab),
        tokenizer_path=None,
        seed=seed,
        trained=False,
        declared_vocab=vocab,
    )


def _named(names: list[str]) -> str:
    """``source a is`` / ``sources a, b are``: the mixing refusal names both sides."""
    return f"source {names[0]} is" if len(names) == 1 else f"sources {', '.join(names)} are"
