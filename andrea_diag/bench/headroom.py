"""Where the fused clip's norm-only time goes (issue 20 item 5), as extra rows of the "clip" case.

    from andrea_diag.bench.headroom import GradSet, diagnostic_rows
    rows = diagnostic_rows(GradSet("120m", "fp32", grads, pristine, restore, timer, nbytes))

Each row is checked against the float64 truth before it is timed. Against the headline rows of
:mod:`andrea_diag.bench.clip` (the same bytes, the same timer):

- ``k_clip_norm(flat)``: the norm pass over ONE tensor holding every gradient: what the list's
  many tensors (pieces, per-tensor reductions) cost;
- ``torch_norm_flat_graph`` and its ``(clean L2)`` twin: ``torch.linalg.vector_norm`` of that
  one tensor, graphed: a reference point from outside our kernels (the stack's general
  reduction over the same bytes, one launch; not a bound);
- ``k_clip_norm(clean L2)``, ``cuda_three_graph(clean L2)``, its block-pieces twin (the norm
  pass with one block reduction per tensor piece, the kernel before parked pieces) and
  ``torch_foreach_graph(clean L2)``, and the pair under each of the norm pass's load modes
  (``cuda_three_graph_load_*``, :func:`andrea_diag.clip.cuda.set_norm_load`): timed after a
  flush that leaves L2 holding clean lines.
  The default flush writes a 256 MB buffer, so the first reads of the timed call also pay the
  write-back of ~L2-size dirty lines that are not the clip's own.
- ``k_clip_norm(held)``, ``cuda_three_graph(held)``, ``torch_foreach_graph(held)`` and
  ``torch_norm_flat_graph(held)``: the goal's flush, then a GPU spin of :data:`HOLD_US` before
  the start event (``Timer(hold_us=...)``, NVBench's blocking kernel), so the timed call is
  queued before the GPU reaches it: what a host launch gap adds to the plain rows, if anything.
  In training the clip is queued behind the backward's kernels, as it is here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from andrea_diag.bench.harness import INACTIVE, Row, Timer, graph_replay, make_row
from andrea_diag.clip import reference

HOLD_US = 200.0  # the spin before a held row's start event: far past any launch's host time


class GradSet(NamedTuple):
    """One (preset, dtype) gradient set of the "clip" case and how its rows are timed: what
    ``bench.clip``'s stage rows and these diagnostic rows both take (a tuple: unpacked whole)."""

    size: str
    dt: str
    grads: list[torch.Tensor]  # clipped in place by the timed steps
    pristine: list[torch.Tensor]  # the untouched copy: the float64 truth and ``restore``'s source
    restore: Callable[[], None]  # grads <- pristine
    timer: Timer
    nbytes: int  # bytes of one read of every gradient


def diagnostic_rows(gset: GradSet) -> list[Row]:
    """The rows listed in the module docstring (CUDA only); raises if one is wrong."""
    from andrea_diag.clip import cuda

    size, dt, grads, pristine, restore, timer, nbytes = gset

    total64 = reference.float64_truth(pristine, INACTIVE)[0]
    flat = torch.cat([g.reshape(-1) for g in pristine])

    def norm(gs: list[torch.Tensor]) -> torch.Tensor:
        return cuda.clip(gs, INACTIVE, apply=False)[0]

    def torch_step() -> torch.Tensor:
        holders = [reference.GradHolder(x) for x in grads]
        return torch.nn.utils.clip_grad_norm_(holders, INACTIVE, foreach=True)

    clean = Timer(timer.device, timer.reps, timer.warmup, clean_l2=True)
    held = Timer(timer.device, timer.reps, timer.warmup, hold_us=HOLD_US)
    # (mode, variant, step, timer, norm tolerance: torch's bf16 norm is computed in bf16)
    steps: list[tuple[str, str, Callable[[], torch.Tensor], Timer, float]] = [
        ("stage", "k_clip_norm(flat)", lambda: norm([flat]), timer, 1e-5),
        ("stage", "k_clip_norm(clean L2)", lambda: norm(grads), clean, 1e-5),
        ("stage", "k_clip_norm(held)", lambda: norm(grads), held, 1e-5),
    ]
    clip = lambda: cuda.clip(grads, INACTIVE)[0]  # noqa: E731
    for name, step, tol, setting in (
        ("cuda_three_graph", clip, 1e-5, None),
        # the block-pieces kernel is chosen at launch, so at capture (bench.clip's A/B row)
        ("cuda_three_graph_blockpieces", clip, 1e-5, (cuda.set_parked_pieces, False)),
        ("torch_foreach_graph", torch_step, 2e-2, None),
        *[
            (f"cuda_three_graph_load_{m}", clip, 1e-5, (cuda.set_norm_load, m))
            for m in cuda.NORM_LOADS
        ],
    ):
        replay = graph_replay(name, step, restore, setting)
        if replay is not None:
            steps.append(("inactive", f"{name}(clean L2)", replay, clean, tol))
            if setting is None:  # the headline pair, on the goal's flush, the start held
                steps.append(("inactive", f"{name}(held)", replay, held, tol))
    # A reference point from outside our kernels: torch's own norm of ONE contiguous buffer of
    # the same bytes, graphed (no list, no pieces, no per-tensor norms, no scale launch), under
    # each of the three timers. Not a bound: our kernels can beat it (they do at 120m).
    replay = graph_replay("torch_norm_flat_graph", lambda: torch.linalg.vector_norm(flat), restore)
    if replay is not None:
        tol = 1e-4 if dt == "fp32" else 2e-2  # torch's bf16 norm is rounded to bf16
        for tm, suffix in ((timer, ""), (clean, "(clean L2)"), (held, "(held)")):
            steps.append(("inactive", f"torch_norm_flat_graph{suffix}", replay, tm, tol))
    rows = []
    for mode, name, fn, tm, tol in steps:
        restore()
        err = reference.rel_err(fn(), total64)
        if not err <= tol:
            raise AssertionError(f"{name} {size} {dt}: rel err norm {err:.2e}")
        rows.append(make_row(size, dt, mode, name, tm(fn, restore), nbytes, rel_err_norm=err))
    return rows
