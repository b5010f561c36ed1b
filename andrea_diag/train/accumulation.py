"""One accumulation group, by MISSION.md's rules (document 002).

The rules this module pins down, each tested in tests/test_accumulation.py:

- the denominator is fixed **before** the first microbatch: the group's supervised tokens
  (targets != ``IGNORE``), so padding and ignored positions never count;
- each microbatch's loss is ``sum(token losses) / group_tokens`` (token-weighted), *not* the
  microbatch mean divided by A (mean of means is a different objective when lengths differ);
- backward per microbatch, no optimizer step in between; grads are zeroed only between groups
  (by the caller), never here;
- outputs are freed per microbatch: only detached per-example numbers are kept.
- a partial final group is handled by an explicit policy (:func:`iterate_groups`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

IGNORE = -100  # target id excluded from the loss and from the denominator


def token_weighted_mean(loss_sums: Sequence[float], token_counts: Sequence[int]) -> float:
    """The group loss: total token loss over total supervised tokens.

    >>> token_weighted_mean([512 * 2.0, 1536 * 4.0], [512, 1536])
    3.5
    """
    total = sum(token_counts)
    if total <= 0:
        raise ValueError("a group with no supervised tokens has no loss")
    return sum(loss_sums) / total


@dataclass
class GroupResult:
    """What one accumulation group measured (all detached, on the model's device)."""

    loss: torch.Tensor  # 0-dim: the token-weighted group loss
    tokens: int  # supervised tokens in the group (the denominator)
    example_loss: torch.Tensor  # (n_examples,) mean token loss of each sequence
    example_tokens: torch.Tensor  # (n_examples,) supervised tokens of each sequence
    microbatches: int = 0
    loss_sums: list[torch.Tensor] = field(default_factory=list)  # per microbatch, detached


def accumulate_group(
    model: torch.nn.Module,
    microbatches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    *,
    loss_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
    context: Callable[[int], AbstractContextManager[Any]] | None = None,
    backward: Callable[[torch.Tensor], None] | None = None,
    denominator: Callable[[int], int] | None = None,
    local_tokens: int | None = None,
) -> GroupResult:
    """Forward + backward every microbatch of one group; gradients accumulate in ``.grad``.

    ``microbatches`` are ``(inputs (B, T), targets (B, T))`` pairs whose targets may hold
    ``IGNORE``. ``loss_hook(i, loss)`` may transform microbatch i's loss before backward (the
    non-finite injection uses it). ``context(i)`` is entered around microbatch i's forward and
    backward (the trainer's precision and reducer: autocast, DDP ``no_sync``); ``backward(loss)``
    replaces ``loss.backward()`` (fp16: through the loss scaler; the recorded loss stays
    unscaled). ``denominator(local_tokens)`` gives the tokens to divide by: data-parallel replicas
    pass the all-reduced global count, so each replica's share sums to the full-batch loss.
    ``local_tokens``: the group's supervised tokens when the caller counted them on the host
    tokens (the trainer does, before the copy to the device); otherwise they are counted here,
    one host sync per microbatch. The caller zeroes grads before and steps after.
    """
    if not microbatches:
        raise ValueError("an accumulation group needs at least one microbatch")
    # Fix the denominator first: the group's supervised tokens, padding excluded.
    # A Python int (recorded in metrics): from the caller's host count, else read here (syncs).
    group_tokens = (
        local_tokens
        if local_tokens is not None
        else int(sum(int((y != IGNORE).sum()) for _, y in microbatches))
    )
    if denominator is not None:
        group_tokens = denominator(group_tokens)
    if group_tokens == 0:
        raise ValueError("the accumulation group has no supervised tokens")
    ex_loss, ex_tok, sums = [], [], []
    for i, (x, y) in enumerate(microbatches):
        with context(i) if context is not None else contextlib.nullcontext():
            logits = model(x)  # (B, T, V)
            if logits.dtype in (torch.float16, torch.bfloat16):
                logits = logits.float()  # a low-precision softmax is a spike source of its own
            tok_loss = F.cross_entropy(
                logits.reshape(-1, logits.size(-1)),
                y.reshape(-1),
                ignore_index=IGNORE,
                reduction="none",
            ).view_as(y)  # (B, T), 0 at ignored positions
            loss_sum = tok_loss.sum()
            loss = loss_sum / group_tokens
            if loss_hook is not None:
                loss = loss_hook(i, loss)
            if backward is not None:
                backward(loss)
            else:
                loss.backward()
        n_tok = (y != IGNORE).sum(dim=1)  # (B,)
        ex_loss.append(tok_loss.detach().sum(dim=1) / n_tok.clamp(min=1))
        ex_tok.append(n_tok)
        sums.append(loss.detach() * group_tokens)
        del logits, tok_loss, loss  # free the graph's outputs before the next microbatch
    total = torch.stack(sums).sum() / group_tokens
    return GroupResult(
        loss=total,
        tokens=group_tokens,
        example_loss=torch.cat(ex_loss),
        example_tokens=torch.cat(ex_tok),
        microbatches=len(microbatches),
        loss_sums=sums,
    )


def iterate_groups(
    microbatches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    accum: int,
    policy: str = "use-real-denominator",
) -> Iterator[tuple[list[tuple[torch.Tensor, torch.Tensor]], bool]]:
    """Group a finite microbatch stream into groups of ``accum``; yields (group, is_partial).

    The last group may be short. ``policy`` decides, explicitly:

    - ``"use-real-denominator"``: train on it; its denominator is its own supervised tokens
      (accumulate_group already does that), so it is not down-weighted by the missing ones;
    - ``"drop"``: skip it; it is yielded with an empty group so the caller can record which
      examples were dropped (``is_partial`` is True in both cases).
    """
    if policy not in ("use-real-denominator", "drop"):
        raise ValueError(f"unknown partial-group policy {policy!r}")
    group: list[tuple[torch.Tensor, torch.Tensor]] = []
    for mb in microbatches:
        group.append(mb)
        if len(group) == accum:
            yield group, False
            group = []
    if group:
        yield (group if policy == "use-real-denominator" else []), True
