"""The accumulation group, eager or as a CUDA graph captured once and replayed (``--cuda-graph``).

    groups = GroupRunner(model, precision, reducer, device, zero_grad, params, graphed=True)
    group = groups.run(host_tokens, local_tokens, loss_hook=None)   # a GroupResult

Why a graph: on an H200 at 16 x 256 tokens an update is host-bound. At 12m the host dispatches
about 1,500 aten ops of forward and backward per update while the GPU is busy about 5 ms of
it (reports/bench-train/). A replay dispatches them all in one call. This module captures
the group. The optimizer step (``graphed_step.py``) and the optimizer-state probe's arithmetic
(``probes/optstate_graph.py``) have graphs of their own; the clipper and the other probes run
eagerly, after the replay, on the gradients it wrote.

How (PyTorch's whole-network capture, "CUDA Graphs" in its docs):

- **Warm-up:** the first :data:`WARMUP_UPDATES` groups run eagerly (cuBLAS, autograd and the
  allocator initialise lazily). The next eligible group is captured, then replayed: that
  update's numbers come from the replay.
- **Static tokens:** one device buffer, filled from the pinned host batch before each replay.
- **Gradients:** they are set to None before the capture, so the captured backward allocates
  them from the graph's pool and each replay writes fresh gradients into those same tensors (a
  replay is ``zero_grad`` + backward). Nothing may set them to None afterwards: this runner
  zeroes them in place instead.
- **What a replay cannot run** runs eagerly into the same gradient tensors: an update with a
  loss hook (the non-finite injection), another shape, or another supervised-token count (the
  denominator is a Python number baked into the graph, as in the eager group).
- Outputs are copied out of the graph's static tensors, so a consumer that keeps one across
  updates never sees the next replay overwrite it.

CUDA only, one process (DDP's all-reduce hooks are not captured here): :func:`check_graphable`
refuses the rest in one line. On the CPU the eager path is the only one, and ``graphed=False``
is exactly the trainer's group of before (tests/test_graphed.py).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from andrea_diag.device import PinnedStaging
from andrea_diag.errors import UserError, capture_refused
from andrea_diag.train.accumulation import GroupResult
from andrea_diag.train.components import Precision, Reducer, accumulate_with
from andrea_diag.train.rows import to_device

if TYPE_CHECKING:  # the trainer's other reducer, for readers and checkers
    from andrea_diag.train.distributed import DDPReducer

WARMUP_UPDATES = 3  # eager groups before the capture: lazy initialisation happens in them
LossHook = Callable[[int, torch.Tensor], torch.Tensor]


def check_graphable(device: torch.device | None, world_size: int) -> None:
    """One :class:`UserError` line where ``--cuda-graph`` cannot run. ``device`` None: the
    cells run elsewhere (a Slurm job), whose trainer checks its own device."""
    if device is not None and device.type != "cuda":
        raise UserError(
            f"--cuda-graph needs a CUDA device, and this run is on {device}",
            hint="pass --no-cuda-graph, or --device cuda on a machine with a GPU",
        )
    if world_size > 1:
        raise UserError(
            f"--cuda-graph runs one process; this run has D = {world_size} replicas (--nproc)",
            hint="pass --no-cuda-graph, or drop --nproc",
        )


T = TypeVar("T")


def graph_forward_backward(
    step: Callable[[torch.Tensor], T], static_tokens: torch.Tensor
) -> tuple[torch.cuda.CUDAGraph, T]:
    """``step(static_tokens)`` (forward and backward, no host read) captured as a CUDA graph:
    the graph, not yet replayed, and ``step``'s outputs (static tensors each replay rewrites).
    The caller sets the gradients to None first, so the backward allocates them in the graph's
    pool and each replay writes fresh ones there."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # syncs, then records on a side stream: nothing runs
        out = step(static_tokens)
    return graph, out


