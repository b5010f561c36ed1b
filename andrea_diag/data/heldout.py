"""Held-out text: the tail of every source that training never samples, and the fixed eval set.

    train = training_part(stream)             # what the batch plan draws from
    es = eval_set(data.streams, seq_len=64, seed=0)   # es.tokens (S, K, T+1), same for every arm

Every comparison between arms reads the held-out evaluation, never the last training batches:
under the bandit, a training batch mostly tells which source is being sampled (ARCHITECTURE.md).

- The last ``HELDOUT_FRACTION`` of each source's token stream is held out. The training plan
  draws sequence starts only where the whole sequence (inputs and targets) ends before it, so no
  held-out token is ever trained on.
- The eval set is ``EVAL_SEQUENCES`` sequences per source at offsets drawn once from a generator
  seeded by (seed, source): it depends on the data and the seed only, never on the arm, the
  update or the bandit's phase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from andrea_diag.config import SOURCE_NAMES
from andrea_diag.data.seeds import batch_seed
from andrea_diag.errors import UserError

HELDOUT_FRACTION = 0.05  # of each source's tokens: about 50k tokens of a 1 MB source
EVAL_SEQUENCES = 4  # per source: 12 sequences, a forward pass cheaper than one training update


def split_point(n_tokens: int) -> int:
    """Index of the first held-out token of a stream of ``n_tokens``."""
    return n_tokens - max(1, int(n_tokens * HELDOUT_FRACTION))


def training_part(stream: torch.Tensor) -> torch.Tensor:
    return stream[: split_point(stream.numel())]


@dataclass(frozen=True)
class EvalSet:
    """Fixed held-out sequences: ``tokens`` (S, K, T+1) and their absolute stream ``offsets``
    (S, K), S = the number of sources (``SOURCE_NAMES``, or the given ones under --sources only)."""

    tokens: torch.Tensor
    offsets: torch.Tensor
    sources: tuple[str, ...] = SOURCE_NAMES


def eval_set(
    streams: dict[str, torch.Tensor], seq_len: int, seed: int, per_source: int = EVAL_SEQUENCES
) -> EvalSet:
    """The eval sequences of every source in ``streams`` (in its order), drawn from its
    held-out tail only."""
    toks, offs = [], []
    for name, stream in streams.items():
        start = split_point(stream.numel())
        n_starts = stream.numel() - start - seq_len  # sequences of seq_len + 1 that fit
        if n_starts < 1:
            raise UserError(
                f"source {name}: its held-out tail ({stream.numel() - start} tokens, "
                f"{HELDOUT_FRACTION:.0%} of the text) is shorter than one sequence of "
                f"{seq_len + 1} tokens",
                hint="give that source more text, or lower --seq-len",
            )
        g = torch.Generator().manual_seed(_seed(seed, name))
        pick = torch.randperm(n_starts, generator=g)[:per_source]  # distinct when possible
        if pick.numel() < per_source:  # a tiny tail: repeat rather than fail
            pick = pick.repeat(per_source // max(1, pick.numel()) + 1)[:per_source]
        o = start + pick.sort().values  # (K,) absolute offsets
        span = torch.arange(seq_len + 1)
        toks.append(stream[o[:, None] + span].to(torch.int64))  # (K, T+1)
        offs.append(o)
    return EvalSet(torch.stack(toks), torch.stack(offs), tuple(streams))


def check_fits(streams: dict[str, torch.Tensor], seq_len: int) -> None:
    """Every source holds one training sequence and one held-out sequence of ``seq_len + 1``
    tokens, or one line naming the first that does not (before any output exists)."""
    for name, stream in streams.items():
        n = stream.numel()
        train, tail = split_point(n), n - split_point(n)
        if train < seq_len + 1 or tail < seq_len + 1:
            need = math.ceil((seq_len + 1) / HELDOUT_FRACTION) + 1  # the tail holds one
            raise UserError(
                f"source {name}: {n} tokens are too few for one sequence of {seq_len + 1} "
                f"tokens plus a held-out tail ({HELDOUT_FRACTION:.0%}) that holds one too",
                hint=f"give that source at least ~{need} tokens, or lower --seq-len",
            )


def _seed(seed: int, name: str) -> int:
    return batch_seed(seed, 0, tag=f"eval-{name}")  # the plan's own seed derivation
