"""accum-check's gradients: the toolkit's loop, each classic mistake, and the full-batch reference.

    from andrea_diag.experiments.accum_loops import split, toolkit_grad
    from andrea_diag.train.components import make_precision
    g = toolkit_grad(model, split(x, y, 4, 4), make_precision("bf16", dev), opt)  # D = x's / 16

Every loop runs through the trainer's own components (``train/components.py``): the
:class:`~andrea_diag.train.components.Precision` the trainer would build for ``--precision``
(its autocast, its backward; fp16: its GradScaler, undone by its ``unscale_``), and a
:class:`~andrea_diag.train.components.Reducer` for the replicas. The toolkit's loop is the
trainer's :func:`~andrea_diag.train.components.accumulate_with`; the mistakes are written out,
wrong on purpose, under the same precision and the same replica reduction.
CLI: ``andrea-diag accum-check``; the rows: andrea_diag/experiments/accum_check.py.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from andrea_diag.config import RECIPES
from andrea_diag.train.accumulation import IGNORE, iterate_groups
from andrea_diag.train.components import Precision, Reducer, accumulate_with
from andrea_diag.train.optim import build_scheduler, warmup_factor

MB = tuple[torch.Tensor, torch.Tensor]  # one microbatch: inputs (B, T), targets (B, T)
Body = Callable[[int, list[MB]], None]  # runs one replica's group: (replica, microbatches)
WARMUP_UPDATES = RECIPES["v2"].warmup_updates  # the v2 recipe's linear warmup (100 updates)
MAX_HALVINGS = 24  # fp16: from the GradScaler's 2^16 down to 2^-8, past any scale that fits


class InProcessReplicas(Reducer):
    """D data-parallel replicas run one after another in one process, by ``DDPReducer``'s rules.

    ``global_tokens`` is the all-reduced token count (every replica's, known before the first
    microbatch, as DDP's all-reduce of the counts gives it); ``backward_factor`` is D (undoing
    the average); ``reduce`` after replica ``rank``'s group keeps its gradients, and after the
    last replica's sets every ``.grad`` to their mean (DDP's all-reduce average). The caller sets
    ``rank`` and zeroes the gradients before each replica's group.
    """

    def __init__(self, local_tokens: list[int]) -> None:
        self.counts = list(local_tokens)
        self.world_size, self.rank = len(self.counts), 0
        self._sum: list[torch.Tensor] | None = None

    def global_tokens(self, local: int, device: torch.device) -> int:
        del device
        # the count accumulate_group made must be the one this replica declared
        assert local == self.counts[self.rank], (local, self.counts, self.rank)
        return sum(self.counts)

    def backward_factor(self) -> float:
        return float(self.world_size)

    def reduce(self, params: list[torch.nn.Parameter]) -> None:
        grads = [p.grad.detach().clone() for p in params]  # type: ignore[union-attr]
        self._sum = (
            grads if self._sum is None else [a + g for a, g in zip(self._sum, grads, strict=True)]
        )
        if self.rank == self.world_size - 1:  # the all-reduce: every replica's gradients in
            for p, total in zip(params, self._sum, strict=True):
                p.grad.copy_(total / self.world_size)  # type: ignore[union-attr]
            self._sum = None


def make_batch(n: int, seq_len: int, vocab: int, gen: torch.Generator) -> MB:
    """n random sequences, supervised lengths in 1..seq_len, sorted longest first.

    As a length-bucketing loader yields them, the first one full and the last one a single token:
    consecutive microbatches (and replicas) hold non-increasing token counts with first > last,
    so mean of means and replica-local denominators must differ."""
    x = torch.randint(0, vocab, (n, seq_len), generator=gen)
    y = torch.randint(0, vocab, (n, seq_len), generator=gen)
    lengths = torch.randint(1, seq_len + 1, (n,), generator=gen)
    lengths[0], lengths[-1] = seq_len, 1
    for i, n_tok in enumerate(lengths.sort(descending=True).values.tolist()):
        y[i, n_tok:] = IGNORE
    return x, y


def split(x: torch.Tensor, y: torch.Tensor, m: int, accum: int) -> list[list[MB]]:
    """Replica r takes its own contiguous slice of m × A sequences, cut into A microbatches."""
    return [
        [(x[s + i * m : s + (i + 1) * m], y[s + i * m : s + (i + 1) * m]) for i in range(accum)]
        for s in range(0, x.size(0), m * accum)
    ]


def tokens(y: torch.Tensor) -> int:
    return int((y != IGNORE).sum())


def rel_err(g: torch.Tensor, ref: torch.Tensor) -> float:
    """‖g − ref‖ / ‖ref‖, the norms accumulated in float64."""
    diff = torch.linalg.vector_norm(g - ref, dtype=torch.float64)
    return float(diff / torch.linalg.vector_norm(ref, dtype=torch.float64))


def true_grad(
    model: torch.nn.Module, precision: Precision, opt: torch.optim.Optimizer
) -> torch.Tensor:
    """The flat gradient in true units, by the trainer's path after the backward: the
    precision's ``unscale_`` (fp16: the GradScaler's), then its ``step`` with the update not
    applied (fp16: the scaler's ``update``, which ends this "update" for it)."""
    precision.unscale_(opt)
    g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])  # type: ignore[union-attr]
    precision.step(opt, applied=False)
    return g


