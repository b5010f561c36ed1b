"""The outlier a run injects on purpose (``--inject outlier@UPDATE``): rare-token sequences
swapped into one microbatch of that update's batch, drawn from a generator of its own, so every
arm of a cascade gets the same outlier at the same place.

    rng = outlier_generator(cfg.seed, update)
    batch = make_outlier_batch(batch, rng, vocab_size, rare_ids=data.rare_token_ids())
"""

from __future__ import annotations

import dataclasses

import torch

from andrea_diag.data.batches import Batch, tokens_hash
from andrea_diag.data.seeds import batch_seed


def outlier_generator(seed: int, update: int) -> torch.Generator:
    """The private generator an injection at ``update`` should use (same in every arm)."""
    return torch.Generator().manual_seed(batch_seed(seed, update, tag="outlier"))


def make_outlier_batch(
    batch: Batch,
    rng: torch.Generator,
    vocab_size: int,
    rare_ids: torch.Tensor | None = None,
    n_sequences: int = 1,
) -> Batch:
    """A copy of ``batch`` where ``n_sequences`` sequences of one microbatch are rare tokens.

    The seeds' first spike source is "one sequence with a very rare token combination": the
    replaced sequences are i.i.d. draws from ``rare_ids`` (pass
    ``PreparedData.rare_token_ids()``); without it, the top 256 ids, which byte-level BPE
    assigns to its last, least frequent merges. The microbatch is chosen by ``rng``.
    """
    a_dim, m_dim, t1 = batch.tokens.shape
    n = max(1, min(n_sequences, m_dim))
    pool = rare_ids if rare_ids is not None else torch.arange(max(1, vocab_size - 256), vocab_size)
    pool = pool.to(torch.int64)
    a = int(torch.randint(a_dim, (1,), generator=rng))
    picks = torch.randint(pool.numel(), (n, t1), generator=rng)  # (n, T+1)
    tokens = batch.tokens.clone()
    tokens[a, :n] = pool[picks]
    injected = batch.injected.clone()
    injected[a, :n] = True
    return dataclasses.replace(batch, tokens=tokens, hash=tokens_hash(tokens), injected=injected)