def split_microbatches(tokens: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(A, m, T+1)`` tokens as A ``(inputs, targets)`` pairs, contiguous (the model's .view())."""
    return [(t[:, :-1].contiguous(), t[:, 1:].contiguous()) for t in tokens]


class GroupRunner:
    """Runs the trainer's accumulation group: eagerly, or through one captured CUDA graph."""

    def __init__(
        self,
        model: torch.nn.Module,
        precision: Precision,
        reducer: Reducer | DDPReducer,  # D > 1 runs eagerly only (check_graphable)
        device: torch.device,
        zero_grad: Callable[[], None],
        params: list[torch.nn.Parameter],
        *,
        graphed: bool = False,
    ) -> None:
        if graphed:
            check_graphable(device, reducer.world_size)
        self.model, self.precision, self.reducer, self.device = model, precision, reducer, device
        self.zero_grad, self.params, self.graphed = zero_grad, params, graphed
        self.graph: torch.cuda.CUDAGraph | None = None
        self.key: tuple[tuple[int, ...], int] | None = None  # the captured shape and tokens
        self.static_tokens: torch.Tensor | None = None
        self.static_out: GroupResult | None = None
        self.grads: list[torch.Tensor | None] = []  # the graph's gradient tensors, by param
        self.counts = {"eager": 0, "replayed": 0}  # this process's (a resume counts anew)
        self._warned = False
        self._staging = PinnedStaging()  # the replay's tokens, through pinned buffers it reuses

    def run(
        self, host_tokens: torch.Tensor, local_tokens: int, loss_hook: LossHook | None = None
    ) -> GroupResult:
        """One group on ``host_tokens`` (A, m, T+1, this replica's, on the host), whose
        supervised tokens the caller counted (``local_tokens``); gradients land in ``.grad``."""
        key = (tuple(host_tokens.shape), local_tokens)
        if self.graph is not None and loss_hook is None and key == self.key:
            assert self.static_tokens is not None
            self._staging.copy(self.static_tokens, host_tokens)  # as to_device: no host sync
            return self._replay()
        if self.graph is not None and loss_hook is None and not self._warned:
            self._warned = True  # a changing token count makes every update eager: say so once
            warnings.warn(
                f"--cuda-graph: this group's shape or supervised tokens {key} differ from the "
                f"captured {self.key}; such groups run eagerly",
                stacklevel=2,
            )
        if (
            self.graphed
            and self.graph is None
            and loss_hook is None
            and self.counts["eager"] >= WARMUP_UPDATES
        ):
            return self._capture(host_tokens, key)
        return self._eager(host_tokens, local_tokens, loss_hook)

    def _group(self, tokens: torch.Tensor, local_tokens: int, hook: LossHook | None) -> GroupResult:
        return accumulate_with(
            self.model, split_microbatches(tokens), self.precision, self.reducer, self.device,
            loss_hook=hook, local_tokens=local_tokens,
        )  # fmt: skip

    def _eager(self, host: torch.Tensor, local_tokens: int, hook: LossHook | None) -> GroupResult:
        self.counts["eager"] += 1
        if self.graph is None:
            self.zero_grad()  # between groups only: set to None, as the optimizer does
        else:  # the graph owns the gradient tensors: zero them where they are
            torch._foreach_zero_([g for g in self.grads if g is not None])
        out = self._group(to_device(host, self.device), local_tokens, hook)
        if self.graph is not None:
            self._keep_graph_grads()
        return out

    def _point_grads_at_graph(self) -> None:
        """Every parameter's ``.grad`` is the graph's tensor again (a replay writes only there)."""
        for p, g in zip(self.params, self.grads, strict=True):
            if g is not None and p.grad is not g:
                p.grad = g

    def _keep_graph_grads(self) -> None:
        """After an eager group: the gradients back in the graph's tensors, wherever autograd
        put them (it accumulates in place, but need not)."""
        for p, g in zip(self.params, self.grads, strict=True):
            if g is None or p.grad is g:
                continue
            if p.grad is None:
                g.zero_()
            else:
                g.copy_(p.grad)
            p.grad = g

    def _capture(self, host: torch.Tensor, key: tuple[tuple[int, ...], int]) -> GroupResult:
        self.static_tokens = to_device(host, self.device).clone()
        self.zero_grad()  # None: the captured backward allocates them in the graph's pool
        try:
            graph, self.static_out = graph_forward_backward(
                lambda t: self._group(t, key[1], None), self.static_tokens
            )
        except RuntimeError as e:  # a host read, a dynamic shape, ...: not capturable
            raise capture_refused("this model's forward and backward", e) from None
        self.graph, self.key = graph, key
        self.grads = [p.grad for p in self.params]
        return self._replay()  # this update's numbers

    def _replay(self) -> GroupResult:
        """Run the graph on the static tokens; its outputs, copied out of the static tensors."""
        assert self.graph is not None and self.static_out is not None
        self._point_grads_at_graph()  # outside code may have set them to None
        self.graph.replay()
        self.counts["replayed"] += 1
        out = self.static_out
        return GroupResult(
            loss=out.loss.clone(),
            tokens=out.tokens,
            example_loss=out.example_loss.clone(),
            example_tokens=out.example_tokens.clone(),
            microbatches=out.microbatches,
            loss_sums=[s.clone() for s in out.loss_sums],
        )

    def describe(self) -> dict[str, Any]:
        """For the run sheet: how many groups this process ran eagerly and replayed (a resumed
        run counts its own segment; {} when not graphed: an eager run's sheet is as it was)."""
        if not self.graphed:
            return {}
        return {"cuda_graph": True, **{f"groups_{k}": v for k, v in self.counts.items()}}