def until_finite(precision: Precision, measure: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``measure()`` (one whole loop, grads zeroed first), again while its gradient is
    non-finite under a loss scale: each overflow's skipped step has halved the GradScaler's
    scale, as the trainer's next update would run at it. Unscaled precisions run it once."""
    for _ in range(MAX_HALVINGS):
        g = measure()
        if precision.scale() is None or bool(torch.isfinite(g).all()):  # host sync
            return g
    return g  # still non-finite: the row's error says so (and fails its criterion)


def _backward(model: torch.nn.Module, mb: MB, precision: Precision, divisor: float) -> None:
    """The precision's backward of (sum of token losses) / divisor, under its autocast."""
    with precision.autocast():
        logits = model(mb[0])  # (B, T, V)
    if torch.finfo(logits.dtype).bits < 32:  # autocast's output (the fp64 floor stays fp64)
        logits = logits.float()  # an fp32 softmax, as accumulate_group does
    loss_sum = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)), mb[1].reshape(-1), ignore_index=IGNORE, reduction="sum"
    )
    precision.backward(loss_sum / divisor)


def full_batch_grad(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, precision: Precision,
    opt: torch.optim.Optimizer,
) -> torch.Tensor:  # fmt: skip
    """The reference: one forward/backward over every sequence, token-weighted loss."""

    def once() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        _backward(model, (x, y), precision, tokens(y))
        return true_grad(model, precision, opt)

    return until_finite(precision, once)


def _replica_grad(
    model: torch.nn.Module, replicas: list[list[MB]], body: Body, precision: Precision,
    opt: torch.optim.Optimizer,
) -> torch.Tensor:  # fmt: skip
    """``body`` per replica on fresh grads (same weights, as in DDP), reduced as DDP does."""
    reducer = InProcessReplicas([sum(tokens(y) for _, y in mbs) for mbs in replicas])
    params = list(model.parameters())

    def once() -> torch.Tensor:
        for r, mbs in enumerate(replicas):
            reducer.rank = r
            model.zero_grad(set_to_none=True)  # before each replica's group: the caller's job
            body(r, mbs)
            reducer.reduce(params)
        return true_grad(model, precision, opt)

    return until_finite(precision, once)


def toolkit_grad(
    model: torch.nn.Module, replicas: list[list[MB]], precision: Precision,
    opt: torch.optim.Optimizer,
) -> torch.Tensor:  # fmt: skip
    """The trainer's ``accumulate_with`` per replica, through :class:`InProcessReplicas`."""
    reducer = InProcessReplicas([sum(tokens(y) for _, y in mbs) for mbs in replicas])
    params, dev = list(model.parameters()), next(model.parameters()).device

    def once() -> torch.Tensor:
        for r, mbs in enumerate(replicas):
            reducer.rank = r
            model.zero_grad(set_to_none=True)  # the trainer zeroes between groups
            res = accumulate_with(model, mbs, precision, reducer, dev)
            assert res.tokens == sum(reducer.counts)  # the global denominator, on every replica
            reducer.reduce(params)
        return true_grad(model, precision, opt)

    return until_finite(precision, once)


def _divided(
    precision: Precision, model: torch.nn.Module, divisor: Callable[[int, torch.Tensor], float]
) -> Body:
    """A replica's group, each microbatch's token-loss sum over ``divisor(replica, targets)``."""

    def body(r: int, mbs: list[MB]) -> None:
        for x, y in mbs:
            _backward(model, (x, y), precision, divisor(r, y))

    return body


