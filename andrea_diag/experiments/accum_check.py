"""Document 002's accumulation checklist as measurements: each loop against a full batch.

    from andrea_diag.experiments.accum_check import AccumSpec, run_accum_check
    result = run_accum_check(AccumSpec(size="tiny", micro_batch=4, accum=4, replicas=2))
    print(result.ok, [(r.method, r.rel_err) for r in result.rows])  # ok: the toolkit passed

m × A × D random sequences, padded (``IGNORE`` targets, so microbatches and replicas hold
unequal supervised-token counts), go through one forward/backward as a **full batch** (summed
token losses over its supervised tokens). Each loop is measured against it as ‖g − g_full‖ /
‖g_full‖: the toolkit's own (the trainer's ``accumulate_with`` per replica, with the trainer's
``Precision`` for ``--precision`` and DDP's reduction emulated by a ``Reducer``: global
denominator, loss × D, gradients averaged) and each classic mistake, done wrong on purpose. The
loops are in accum_loops.py. CLI: ``andrea-diag accum-check``; page: report/accum_page.py.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from andrea_diag.config import MODEL_PRESETS, ModelConfig
from andrea_diag.device import resolve_device
from andrea_diag.errors import UserError
from andrea_diag.experiments.accum_loops import (
    WARMUP_UPDATES,
    full_batch_grad,
    make_batch,
    mistake_grads,
    partial_group_errors,
    rel_err,
    scheduler_lr_error,
    split,
    tokens,
    toolkit_grad,
)
from andrea_diag.host_memory import available_memory
from andrea_diag.model import GPT
from andrea_diag.train.components import PRECISIONS, Precision, check_precision, make_precision
from andrea_diag.train.optim import warmup_factor

__all__ = ["DETECT", "TOLERANCE", "AccumCheckResult", "AccumSpec", "CheckRow", "make_batch",
           "run_accum_check", "split"]  # fmt: skip


def base_tolerance(dtype: torch.dtype | None) -> float:
    """The toolkit's loop against the full batch in the SAME precision: both round, differently
    (other matmul shapes), so the error is never 0. fp32 (no autocast): 1e-6, the contract. An
    autocast dtype: 4 units of its roundoff (bf16 2^-8, fp16 2^-11); on tiny the loop measures
    ~2e-3 and ~3e-4, half the floor."""
    return 1e-6 if dtype is None else 2 * torch.finfo(dtype).eps


TOLERANCE = {name: base_tolerance(cls.dtype) for name, cls in PRECISIONS.items()}
# The floor: the same-precision full batch against an fp64 one. Two computations that far from
# the exact gradient may differ by twice it: tolerance = max(TOLERANCE, FLOOR_FACTOR x floor).
# tiny's fp32 floor is ~4e-7, so 1e-6 holds as is; 12m's is ~9e-7, where 1e-6 could fail a
# correct loop. Each toolkit row's criterion shows the tolerance applied.
FLOOR_FACTOR = 2.0
# A mistake is detected at this error: far above every tolerance, far below what they measure
# at A >= 2 (double division is 1 - 1/A >= 0.5; the others measured 0.5 to 2.6).
DETECT = 0.05
# the full batch the loops are measured against runs as one forward: past any real batch (GPT-3
# trained on 3.2M tokens), a larger one would only exhaust the memory. A training run's
# microbatch (also one forward) has the same cap (commands/options.py)
MAX_FORWARD_TOKENS = 2**22
# The fewest tokens a microbatch may hold (m x T). Below it the fp32 matmuls have a few rows
# and take other kernels than the full batch's: measured on tiny, a correct loop with 2-3
# tokens a microbatch was 1.1-1.8e-6 from the full batch (fp32 floor ~3e-7), so the check
# reported the toolkit's loop broken; 6 gave ~5e-7, 8 and more ~2e-8 to 2e-7.
MIN_MICROBATCH_TOKENS = 8


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
        check_precision(self.precision)  # the trainer's --precision registry
        for bad, message in (
            (
                self.size not in MODEL_PRESETS,
                f"unknown size {self.size!r}: choose from {', '.join(MODEL_PRESETS)}",
            ),
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
        fp32 = PRECISIONS[self.precision].dtype is None  # bf16/fp16's tolerance is far wider
        if fp32 and self.micro_batch * self.seq_len < MIN_MICROBATCH_TOKENS:
            raise UserError(
                f"--micro-batch x --seq-len is {self.micro_batch * self.seq_len}: a microbatch "
                f"of fewer than {MIN_MICROBATCH_TOKENS} tokens is too small to judge in fp32",
                hint="its few-row fp32 matmuls round a correct loop ~1.5e-6 from the full "
                "batch, past the 1e-6 contract; raise --micro-batch or --seq-len",
            )
        tokens = self.micro_batch * self.accum * self.replicas * self.seq_len
        if tokens > MAX_FORWARD_TOKENS:  # the full batch is one forward: it must fit in memory
            raise UserError(
                f"the check's batch m*A*D*T is {tokens:,} tokens, more than {MAX_FORWARD_TOKENS:,}",
                hint="lower --micro-batch, --accum, --replicas or --seq-len",
            )
        if resolve_device(self.device).type == "cpu":  # a bad --device: refused before --out
            check_host_memory(tokens, cfg.vocab_size)
        return cfg


# Host bytes per token and vocabulary entry at the check's peak, measured on tiny (fp32, CPU:
# 1.79 GB more for 6,144 more tokens of its 8,192-entry vocabulary): the logits and their
# gradients, fp32 and the fp64 reference's, of the full batch and the loops measured against it.
LOGIT_BYTES = 36


def check_host_memory(tokens: int, vocab: int) -> None:
    """One line where the full batch's logits alone would not fit the memory free: under the
    token cap, ``--replicas 256`` or ``1024`` (which the option takes) ran this machine out of
    memory and the kernel killed the process, and other processes with it."""
    need, free = tokens * vocab * LOGIT_BYTES, available_memory()
    if free is not None and need > free:
        raise UserError(
            f"the check's batch m*A*D*T is {tokens:,} tokens: its logits need about "
            f"{need / 2**30:,.1f} GiB, more than the {free / 2**30:,.1f} GiB of memory free",
            hint=f"lower --micro-batch, --accum, --replicas or --seq-len (at most about "
            f"{free // (vocab * LOGIT_BYTES):,} tokens here)",
        )


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


def _measure(
    model: torch.nn.Module, spec: AccumSpec, vocab: int, precision: Precision
) -> tuple[list[CheckRow], dict[str, Any]]:
    """Every row, in table order, and what the batch held."""
    m, a, d, dev = spec.micro_batch, spec.accum, spec.replicas, next(model.parameters()).device
    # never stepped: what the precision's unscale_ and step take (the GradScaler keys on it)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    gen = torch.Generator().manual_seed(spec.seed)  # the batches, drawn on the CPU: any device
    x, y = (t.to(dev) for t in make_batch(m * a * d, spec.seq_len, vocab, gen))
    px, py = (t.to(dev) for t in make_batch(m * a * d, spec.seq_len, vocab, gen))
    replicas, previous = split(x, y, m, a), split(px, py, m, a)
    scale = precision.scale()  # fp16: the GradScaler's scale before the first backward
    ref = full_batch_grad(model, x, y, precision, opt)
    # the floor: how far this precision's full batch is from an fp64 one (no autocast)
    exact_model = copy.deepcopy(model).double()
    exact_opt = torch.optim.SGD(exact_model.parameters(), lr=0.0)
    exact = full_batch_grad(exact_model, x, y, Precision(dev), exact_opt)
    floor = rel_err(ref.double(), exact)
    tol = max(TOLERANCE[spec.precision], FLOOR_FACTOR * floor)
    good, bad, n_last = partial_group_errors(model, m, a, spec.seq_len, vocab, gen, precision, opt)
    rows = [
        _row("toolkit loop", rel_err(toolkit_grad(model, replicas, precision, opt), ref), tol),
        _row("toolkit loop, partial group", good, tol),
        _row("full batch vs fp64", floor, None),
    ]
    for name, g in mistake_grads(model, replicas, previous, precision, opt):
        rows.append(_row(name, rel_err(g, ref), None, 1 - 1 / a if "double" in name else None))
    rows.append(_row("partial group ÷ full group", bad, None, 1 - n_last / a))
    actual, intended = scheduler_lr_error(model, replicas[0], precision)
    want = warmup_factor(a + 1, WARMUP_UPDATES) / warmup_factor(2, WARMUP_UPDATES) - 1
    rows.append(_row("scheduler per microbatch", abs(actual / intended - 1), None, want))
    info = {
        "tolerance": tol,
        "floor": floor,
        "loss_scale": 1.0 if scale is None else scale,
        "loss_scale_end": 1.0 if scale is None else precision.scale(),  # < start: overflows
        "tokens_global": tokens(y),
        "tokens_per_microbatch": [[tokens(yb) for _, yb in mbs] for mbs in replicas],
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


# what torch's CPU allocator says when an allocation fails (a RuntimeError, not the CUDA
# allocator's torch.OutOfMemoryError): "DefaultCPUAllocator: can't allocate memory: you tried
# to allocate 268435456 bytes. Error code 12 (Cannot allocate memory)"
_CPU_OOM = ("can't allocate memory", "not enough memory", "Cannot allocate memory")


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation that failed: CUDA's, the CPU allocator's, Python's."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(s in str(exc) for s in _CPU_OOM)


def _oom_error(spec: AccumSpec, device: torch.device) -> UserError:
    """One line for a check whose full batch (one forward, all m*A*D sequences) did not fit:
    below :data:`MAX_FORWARD_TOKENS` it can still outgrow the memory (its logits alone are
    tokens x vocab x 4 bytes), which ended in the allocator's traceback."""
    tokens = spec.micro_batch * spec.accum * spec.replicas * spec.seq_len
    return UserError(
        f"out of memory on {device}: the check's full batch m*A*D*T = {spec.micro_batch}*"
        f"{spec.accum}*{spec.replicas}*{spec.seq_len} = {tokens:,} tokens is one forward of "
        f"{spec.size}",
        hint="lower --micro-batch, --accum, --replicas or --seq-len",
    )


