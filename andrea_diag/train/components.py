"""The trainer's swappable parts, each with ``state_dict`` / ``load_state_dict``.

Where the next features plug in (see docs/extending.md, "Where things plug in"):

- :class:`Precision` (fp32), :class:`BF16Precision` (autocast), :class:`FP16Precision` (autocast
  plus a GradScaler): ``autocast()`` around each microbatch, ``backward`` (scaled for fp16),
  ``unscale_`` before the clipper (both our clipper and torch's see true units), ``step`` skipped
  when the gradients are non-finite, ``update`` after it. A precision is one class and one
  ``@register_precision``: :data:`PRECISIONS` is the ``--precision`` registry (its choices, its
  check and its help), and :func:`make_precision` picks one.
- :class:`Reducer`: one process (D = 1); ``distributed.DDPReducer`` replaces it for D > 1
  replicas: ``microbatch(last)`` skips the all-reduce on every microbatch but the last,
  ``global_tokens`` gives the global token denominator, ``reduce`` sums the gradients, and
  ``world_size`` is D in the run sheet. :func:`accumulate_with` runs one replica's group through
  a precision and a reducer, in the trainer's order (accum-check measures that same function).
- :class:`Evaluator`: the no-op base; ``evaluation.HeldOutEvaluator`` is the held-out
  evaluation (``maybe_evaluate`` every N updates on the fixed eval set).
- :class:`TrainState`: the run state a checkpoint must save, beside the model, optimizer,
  scheduler, clipper and probes.

The clipper lives in ``andrea_diag.clip.modes`` (one class per clip mode).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import torch

from andrea_diag.errors import UserError
from andrea_diag.train.accumulation import GroupResult, accumulate_group

if TYPE_CHECKING:
    from andrea_diag.config import RunConfig


class Stateful(Protocol):
    """A part a checkpoint saves and restores (``Trainer.components``): the precision, reducer,
    evaluator and run state here, the clipper, the probe driver, and torch's own parts."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any, /) -> Any: ...


class Precision:
    """fp32 weights, gradients and optimizer state (matmuls may use TF32 on CUDA: RunConfig)."""

    name: ClassVar[str] = "fp32"  # the --precision value
    help: ClassVar[str] = "fp32"  # its part of the --precision help
    dtype: ClassVar[torch.dtype | None] = None  # the forward passes' autocast dtype (None: off)

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device or torch.device("cpu")

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def outside_autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast off, for the backward inside a microbatch's :meth:`autocast` (PyTorch:
        "backward passes under autocast are not recommended"). Under it on CUDA, the
        backward's fp32-listed ops add kernels: at 12m bf16 on the H200, 24 more bf16
        reductions and 24 more bias-sized casts an update than the same backward outside it
        (reports/bench-train/h200-2026-12-02d/)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, enabled=False)

    def check_supported(self) -> None:
        """A :class:`UserError` (one line) when autocast cannot run ``dtype`` on this device."""
        if self.dtype is None:
            return
        lin = torch.nn.Linear(8, 8).to(self.device)
        ones = torch.ones(2, 8, device=self.device)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an unsupported dtype warns, then runs in fp32
                with self.autocast():
                    ok = lin(ones).dtype == self.dtype
        except (RuntimeError, ValueError):  # older torch refuses the dtype outright
            ok = False
        if not ok:
            raise UserError(
                f"--precision {self.name} is not supported on {self.device} by torch "
                f"{torch.__version__}",
                hint="use --precision fp32, or another --device",
            )

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Gradients are already in true units: nothing to undo before the clipper."""

    def step(self, optimizer: torch.optim.Optimizer, applied: bool) -> None:
        if applied:  # a non-finite gradient skips the update (recorded as not applied)
            optimizer.step()

    def scale(self) -> float | None:
        """The loss scale this update's backward used (None: no loss scaling)."""
        return None

    def describe(self, matmul_precision: str, device: torch.device) -> str:
        tf32 = matmul_precision != "highest" and device.type == "cuda"
        return "fp32 weights and grads" + (
            f", matmuls {matmul_precision} (TF32 allowed)" if tf32 else ""
        )

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


