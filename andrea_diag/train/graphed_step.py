"""The optimizer step, eager or as a CUDA graph captured once and replayed (``--cuda-graph``).

    steps = StepRunner(optimizer, precision, params, graphed=True)
    steps.step(applied)          # after the clip and the probes' after_clip, as before
    steps.step_unless(skip)      # or: the device decides (the pipelined update, pipeline.py)

Why: torch's fused Adam is one kernel launch per dtype, but its ``step()`` walks every
parameter in Python first (``_init_group``), about 1 ms of host time an update at 12m on the
H200 (reports/bench-train/h200-2026-12-01c/host-*.txt), while the GPU runs the step in tens of
microseconds. A replay is one call.

What is captured, and when:

- **Only torch's fused** ``Adam``/``AdamW`` (the trainer's optimizers on CUDA), and only where
  the precision steps the optimizer itself: fp16's GradScaler hands the fused kernel a new
  found-inf tensor and loss scale each step, which a graph would bake in as they were at the
  capture, so fp16 (and any other optimizer) steps eagerly, as without the flag.
- **The same kernel, the same numbers.** The graph records the eager step's own fused kernel
  with its scalar arguments (lr, betas, eps, weight decay) as they are at the capture; the
  step count lives on the device and advances in the graph. So a replay computes what the eager
  step would, bit for bit. torch's tensor-lr path would let one graph follow a schedule, but it
  reads the lr as a float32 (``FusedAdamMathFunctor``), not the double the eager step passes.
- **Key:** the gradient tensors and the optimizer-state tensors, held weakly
  (:class:`~andrea_diag.tensor_keys.TensorKey`: a freed tensor's reused id never matches), and
  every group's hyperparameters. ``load_state_dict`` (a resume) makes new state tensors. A replay runs
  only while the key is the captured one; the first step whose key differs runs eagerly, and a
  key that holds for two steps in a row is captured again (a warm-up schedule runs eagerly
  until the lr settles, then is captured once). The gradients' identity matters because the
  accumulation group's own capture (``graphed.py``) moves them into its graph's pool.
- **Warm-up:** the first :data:`~andrea_diag.train.graphed.WARMUP_UPDATES` steps are eager.
- A skipped update (``applied`` False) replays nothing, as the eager path steps nothing;
  :meth:`StepRunner.step_unless` (and every step, once ``device_skip`` is set) leaves the skip
  to the device instead: a replay whose kernel returns at once.

``graphed=False`` is ``precision.step(optimizer, applied)`` unchanged (tests/test_graphed_step.py).
"""

from __future__ import annotations

from typing import Any

import torch

from andrea_diag.errors import capture_refused
from andrea_diag.optim_state import ParamStates
from andrea_diag.tensor_keys import TensorKey
from andrea_diag.train.components import Precision
from andrea_diag.train.graphed import WARMUP_UPDATES

# the update by which both graphs exist: the group's is captured at WARMUP_UPDATES + 1, which
# moves the gradients into its pool, so the step's key holds first at the update after
CAPTURED_BY = WARMUP_UPDATES + 2
# the hyperparameters a fused Adam kernel takes as scalars: a change is a new capture
HYPER = ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize")
STATE = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step")  # the tensors the kernel updates


def graph_step(optimizer: torch.optim.Optimizer) -> torch.cuda.CUDAGraph:
    """``optimizer.step()`` captured as a CUDA graph, not yet replayed. torch refuses a
    capture unless every group is ``capturable``; the flag only lifts that check for the fused
    kernel, so it is set for the capture and put back (checkpoints keep the run's own)."""
    groups = optimizer.param_groups
    flags = [g.get("capturable", False) for g in groups]
    graph = torch.cuda.CUDAGraph()
    try:
        for g in groups:
            g["capturable"] = True
        with torch.cuda.graph(graph):  # syncs, then records on a side stream: nothing runs
            optimizer.step()
    finally:
        for g, flag in zip(groups, flags, strict=True):
            g["capturable"] = flag
    return graph


def graphable_optimizer(optimizer: torch.optim.Optimizer, precision: Precision) -> bool:
    """True for torch's own fused Adam/AdamW stepped by the base precision (no loss scaler)."""
    fused = all(g.get("fused") for g in optimizer.param_groups)
    own_step = type(precision).step is Precision.step  # fp16's scaler: new tensors each step
    return type(optimizer) in (torch.optim.Adam, torch.optim.AdamW) and fused and own_step