def run_accum_check(spec: AccumSpec) -> AccumCheckResult:
    """Measure the toolkit's loop and every mistake against the full-batch gradient."""
    cfg = spec.validate()
    dev = resolve_device(spec.device)  # checked by validate: an unknown name, cuda without a GPU
    precision = make_precision(spec.precision, dev)  # the trainer's component, as it builds it
    precision.check_supported()  # one line where autocast cannot run the dtype here
    # fp32 means fp32: TF32 matmuls on a GPU would add ~1e-3 of noise unrelated to accumulation
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        torch.manual_seed(spec.seed)  # the initial weights
        model = GPT(cfg).to(dev)
        rows, info = _measure(model, spec, cfg.vocab_size, precision)
    except (torch.OutOfMemoryError, RuntimeError, MemoryError) as e:
        if not out_of_memory(e):
            raise
        raise _oom_error(spec, dev) from None
    finally:
        torch.set_float32_matmul_precision(old)
    meta = {
        **asdict(spec),
        "device": str(dev),
        "torch": torch.__version__,
        "tolerance_base": TOLERANCE[spec.precision],
        "floor_factor": FLOOR_FACTOR,
        "detect": DETECT,
        "precision_component": type(precision).__name__,
        "reducer": "InProcessReplicas (DDPReducer's rules, D replicas in one process)",
        "warmup_updates": WARMUP_UPDATES,
        **info,
    }
    return AccumCheckResult(meta=meta, rows=rows)