PRECISIONS: dict[str, type[Precision]] = {}  # --precision name -> its class, in registration order
P = TypeVar("P", bound=type[Precision])


def register_precision(cls: P) -> P:
    """Class decorator: make ``cls`` available as ``--precision cls.name``."""
    PRECISIONS[cls.name] = cls
    return cls


register_precision(Precision)


@register_precision
class BF16Precision(Precision):
    """bf16 autocast for the forward passes; fp32 weights, gradients and optimizer state.

    bf16 has fp32's exponent range, so no loss scaling is needed (or done)."""

    name, help, dtype = "bf16", "bf16 (autocast)", torch.bfloat16

    def describe(self, matmul_precision: str, device: torch.device) -> str:
        return "bf16 autocast (forward), fp32 weights, grads and optimizer state"


@register_precision
class FP16Precision(Precision):
    """fp16 autocast plus ``torch.amp.GradScaler`` (the seeds' third spike source: overflow).

    The scale is constant within an accumulation group: ``update`` runs once per optimizer
    update, after the step. A non-finite gradient skips the step and halves the scale.
    """

    name, dtype = "fp16", torch.float16
    help = (
        "fp16 (autocast + GradScaler: an overflow skips the update and halves the scale, both "
        "recorded)"
    )

    def __init__(self, device: torch.device | None = None) -> None:
        super().__init__(device)
        self.scaler = torch.amp.GradScaler(self.device.type)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.unscale_(optimizer)  # records found-inf on the device: no host sync here

    def step(self, optimizer: torch.optim.Optimizer, applied: bool) -> None:
        if applied:  # the scaler would skip a non-finite step too; ours decided it already
            self.scaler.step(optimizer)
        self.scaler.update()  # halves the scale after an overflow, grows it after a quiet run

    def scale(self) -> float | None:
        return float(self.scaler.get_scale())  # host sync: the recorded loss_scale column

    def describe(self, matmul_precision: str, device: torch.device) -> str:
        return "fp16 autocast (forward) + GradScaler; fp32 weights, grads and optimizer state"

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scaler.load_state_dict(state["scaler"])


class UnknownPrecision(UserError, ValueError):
    """``--precision NAME`` that no class registered: one line at the CLI, a ValueError to callers."""


def check_precision(name: str) -> None:
    """:class:`UnknownPrecision` unless ``name`` is a registered ``--precision``."""
    if name not in PRECISIONS:
        raise UnknownPrecision(
            f"unknown precision {name!r}", hint=f"choose from {', '.join(PRECISIONS)}"
        )


def precision_help() -> str:
    """The ``--precision`` help, from the registered classes: "fp32; bf16 (autocast); ..."."""
    return "; ".join(cls.help for cls in PRECISIONS.values()) + "."


def make_precision(name: str, device: torch.device) -> Precision:
    """The precision component for ``--precision name`` on ``device``."""
    check_precision(name)
    return PRECISIONS[name](device)


class Reducer:
    """One process: gradients are already global, D = 1 (``distributed.DDPReducer`` for D > 1)."""

    world_size = 1
    rank = 0

    def global_tokens(self, local: int, device: torch.device) -> int:
        """The group's supervised tokens over all replicas (the loss denominator)."""
        del device
        return local

    def backward_factor(self) -> float:
        """What the loss is multiplied by at backward (DDP: D, to undo its averaging)."""
        return 1.0

    def local_batch(self, tokens: torch.Tensor) -> torch.Tensor:
        """This replica's share of the group's (A, m·D, T+1) host tokens (D = 1: all of them)."""
        return tokens

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        return value

    @contextlib.contextmanager
    def microbatch(self, last: bool) -> Iterator[None]:
        """Around each microbatch's backward; DDP skips the all-reduce unless ``last``."""
        del last
        yield

    def reduce(self, params: list[torch.nn.Parameter]) -> None:
        """After the group's last backward: gradients are summed across replicas here."""
        del params

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


