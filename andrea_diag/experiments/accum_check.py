"""Document 002's accumulation checklist as measurements: each loop against a full batch.

    from andrea_diag.experiments.accum_check import AccumSpec, run_accum_check
    result = run_accum_check(AccumSpec(size="tiny", micro_batch=4, accum=4, replicas=2))
    print(result.ok, [(r.method, r.rel_err) for r in result.rows])  # ok: the toolkit passed

m × A × D random sequences, padded (``IGNORE`` targets, so microbatches and replicas hold
unequal supervised-token counts), go through one forward/backward as a **full batch** (summed
token losses over its supervised tokens). Each loop is measured against it as ‖g − g_full‖ /
‖g_full‖: the toolkit's own (``accumulate_group`` per simulated replica, global denominator,
gradients summed as an all-reduce would) and each classic mistake, done wrong on purpose.
CLI: ``andrea-diag accum-check``; page: andrea_diag/report/accum_page.py.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from andrea_diag.config import MODEL_PRESETS, RECIPES, ModelConfig
from andrea_diag.device import resolve_device
from andrea_diag.errors import UserError
from andrea_diag.model import GPT
from andrea_diag.train.accumulation import IGNORE, accumulate_group, iterate_groups
from andrea_diag.train.optim import build_scheduler, warmup_factor

MB = tuple[torch.Tensor, torch.Tensor]  # one microbatch: inputs (B, T), targets (B, T)
Body = Callable[[int, list[MB]], None]  # runs one replica's group: (replica, microbatches)
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
# The toolkit's loop against the full batch in the SAME precision: both round, differently
# (other matmul shapes), so the error is never 0. fp32: 1e-6, the contract. bf16/fp16: 4 units of
# the format's epsilon (2^-8, 2^-11); on tiny the loop measures ~2e-3 and ~3e-4, half the floor.
TOLERANCE = {"fp32": 1e-6, "bf16": 4 * 2.0**-8, "fp16": 4 * 2.0**-11}
# The floor: the same-precision full batch against an fp64 one. Two computations that far from
# the exact gradient may differ by twice it: tolerance = max(TOLERANCE, FLOOR_FACTOR x floor).
# tiny's fp32 floor is ~4e-7, so 1e-6 holds as is; 12m's is ~9e-7, where 1e-6 could fail a
# correct loop. Each toolkit row's criterion shows the tolerance applied.
FLOOR_FACTOR = 2.0
# A mistake is detected at this error: far above every tolerance, far below what they measure
# at A >= 2 (double division is 1 - 1/A >= 0.5; the others measured 0.5 to 2.6).
DETECT = 0.05
FP16_LOSS_SCALE = 2.0**12  # fp16 only; undone on the gradient before any comparison
WARMUP_UPDATES = RECIPES["v2"].warmup_updates  # the v2 recipe's linear warmup (100 updates)


@dataclass
class AccumSpec:
    """One check: model size, m, A, D, precision and the random batch."""

    size: str = "tiny"
    micro_batch: int = 4  # m: sequences per microbatch
    accum: int = 4  # A: microbatches per group
    replicas: int = 1  # D: simulated data-parallel replicas
    precision: str = "fp32"
    seq_len: int = 32
    seed: int = 0
    device: str = "cpu"

    def validate(self) -> ModelConfig:
        """The model preset; a :class:`UserError` for anything out of range."""
        for bad, message in (
            (self.size not in MODEL_PRESETS, f"unknown size {self.size!r}: choose tiny, 12m, 120m"),
            (self.precision not in DTYPES, f"unknown precision {self.precision!r}: fp32|bf16|fp16"),
            (self.micro_batch < 1, "--micro-batch must be at least 1"),
            # one microbatch per group: every mistake below is the right loop
            (self.accum < 2, "--accum must be at least 2: with A = 1 the mistakes cannot show"),
            (self.replicas < 1, "--replicas must be at least 1"),
        ):
            if bad:
                raise UserError(message)
        cfg = MODEL_PRESETS[self.size]
        if not 2 <= self.seq_len <= cfg.block_size:
            raise UserError(f"--seq-len must be in 2..{cfg.block_size} for {self.size}")
        return cfg


@dataclass
class CheckRow:
    """One measured loop: its error against the reference and whether it met its criterion."""

    method: str
    kind: str  # "toolkit" (<= tolerance), "mistake" (>= DETECT) or "reference" (context only)
    rel_err: float
    criterion: str  # "<= 1.00e-06", ">= 0.05" or "floor"
    passed: bool | None  # None for the reference row
    expected: float | None = None  # the analytic error, where there is one


@dataclass
class AccumCheckResult:
    """The rows and what they were measured on (``meta``: spec, tolerance, token counts)."""

    meta: dict[str, Any]
    rows: list[CheckRow] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The toolkit's own loop met its tolerance (the exit code's criterion)."""
        return all(r.passed for r in self.rows if r.kind == "toolkit")


