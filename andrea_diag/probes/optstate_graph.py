"""The optimizer-state probe's per-update device arithmetic as one CUDA graph (``--cuda-graph``).

    graphs = ScalarGraph()
    flat, slots = graphs.run((ms, vs, ...), compute)   # compute() -> (vector, slots)

Why: at every update the probe launches ``‖m‖``, ``‖v‖`` per tensor, ``Δθ = θ_prev - θ``, its
norms and ``Δθ·g``: about ten multi-tensor ops over every parameter, 1.3 ms of host time an
update at 12m on the H200 (reports/bench-train/h200-2026-12-01c/host-12m-fp32-e1.txt) for
microseconds of GPU work. Replayed, they are one call and one copy of the result.

- **The same ops, the same numbers:** the graph records the eager path's own calls; a replay
  writes the same values into the same static vector, which is copied out (the probe keeps each
  update's vector until the flush).
- **Key:** the tensors it reads (moments, parameters, snapshot, gradients), held weakly
  (:class:`~andrea_diag.tensor_keys.TensorKey`: a freed tensor's reused id never matches). Only
  a key seen on two calls in a row, past :data:`WARM` eager calls, is captured; a replay runs
  only on the captured key, and anything else runs eagerly. The accumulation group's capture moves the
  gradients, and a resume or a first step makes new moments: both change the key.
- Only the common update is graphed (the probe decides): moments present, update statistics on
  their schedule, no spike (a spike's extra norms and host reads stay eager). A pipelined
  update (train/pipeline.py) is launched before its spike is known: it is replayed, and a
  spike's norms come later from a copy of the gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from andrea_diag.errors import capture_refused
from andrea_diag.tensor_keys import TensorKey

WARM = 2  # eager calls before a capture: the allocator and the kernels' first-use set-up
Result = tuple[torch.Tensor, dict[str, slice]]


def capture(compute: Callable[[], Result]) -> tuple[torch.cuda.CUDAGraph, Result]:
    """``compute()`` captured as a CUDA graph, not yet replayed, and its static outputs."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # syncs, then records on a side stream: nothing runs
        out = compute()
    return graph, out


class ScalarGraph:
    """Runs one probe computation eagerly, or through a CUDA graph captured for its key."""

    def __init__(self) -> None:
        self.graph: torch.cuda.CUDAGraph | None = None
        self.key: TensorKey | None = None
        self.out: Result | None = None
        self._last: TensorKey | None = None  # the previous call's key
        self.counts = {"eager": 0, "replayed": 0, "captured": 0}

    def run(self, groups: tuple, compute: Callable[[], Result]) -> Result:
        """``compute()``'s vector (a copy the next call does not overwrite) and its slots.
        ``groups``: the tensors it reads (:class:`TensorKey`'s groups)."""
        if self.key is not None and self.graph is not None and self.key.matches(*groups):
            self._last = self.key  # the common update: replayed, no key built
            return self._replay()
        key = TensorKey(*groups)
        last, self._last = self._last, key
        if self.graph is None or key != self.key:
            if key != last or self.counts["eager"] < WARM:
                self.counts["eager"] += 1
                return compute()
            self.graph = None  # a new key: the old graph (and its pool) goes
            try:
                self.graph, self.out = capture(compute)
            except RuntimeError as e:  # torch refused to capture these ops
                raise capture_refused("the optimizer-state probe's arithmetic", e) from None
            self.key = key
            self.counts["captured"] += 1
        return self._replay()

    def _replay(self) -> Result:
        assert self.graph is not None and self.out is not None
        self.graph.replay()
        self.counts["replayed"] += 1
        return self.out[0].clone(), self.out[1]