def accumulate_with(
    model: torch.nn.Module,
    micro: Sequence[tuple[torch.Tensor, torch.Tensor]],
    precision: Precision,
    reducer: Reducer,
    device: torch.device,
    *,
    loss_hook: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
    local_tokens: int | None = None,
) -> GroupResult:
    """One replica's accumulation group through the trainer's precision and reducer.

    Around each microbatch the reducer's context (DDP: ``no_sync`` but on the last), inside it
    the precision's autocast for the forward; the backward (autocast off) is the precision's
    (fp16: scaled) of the loss times the reducer's factor (DDP: D, undoing its average); the
    denominator is the reducer's global token count. The caller zeroes the gradients before, and
    calls ``reducer.reduce`` and ``precision.unscale_`` after. The trainer's update and
    ``accum-check`` both run this.
    """

    def context(i: int) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(reducer.microbatch(last=i == len(micro) - 1))
        stack.enter_context(precision.autocast())
        return stack

    factor = reducer.backward_factor()

    def backward(loss: torch.Tensor) -> None:
        with precision.outside_autocast():  # the forward's casts stay; the backward's own ops
            precision.backward(loss * factor if factor != 1.0 else loss)

    return accumulate_group(
        model,
        micro,
        loss_hook=loss_hook,
        context=context,
        backward=backward,
        denominator=lambda n: reducer.global_tokens(n, device),
        local_tokens=local_tokens,
    )


class Evaluator:
    """No held-out evaluation (the no-op seam); ``evaluation.HeldOutEvaluator`` is the real one."""

    def maybe_evaluate(self, update: int, model: torch.nn.Module) -> dict[str, Any]:
        del update, model
        return {}

    def summary(self, wall_s: float) -> dict[str, Any]:
        del wall_s
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


class ClipTimer:
    """Wall time of the clip stage per update, with no sync of its own: on CUDA two events are
    read after the update's one host sync (the row's scalars), when both have completed."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)
        self.t0 = self.t1 = 0.0

    def __enter__(self) -> ClipTimer:
        if self.cuda:
            self.start.record()
        else:
            self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            self.end.record()
        else:
            self.t1 = time.perf_counter()

    def ms(self) -> float:
        """Call after the update's host sync."""
        return self.start.elapsed_time(self.end) if self.cuda else 1e3 * (self.t1 - self.t0)


@dataclass
class TrainState:
    """Everything that changes during a run, besides tensors owned by other components."""

    update: int = 0  # optimizer updates done (attempted; the metrics table's unit)
    microbatches: int = 0
    examples: int = 0
    tokens: int = 0  # supervised tokens trained on
    batch_hashes: list[str] = field(default_factory=list)
    phases: list[int] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """The cumulative unit columns of a metrics row."""
        return {"microbatches": self.microbatches, "examples": self.examples, "tokens": self.tokens}

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Set the fields ``state`` names; a name that is no field is a ``ValueError``, not an
        attribute set (``"counts": 5`` replaced the method). A checkpoint's values are checked
        before they get here (``checkpoint_state.check_train_state``)."""
        names = {f.name for f in fields(self)}
        if unknown := sorted(map(str, state.keys() - names)):
            raise ValueError(f"TrainState has no field {', '.join(unknown)[:200]}")
        for key, value in state.items():
            setattr(self, key, list(value) if isinstance(value, list) else value)


def seed_and_precision(cfg: RunConfig) -> None:
    """The process-global torch state an arm depends on: the float32 matmul precision (torch
    has no per-model setting) and the seed. :class:`~andrea_diag.train.loop.Trainer` calls it
    right before it builds the model, so every caller (``train_arm``, ``bench-train``, the
    tests) gets the same init in every arm of a cascade: only the clip mode differs."""
    torch.set_float32_matmul_precision(cfg.matmul_precision)
    torch.manual_seed(cfg.seed)
