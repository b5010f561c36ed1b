"""The pipelined update (``--cuda-graph``): an update's host part runs while the device runs the
next update's accumulation group.

    pipe = Pipeline(trainer, wanted=cfg.cuda_graph)  # the trainer's; refused: all eager
    rows = pipe.advance(update)        # launches ``update``, finishes the one before it
    rows += pipe.drain()               # finishes the launched one (a checkpoint, the end)

Why: the eager update (``Trainer.train_update``) reads its values (loss, norms, flags) before
the optimizer step and the probes, because both decide on them. So the device waits while the
host does the probes' and the row's work: about 3 ms an update at 12m on an H200, more than a
third of a graphed update (reports/bench-train/h200-2026-12-01d/). Here an update is launched
whole before anything is read:

1. the optimizer step is decided on the device (:meth:`StepRunner.step_unless`: fused Adam's
   ``found_inf``, 1 where the eager path would not step);
2. the probes' device work on the gradients runs in their ``launch_`` hooks (the
   optimizer-state probe's norms, and a copy of ``g`` for a spike's, since a spike is known
   only later; off the ``--update-stats-every N`` schedule its snapshot of θ, for a spike's
   update stats; both copies only where the device flags a possible spike,
   probes/spike_bound.py);
3. the values are copied to pinned host memory behind the update (:class:`PendingRead`; the
   probes' deferred columns too, :class:`~andrea_diag.device.HostCopy`, read as each lands, so
   a flush waits for no later work);
4. the host part (the read, the row, every probe's hooks, the evaluation) runs after the next
   update's group is launched and before its clip. The weights, the optimizer state and the
   clip pass's outputs are still the update's own then. Only the gradients are not, and no
   probe's host part reads them (each says so: ``pipeline_safe``).

The rows, events and summaries are the eager path's (tests/test_pipeline.py, bit for bit on the
CPU). A row's ``time_s`` is the time since the row before it was finished.

Eager instead (the run sheet's ``pipeline_refused`` says why): without ``--cuda-graph``; an
optimizer step that is not torch's fused Adam stepped by its precision (fp16's GradScaler);
the exp3 mixer (the next batch follows this update's losses); replicas; a probe whose host part
needs the gradient, or one that does not say (``pipeline_safe``).
The first :data:`CAPTURED_BY` updates are
eager, for the graphs' captures and the optimizer's lazily made state; their steps already
take the skip flag (:attr:`StepRunner.device_skip`), so the step's graph is captured once.

It drives the trainer's own pieces (``_batch``, ``_accumulate``, ``_reduce_and_clip``,
``_measure``, ``_context``, ``_finish_row``) in ``Trainer.train_update``'s order, with the read moved behind the step: a
change to one order belongs in the other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from andrea_diag.clip.api import ClipResult
from andrea_diag.train import heap
from andrea_diag.train.accumulation import GroupResult
from andrea_diag.train.graphed_step import CAPTURED_BY, graphable_optimizer
from andrea_diag.train.measure import PendingRead

if TYPE_CHECKING:  # data is a lower layer
    from andrea_diag.data.batches import Batch

# the trainer (train/loop.py) composes a Pipeline, so its type is not imported here (a cycle)
Trainer = Any


def refusal(trainer: Trainer) -> str | None:
    """Why ``trainer`` cannot run pipelined (None: it can), in words for the run sheet."""
    plan = trainer.plan
    if not graphable_optimizer(trainer.optimizer, trainer.precision):
        return "the optimizer step is not torch's fused Adam stepped by its precision"
    if trainer.dist.world_size > 1:
        return "replicas read every update together"
    if not plan.replaying and plan.mixer is not None and plan.mixer.observes_losses:
        return "the mixer draws the next batch from this update's losses"
    return trainer.probes.pipeline_refusal()


@dataclass
class LaunchedUpdate:
    """An update launched whole, its host part still to do."""

    update: int
    batch: Batch
    injected: str | None
    group: GroupResult
    clip: ClipResult
    read: PendingRead
    lr: float  # the row's lr: the scheduler has stepped since
    t0: float


class Pipeline:
    """Runs a trainer's updates pipelined, or each one eagerly where :func:`refusal` says."""

    def __init__(self, trainer: Trainer, wanted: bool) -> None:
        self.trainer, self.wanted = trainer, wanted
        self.refused = refusal(trainer) if wanted else "off without --cuda-graph"
        # the warm-up's steps read the skip flag too: one step graph, not one before and after
        trainer.steps.device_skip = self.refused is None
        self.pending: LaunchedUpdate | None = None
        self._done_at = 0.0  # when the last pipelined row was finished (perf_counter)
        self.counts = {"eager": 0, "pipelined": 0}
        # CUDA, where the device waits for a paused host: the heap settles once the warm-up's
        # captures are done (train/heap.py: why); tests set it on the CPU
        self.settle_heap = trainer.device.type == "cuda"

    def advance(self, update: int) -> list[dict[str, Any]]:
        """Launch ``update`` and finish the one launched before it: the rows finished now."""
        t = self.trainer
        if self.settle_heap and update > CAPTURED_BY:
            self.settle_heap = False
            heap.settle()
        if self.refused is not None or update <= CAPTURED_BY or not t.optimizer.state:
            rows = self.drain()
            self.counts["eager"] += 1
            return [*rows, t.train_update(update)]
        t0 = time.perf_counter()
        batch, injected = t._batch(update)
        group = t._accumulate(batch, injected)  # the device runs this group ...
        # ... while the host draws the next batch (no device work; a mixer that would observe
        # this update's losses refuses the pipeline) and finishes the update before: the host
        # work the device waits for is the launches below, so what need not be one comes first
        t.plan.prefetch(update + 1, last=t.cfg.steps)
        rows = self.drain()
        clip = t._reduce_and_clip()
        lr = t.optimizer.param_groups[0]["lr"]
        ctx = t._context(update, batch, injected, clip, None, {}, False)  # nothing read yet
        ctx.cache["group"] = group  # its device loss: the optimizer-state probe's spike bound
        t.probes.launch("after_clip", ctx)
        read = PendingRead(batch, group, clip, t.reducer, t.dist)  # no sync: copied behind
        t.steps.step_unless(read.skip_flag)  # the device skips what the eager path would
        t.scheduler.step()  # per update, attempted or applied, as in train_update
        t.probes.launch("after_step", ctx)
        self.pending = LaunchedUpdate(update, batch, injected, group, clip, read, lr, t0)
        self.counts["pipelined"] += 1
        return rows

    def drain(self, crashed: bool = False) -> list[dict[str, Any]]:
        """Finish the launched update, if any: its read, row, probes and evaluation (not after
        a crash: the row is kept, a long evaluation would hold the exit)."""
        if self.pending is None:
            return []
        p, self.pending = self.pending, None
        t = self.trainer
        read = p.read.result()  # waits for this update's copy, not for the group after it
        row, ctx = t._measure(p.update, p.batch, p.injected, p.group, p.clip, read=read, lr=p.lr)
        t.probes.after_clip(ctx)
        t.probes.after_step(ctx)
        start = max(p.t0, self._done_at)  # since the row before: the updates overlap
        row = t._finish_row(p.update, p.batch, p.injected, row, ctx, start, evaluate=not crashed)
        # the deferred columns whose copies have landed, now (no wait; after the row, as the
        # flush adds them): the flush, which waits, is left with about one update's (issue 20)
        t.probes.resolve(ready_only=True)
        self._done_at = time.perf_counter()
        return [row]

    def describe(self) -> dict[str, Any]:
        """For the run sheet (``--cuda-graph`` only): pipelined or not, why, and how often."""
        if not self.wanted:
            return {}
        return {"pipelined": self.refused is None, "pipeline_refused": self.refused,
                "updates_pipelined": self.counts["pipelined"]}  # fmt: skip