def mistake_grads(
    model: torch.nn.Module, replicas: list[list[MB]], previous: list[list[MB]],
    precision: Precision, opt: torch.optim.Optimizer,
) -> Iterator[tuple[str, torch.Tensor]]:  # fmt: skip
    """Each classic mistake, deliberately wrong, on the same replicas: (method, gradient).

    The replicas' gradients are averaged as DDP does; a divisor "share" is the toolkit's own
    on one replica: the N global tokens, with its × D at backward (N / D)."""
    a, d = len(replicas[0]), len(replicas)
    share = sum(tokens(y) for mbs in replicas for _, y in mbs) / d
    prev_share = sum(tokens(y) for mbs in previous for _, y in mbs) / d
    n_local = [sum(tokens(y) for _, y in mbs) for mbs in replicas]

    def zero_every_microbatch(r: int, mbs: list[MB]) -> None:
        for mb in mbs:
            model.zero_grad(set_to_none=True)  # the mistake: only the last microbatch survives
            _backward(model, mb, precision, share)

    def no_zeroing(r: int, mbs: list[MB]) -> None:
        for mb in previous[r]:  # the group before, right in itself, still in .grad
            _backward(model, mb, precision, prev_share)
        for mb in mbs:
            _backward(model, mb, precision, share)

    bodies: dict[str, Body] = {
        # each microbatch's own token mean, / A; replicas averaged (DDP's mean)
        "mean of microbatch means": _divided(precision, model, lambda r, y: tokens(y) * a),
        # already over the group's (global) tokens, then divided by A again
        "double division (÷A twice)": _divided(precision, model, lambda r, y: share * a),
        "zero grads every microbatch": zero_every_microbatch,
        "no zeroing between groups": no_zeroing,
    }
    if d > 1:  # each replica over its own tokens, then DDP averages (D = 1: no difference)
        bodies["replica-local denominator"] = _divided(precision, model, lambda r, y: n_local[r])
    for name, body in bodies.items():
        yield name, _replica_grad(model, replicas, body, precision, opt)


def partial_group_errors(
    model: torch.nn.Module, m: int, a: int, seq_len: int, vocab: int, gen: torch.Generator,
    precision: Precision, opt: torch.optim.Optimizer,
) -> tuple[float, float, int]:  # fmt: skip
    """A dataset of A + A//2 microbatches of m sequences, so its last group is short (D = 1).

    (toolkit error, mistake error, microbatches in the last group), against the last group's own
    full batch. The toolkit groups with ``iterate_groups`` ("use-real-denominator"); the mistake
    divides by A × tokens per microbatch, though only A//2 came: its error is 1 - (A//2)/A.
    """
    dev = next(model.parameters()).device
    x, y = (t.to(dev) for t in make_batch((a + a // 2) * m, seq_len, vocab, gen))
    stream = [(x[i : i + m], y[i : i + m]) for i in range(0, x.size(0), m)]
    last, is_partial = list(iterate_groups(stream, a))[-1]
    assert is_partial and 0 < len(last) < a
    lx, ly = torch.cat([b[0] for b in last]), torch.cat([b[1] for b in last])
    ref = full_batch_grad(model, lx, ly, precision, opt)
    good = toolkit_grad(model, [last], precision, opt)
    per_mb = tokens(ly) / len(last)  # tokens per microbatch: right; times A, not len(last): wrong
    body = _divided(precision, model, lambda r, y: per_mb * a)
    bad = _replica_grad(model, [last], body, precision, opt)
    return rel_err(good, ref), rel_err(bad, ref), len(last)


def scheduler_lr_error(
    model: torch.nn.Module, mbs: list[MB], precision: Precision
) -> tuple[float, float]:
    """lr reached after one update when the scheduler steps per microbatch vs per update.

    A copy of the model takes one real update (SGD, the v2 recipe's lr and WARMUP_UPDATES of
    linear warmup; the precision's backward, unscale_ and step) with ``scheduler.step()`` after
    every microbatch's backward: it then sits at warmup_factor(A + 1), where the per-update
    schedule is at warmup_factor(2). (actual, intended)
    """
    base = RECIPES["v2"].lr
    work = copy.deepcopy(model)
    opt = torch.optim.SGD(work.parameters(), lr=base)
    sched = build_scheduler(opt, WARMUP_UPDATES)
    opt.zero_grad(set_to_none=True)
    n = sum(tokens(y) for _, y in mbs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about the step order: that is the mistake
        for mb in mbs:
            _backward(work, mb, precision, n)
            sched.step()  # the mistake: once per microbatch
        precision.unscale_(opt)
        precision.step(opt, applied=True)
    return float(opt.param_groups[0]["lr"]), base * warmup_factor(2, WARMUP_UPDATES)