@dataclass(frozen=True)
class _Prec:
    """Autocast and loss scale of one precision; weights and their grads stay fp32."""

    device_type: str
    dtype: torch.dtype | None
    scale: float

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.dtype is not None)


def _precision(name: str, device: torch.device) -> _Prec:
    """The precision, after checking autocast really runs it here (one clear line if not)."""
    dtype = DTYPES[name]
    prec = _Prec(device.type, dtype, FP16_LOSS_SCALE if name == "fp16" else 1.0)
    if dtype is None:
        return prec
    lin, ones = torch.nn.Linear(8, 8).to(device), torch.ones(2, 8, device=device)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an unsupported dtype warns, then runs in fp32
            with prec.autocast():
                ok = lin(ones).dtype == dtype
    except (RuntimeError, ValueError):  # older torch refuses the dtype outright
        ok = False
    if not ok:
        raise UserError(
            f"--precision {name} is not supported on {device} by torch {torch.__version__}",
            hint="use --precision fp32, or another --device",
        )
    return prec


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


def _tokens(y: torch.Tensor) -> int:
    return int((y != IGNORE).sum())


def _flat_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def rel_err(g: torch.Tensor, ref: torch.Tensor) -> float:
    """‖g − ref‖ / ‖ref‖, the norms accumulated in float64."""
    diff = torch.linalg.vector_norm(g - ref, dtype=torch.float64)
    return float(diff / torch.linalg.vector_norm(ref, dtype=torch.float64))


def _backward(model: torch.nn.Module, mb: MB, prec: _Prec, divisor: float) -> None:
    """backward of (sum of token losses) / divisor, times the loss scale."""
    with prec.autocast():
        logits = model(mb[0])  # (B, T, V)
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # an fp32 softmax, as accumulate_group does
    loss_sum = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)), mb[1].reshape(-1), ignore_index=IGNORE, reduction="sum"
    )
    (loss_sum * (prec.scale / divisor)).backward()


def full_batch_grad(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, prec: _Prec
) -> torch.Tensor:
    """The reference: one forward/backward over every sequence, token-weighted loss."""
    model.zero_grad(set_to_none=True)
    _backward(model, (x, y), prec, _tokens(y))
    return _flat_grad(model) / prec.scale  # the loss scale undone


def _replica_sum(
    model: torch.nn.Module, replicas: list[list[MB]], body: Body, prec: _Prec
) -> torch.Tensor:
    """``body`` per replica on fresh grads (same weights, as in DDP), the gradients summed."""
    total = None
    for r, mbs in enumerate(replicas):
        model.zero_grad(set_to_none=True)  # zeroed before each replica's group: the caller's job
        body(r, mbs)
        g = _flat_grad(model) / prec.scale  # the loss scale undone
        total = g if total is None else total + g  # the all-reduce (a sum)
    assert total is not None
    return total


def toolkit_grad(model: torch.nn.Module, replicas: list[list[MB]], prec: _Prec) -> torch.Tensor:
    """``accumulate_group`` per replica, rescaled to the global denominator, summed.

    accumulate_group divides by its own group's tokens n_r (it cannot see other replicas; its
    file is not ours to change), so each replica's gradient is multiplied by n_r / N (N: tokens
    over all replicas). Exact, the gradient being linear in the loss: n_r/N · ∇(Σ_r ℓ / n_r) =
    ∇(Σ_r ℓ / N), summed over replicas ∇(Σ ℓ / N). Applied to each microbatch's loss by
    ``loss_hook`` rather than to the gradient after, the backward carries 1/N per token as the
    full batch's does and rounds alike (scaling afterwards measured 4x the fp32 error at D = 2).
    """
    n_global = sum(_tokens(y) for mbs in replicas for _, y in mbs)

    def body(r: int, mbs: list[MB]) -> None:
        n_r = sum(_tokens(y) for _, y in mbs)  # accumulate_group's own denominator
        factor = n_r / n_global * prec.scale  # the loss scale rides along (fp16)
        res = accumulate_group(
            model, mbs, loss_hook=lambda i, loss: loss * factor, context=lambda i: prec.autocast()
        )
        assert res.tokens == n_r  # the same count as accumulate_group's, or the factor is wrong

    return _replica_sum(model, replicas, body, prec)


