"""The trainer's swappable parts, each with ``state_dict`` / ``load_state_dict``.

Where the next features plug in (see the README's "Where things plug in"):

- :class:`Precision`: fp32 today. Mixed precision replaces it: ``autocast()`` around the forward
  passes, ``backward`` through a GradScaler, ``unscale_`` before the clipper, ``step`` skipped on
  a non-finite scale, ``update`` after the step.
- :class:`Reducer`: one process today. Data-parallel replicas replace it: ``no_sync`` on every
  microbatch but the last, ``reduce`` for the global token denominator and sharded norms,
  ``world_size`` for D in the run sheet.
- :class:`Evaluator`: none today. Held-out evaluation replaces it: ``maybe_evaluate`` every N
  updates on fixed batches, writing its own table.
- :class:`TrainState`: the run state a checkpoint must save, beside the model, optimizer,
  scheduler, clipper and probes.

The clipper lives in ``andrea_diag.clip.modes`` (one class per clip mode).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch


class Precision:
    """fp32 weights, gradients and optimizer state (matmuls may use TF32 on CUDA: RunConfig)."""

    name = "fp32"

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Gradients are already in true units: nothing to undo before the clipper."""

    def step(self, optimizer: torch.optim.Optimizer, applied: bool) -> None:
        if applied:  # a non-finite gradient skips the update (recorded as not applied)
            optimizer.step()

    def describe(self, matmul_precision: str, device: torch.device) -> str:
        tf32 = matmul_precision != "highest" and device.type == "cuda"
        return "fp32 weights and grads" + (
            f", matmuls {matmul_precision} (TF32 allowed)" if tf32 else ""
        )

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


class Reducer:
    """One process: gradients are already global, D = 1."""

    world_size = 1
    rank = 0

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


class Evaluator:
    """No held-out evaluation yet: the seam where it plugs in."""

    def maybe_evaluate(self, update: int, model: torch.nn.Module) -> dict[str, Any]:
        del update, model
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


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
        for key, value in state.items():
            setattr(self, key, list(value) if isinstance(value, list) else value)