class StepRunner:
    """Runs the trainer's optimizer step: eagerly, or through a captured CUDA graph."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        precision: Precision,
        params: list[torch.nn.Parameter],
        *,
        graphed: bool = False,
    ) -> None:
        self.optimizer, self.precision, self.params = optimizer, precision, params
        self.graphed = graphed and graphable_optimizer(optimizer, precision)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.key: TensorKey | None = None  # the captured key
        self._last: TensorKey | None = None  # the previous step's key
        self._skip: torch.Tensor | None = None  # step_unless's flag, read by its graph
        # every graphed step reads the flag (set by a Pipeline that will run): one graph
        self.device_skip = False
        self.counts = {"eager": 0, "replayed": 0, "captured": 0}
        self._states = ParamStates()  # the per-parameter state dicts, not looked up each step

    def _groups(self, device_skip: bool) -> tuple[list, list, tuple]:
        """What a step graph reads: the gradients, the moments, and the hyperparameters with the
        skip flag's use. The state dicts are cached (a tensor's hash is a Python call)."""
        state = self._states.of(self.optimizer, self.params)
        moments = [None if s is None else s.get(k) for s in state for k in STATE]
        hyper = tuple(tuple(g.get(k) for k in HYPER) for g in self.optimizer.param_groups)
        return [p.grad for p in self.params], moments, (hyper, device_skip)

    def step(self, applied: bool) -> None:
        """One optimizer step for an update (skipped, as the eager path does, if not applied)."""
        if not self.graphed:
            self.precision.step(self.optimizer, applied)
        elif self.device_skip and (applied or self.optimizer.state):
            # the host's decision as the flag a pipelined step reads (a skip before the first
            # step steps nothing: the eager path makes no optimizer state there either)
            self.step_unless(not applied)
        elif applied:
            self._graphed_step(device_skip=False)

    def step_unless(self, skip: torch.Tensor | bool) -> None:
        """One step that the device itself skips where ``skip`` (0-dim float32) is 1: the
        pipelined update (``train/pipeline.py``) steps before it reads anything, through fused
        Adam's ``found_inf`` input (GradScaler's mechanism: the kernel returns at once and the
        step counts are put back). Where it is 0 the kernel and its numbers are the plain
        step's. The flag is copied into one tensor of this runner's, the one a graph reads."""
        if self._skip is None:
            device = skip.device if isinstance(skip, torch.Tensor) else self.params[0].device
            self._skip = torch.zeros((), dtype=torch.float32, device=device)
        if isinstance(skip, torch.Tensor):
            self._skip.copy_(skip)
        else:  # a host decision: a fill, no copy from the host
            self._skip.fill_(float(skip))
        self.optimizer.found_inf = self._skip  # type: ignore[attr-defined]
        try:
            if self.graphed:
                self._graphed_step(device_skip=True)
            else:
                self.optimizer.step()
        finally:
            del self.optimizer.found_inf  # type: ignore[attr-defined]

    def _graphed_step(self, device_skip: bool) -> None:
        # a graph records whether the step reads the skip flag: a change is a new key
        grads, moments, extra = self._groups(device_skip)
        if self.graph is not None and self.key and self.key.matches(grads, moments, extra=extra):
            self._replay()  # the common step: no key built
            self._last = self.key
            return
        key = TensorKey(grads, moments, extra=extra)
        if self.graph is not None and key == self.key:
            self._replay()
        elif self.counts["eager"] >= WARMUP_UPDATES and key == self._last:
            self._capture(key)
        else:
            self.counts["eager"] += 1
            self.optimizer.step()
        self._last = key

    def _capture(self, key: TensorKey) -> None:
        self.graph = None  # a new key replaces the old graph (and frees its pool)
        try:
            self.graph = graph_step(self.optimizer)
        except RuntimeError as e:  # torch refused to capture this optimizer
            raise capture_refused("this optimizer's step", e) from None
        self.key = key
        self.counts["captured"] += 1
        self._replay()  # this update's step

    def _replay(self) -> None:
        assert self.graph is not None
        self.graph.replay()
        self.counts["replayed"] += 1

    def describe(self) -> dict[str, Any]:
        """For the run sheet: this process's steps, eager and replayed ({} when not graphed)."""
        if not self.graphed:
            return {}
        return {f"steps_{k}": v for k, v in self.counts.items()}