def _divided(
    model: torch.nn.Module, prec: _Prec, divisor: Callable[[int, torch.Tensor], float]
) -> Body:
    """A replica's group, each microbatch's token-loss sum over ``divisor(replica, targets)``."""

    def body(r: int, mbs: list[MB]) -> None:
        for x, y in mbs:
            _backward(model, (x, y), prec, divisor(r, y))

    return body


def mistake_grads(
    model: torch.nn.Module, replicas: list[list[MB]], previous: list[list[MB]], prec: _Prec
) -> Iterator[tuple[str, torch.Tensor]]:
    """Each classic mistake, deliberately wrong, on the same replicas: (method, gradient)."""
    a, d = len(replicas[0]), len(replicas)
    n_global = sum(_tokens(y) for mbs in replicas for _, y in mbs)
    n_prev = sum(_tokens(y) for mbs in previous for _, y in mbs)
    n_local = [sum(_tokens(y) for _, y in mbs) for mbs in replicas]

    def zero_every_microbatch(r: int, mbs: list[MB]) -> None:
        for mb in mbs:
            model.zero_grad(set_to_none=True)  # the mistake: only the last microbatch survives
            _backward(model, mb, prec, n_global)

    def no_zeroing(r: int, mbs: list[MB]) -> None:
        for mb in previous[r]:  # the group before, right in itself, still in .grad
            _backward(model, mb, prec, n_prev)
        for mb in mbs:
            _backward(model, mb, prec, n_global)

    bodies: dict[str, Body] = {
        # each microbatch's own token mean, / A; replicas averaged (DDP's mean)
        "mean of microbatch means": _divided(model, prec, lambda r, y: _tokens(y) * a * d),
        # already over the group's (global) tokens, then divided by A again
        "double division (÷A twice)": _divided(model, prec, lambda r, y: n_global * a),
        "zero grads every microbatch": zero_every_microbatch,
        "no zeroing between groups": no_zeroing,
    }
    if d > 1:  # each replica over its own tokens, then DDP averages (D = 1: no difference)
        bodies["replica-local denominator"] = _divided(model, prec, lambda r, y: n_local[r] * d)
    for name, body in bodies.items():
        yield name, _replica_sum(model, replicas, body, prec)


def partial_group_errors(
    model: torch.nn.Module, spec: AccumSpec, vocab: int, gen: torch.Generator, prec: _Prec
) -> tuple[float, float, int]:
    """A dataset of A + A//2 microbatches, so its last group is short (one process).

    (toolkit error, mistake error, microbatches in the last group), against the last group's own
    full batch. The toolkit groups with ``iterate_groups`` ("use-real-denominator"); the mistake
    divides by A × tokens per microbatch, though only A//2 came: its error is 1 - (A//2)/A.
    """
    m, a, dev = spec.micro_batch, spec.accum, next(model.parameters()).device
    x, y = (t.to(dev) for t in make_batch((a + a // 2) * m, spec.seq_len, vocab, gen))
    stream = [(x[i : i + m], y[i : i + m]) for i in range(0, x.size(0), m)]
    last, is_partial = list(iterate_groups(stream, a))[-1]
    assert is_partial and 0 < len(last) < a
    lx, ly = torch.cat([b[0] for b in last]), torch.cat([b[1] for b in last])
    ref = full_batch_grad(model, lx, ly, prec)
    good = toolkit_grad(model, [last], prec)
    per_mb = _tokens(ly) / len(last)  # tokens per microbatch: right; times A, not len(last): wrong
    bad = _replica_sum(model, [last], _divided(model, prec, lambda r, y: per_mb * a), prec)
    return rel_err(good, ref), rel_err(bad, ref), len(last)


def scheduler_lr_error(model: torch.nn.Module, mbs: list[MB], prec: _Prec) -> tuple[float, float]:
    """lr reached after one update when the scheduler steps per microbatch vs per update.

    A copy of the model takes one real update (SGD, the v2 recipe's lr and WARMUP_UPDATES of
    linear warmup) with ``scheduler.step()`` after every microbatch's backward: it then sits at
    warmup_factor(A + 1), where the per-update schedule is at warmup_factor(2). (actual, intended)
    """
    base = RECIPES["v2"].lr
    work = copy.deepcopy(model)
    opt = torch.optim.SGD(work.parameters(), lr=base)
    sched = build_scheduler(opt, WARMUP_UPDATES)
    opt.zero_grad(set_to_none=True)
    n = sum(_tokens(y) for _, y in mbs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about the step order: that is the mistake
        for mb in mbs:
            _backward(work, mb, prec, n)
            sched.step()  # the mistake: once per microbatch
        opt.step()
    return float(opt.param_groups[0]["lr"]), base * warmup_factor(2, WARMUP_UPDATES)


def _measure(
    model: torch.nn.Module, spec: AccumSpec, vocab: int, prec: _Prec
) -> tuple[list[CheckRow], dict[str, Any]]:
    """Every row, in table order, and what the batch held."""
    m, a, d, dev = spec.micro_batch, spec.accum, spec.replicas, next(model.parameters()).device
    gen = torch.Generator().manual_seed(spec.seed)  # the batches, drawn on the CPU: any device
    x, y = (t.to(dev) for t in make_batch(m * a * d, spec.seq_len, vocab, gen))
    px, py = (t.to(dev) for t in make_batch(m * a * d, spec.seq_len, vocab, gen))
    replicas, previous = split(x, y, m, a), split(px, py, m, a)
    ref = full_batch_grad(model, x, y, prec)
    # the floor: how far this precision's full batch is from an fp64 one (no autocast)
    exact = full_batch_grad(copy.deepcopy(model).double(), x, y, _Prec(dev.type, None, 1.0))
    floor = rel_err(ref.double(), exact)
    tol = max(TOLERANCE[spec.precision], FLOOR_FACTOR * floor)
    good, bad, n_last = partial_group_errors(model, spec, vocab, gen, prec)
    rows = [
        _row("toolkit loop", rel_err(toolkit_grad(model, replicas, prec), ref), tol),
        _row("toolkit loop, partial group", good, tol),
        _row("full batch vs fp64", floor, None),
    ]
    for name, g in mistake_grads(model, replicas, previous, prec):
        rows.append(_row(name, rel_err(g, ref), None, 1 - 1 / a if "double" in name else None))
    rows.append(_row("partial group ÷ full group", bad, None, 1 - n_last / a))
    actual, intended = scheduler_lr_error(model, replicas[0], prec)
    want = warmup_factor(a + 1, WARMUP_UPDATES) / warmup_factor(2, WARMUP_UPDATES) - 1
    rows.append(_row("scheduler per microbatch", abs(actual / intended - 1), None, want))
    info = {
        "tolerance": tol,
        "floor": floor,
        "tokens_global": _tokens(y),
        "tokens_per_microbatch": [[_tokens(yb) for _, yb in mbs] for mbs in replicas],
        "lr_after_one_update": {"actual": actual, "intended": intended},
    }
    return rows, info


def _row(method: str, err: float, tol: float | None, expected: float | None = None) -> CheckRow:
    """A toolkit row (``tol`` given), the floor row, or a mistake row (told apart by name)."""
    if tol is not None:
        return CheckRow(method, "toolkit", err, f"<= {tol:.1e}", err <= tol)
    if method.startswith("full batch"):
        return CheckRow(method, "reference", err, "floor", None)
    return CheckRow(method, "mistake", err, f">= {DETECT:g}", err >= DETECT, expected)


def run_accum_check(spec: AccumSpec) -> AccumCheckResult:
    """Measure the toolkit's loop and every mistake against the full-batch gradient."""
    cfg = spec.validate()
    dev = resolve_device(spec.device)  # UserError for an unknown name or cuda without a GPU
    prec = _precision(spec.precision, dev)
    # fp32 means fp32: TF32 matmuls on a GPU would add ~1e-3 of noise unrelated to accumulation
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        torch.manual_seed(spec.seed)  # the initial weights
        model = GPT(cfg).to(dev)
        rows, info = _measure(model, spec, cfg.vocab_size, prec)
    finally:
        torch.set_float32_matmul_precision(old)
    meta = {
        **asdict(spec),
        "device": str(dev),
        "torch": torch.__version__,
        "tolerance_base": TOLERANCE[spec.precision],
        "floor_factor": FLOOR_FACTOR,
        "detect": DETECT,
        "loss_scale": prec.scale,
        "warmup_updates": WARMUP_UPDATES,
        **info,
    }
    return AccumCheckResult(meta=meta, rows=rows)
