"""One training arm: a :class:`Trainer` composed of components, one update at a time.

    from andrea_diag.train.loop import train_arm
    summary = train_arm(cfg.resolve(), run_dir, data, plan)

The body of one update (:meth:`Trainer.train_update`) is the order of operations the v2 fix
depends on, top to bottom:

1. batch: the plan's tokens for this update (identical in every arm), plus any injection;
2. accumulate: denominator from the host tokens, grads zeroed (only here, between groups),
   forward + token-weighted backward per microbatch (autocast, the reducer's context);
3. reduce: gradients made global across replicas (one process: nothing to do);
4. unscale: gradients back in true units (fp32: nothing to do);
5. clip: after the last microbatch, before the optimizer touches ``m``/``v``;
6. measure: the next update's batch is drawn while the device works (``plan.prefetch``), then
   the update's one host sync (``measure.read_group``: loss, grad norm, post-clip norm,
   non-finite and skip flags, per-example losses), from which the row's loop columns are host
   arithmetic (per-source losses, clip coefficient) and the probes' ``UpdateContext`` is built;
7. probes ``after_clip``, optimizer step (if applied; ``--cuda-graph``: a replay), scheduler
   step (per update), probes ``after_step``; then evaluation and one metrics row, written every
   ``flush_every`` rows, when the probes' device scalars are read too (``defer=True``).

Each part is a component with ``state_dict``/``load_state_dict`` (``components.py``, the clipper
registry in ``clip/modes.py``, the probe driver in ``probes/driver.py``); run state lives in
:class:`~andrea_diag.train.components.TrainState`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from andrea_diag import __version__
from andrea_diag.clip.api import ClipResult
from andrea_diag.clip.modes import make_clipper
from andrea_diag.config import RunConfig, parse_injections
from andrea_diag.data.injection import make_outlier_batch, outlier_generator
from andrea_diag.device import resolve_device
from andrea_diag.errors import UserError
from andrea_diag.factories import build_model, config_record, run_sheet_origins
from andrea_diag.probes import ProbeDriver, UpdateContext, build_probes
from andrea_diag.record import NullRecorder, Recorder
from andrea_diag.train import heap
from andrea_diag.train.accumulation import IGNORE, GroupResult
from andrea_diag.train.checkpoint import (
    Checkpointer,
    Need,
    fitting,
    load_checkpoint,
    rng_state,
    set_rng_state,
)
from andrea_diag.train.components import (
    ClipTimer,
    Evaluator,
    Reducer,
    Stateful,
    TrainState,
    make_precision,
    seed_and_precision,
)
from andrea_diag.train.distributed import DDPReducer, init_from_env
from andrea_diag.train.evaluation import build_evaluator
from andrea_diag.train.graphed import GroupRunner
from andrea_diag.train.graphed_step import StepRunner
from andrea_diag.train.measure import UpdateRead, loop_columns, read_group
from andrea_diag.train.optim import build_optimizer, build_scheduler
from andrea_diag.train.pipeline import Pipeline
from andrea_diag.train.rows import overflow_last
from andrea_diag.train.summary import oom_advice, run_sheet, summarize, unigram_entropy

if TYPE_CHECKING:  # the seams' types, for readers and checkers; data is a lower layer
    from andrea_diag.data.batches import Batch, BatchPlan
    from andrea_diag.data.prepare import PreparedData

ProgressFn = Callable[[int, dict[str, Any]], None]
PROMPT_TOKENS = 16  # lock-in prompt length, taken from the start of each source stream


class Trainer:
    """One arm: model, optimizer, scheduler, precision, reducer, clipper, probes, evaluator."""

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path,
        data: PreparedData,
        plan: BatchPlan,
        *,
        resume: bool = False,
    ) -> None:
        self.cfg, self.run_dir, self.data, self.plan = cfg, run_dir, data, plan
        self.device = resolve_device(cfg.device)
        self.dist = init_from_env(self.device.type)  # D > 1 under --nproc or torchrun
        if self.device.type == "cuda" and self.dist.world_size > 1:
            self.device = torch.device("cuda", self.dist.local_rank)
        self.injections = parse_injections(cfg.inject, cfg.steps)
        seed_and_precision(cfg)  # process-global: right before the model, as every arm must
        self.model = build_model(cfg).to(self.device)  # the toolkit GPT or --model/--hf-config
        self.names, self.params = (
            list(t) for t in zip(*self.model.named_parameters(), strict=True)
        )
        self.optimizer = build_optimizer(self.model, cfg.recipe_cfg, cfg.lr, self.device)
        self.scheduler = build_scheduler(self.optimizer, cfg.recipe_cfg.warmup_updates)
        self.precision = make_precision(cfg.precision, self.device)
        self.reducer: Reducer | DDPReducer = Reducer()
        self.forward_model: torch.nn.Module = self.model
        if self.dist.world_size > 1:
            self.reducer = DDPReducer(self.model, self.dist, self.device)
            self.forward_model = self.reducer.module
        self.clipper = make_clipper(
            cfg.clip, cfg.max_norm, cfg.clip_impl, cfg.clip_params, optimizer=self.optimizer
        )
        self.clip_timer = ClipTimer(self.device)
        self.groups = GroupRunner(  # --cuda-graph: refused here off CUDA or at D > 1
            self.forward_model, self.precision, self.reducer, self.device,
            functools.partial(self.optimizer.zero_grad, set_to_none=True),  # no cycle to self
            self.params, graphed=cfg.cuda_graph,
        )  # fmt: skip
        self.steps = StepRunner(self.optimizer, self.precision, self.params, graphed=cfg.cuda_graph)
        self.recorder: Recorder | NullRecorder = NullRecorder()
        if self.dist.is_main:  # rank 0 alone writes: the other replicas record nothing, probe none
            record = config_record(cfg, self.model)
            self.recorder = Recorder(run_dir, record, resume=resume, flush_every=cfg.flush_every)
        self.recorder.write("data.json", data.describe())
        # rank 0 evaluates (the weights are the same on every replica)
        self.evaluator: Evaluator = (
            build_evaluator(cfg, data, self.device, self.precision, self.recorder)
            if self.dist.is_main
            else Evaluator()
        )
        # lock-in prompts: each source stream's first tokens (a document start), fixed per data;
        # the sources: SOURCE_NAMES, or the given ones alone (--sources only, token ids)
        self.source_names = tuple(data.streams)
        prompts = {name: data.streams[name][:PROMPT_TOKENS] for name in self.source_names}
        probes = build_probes(
            cfg, self.model, prompts=prompts, tokenizer=data.tokenizer,
            source_names=self.source_names, unigram_entropy=unigram_entropy(data.token_counts),
        )  # fmt: skip
        # defer: the probes' per-update device scalars are read at the recorder's flush
        self.probes = ProbeDriver(probes if self.dist.is_main else [], self.recorder, defer=True)
        self.rare_ids = data.rare_token_ids()
        self.state = TrainState()
        self.checkpointer = Checkpointer(run_dir, cfg.checkpoint_every if self.dist.is_main else 0)
        self.pipeline = Pipeline(self, wanted=cfg.cuda_graph)  # train/pipeline.py: when, why

    # -- one update ----------------------------------------------------------------------------
    def train_update(self, update: int) -> dict[str, Any]:
        """Run optimizer update ``update`` (1-based) and return its metrics row. Columns the
        probes keep on the device (optimizer-state norms) join the row at the recorder's flush."""
        t0 = time.perf_counter()
        batch, injected = self._batch(update)
        group = self._accumulate(batch, injected)
        clip = self._reduce_and_clip()
        self.plan.prefetch(update + 1, last=self.cfg.steps)  # host work while the device runs
        row, ctx = self._measure(update, batch, injected, group, clip)  # host sync
        self.probes.after_clip(ctx)
        self.steps.step(ctx.applied)  # precision.step, or its graph's replay (--cuda-graph)
        self.scheduler.step()  # per update, attempted or applied: the schedule counts updates
        self.probes.after_step(ctx)
        return self._finish_row(update, batch, injected, row, ctx, t0)

    def _finish_row(
        self, update: int, batch: Batch, injected: str | None, row: dict[str, Any],
        ctx: UpdateContext, t0: float, evaluate: bool = True,
    ) -> dict[str, Any]:  # fmt: skip
        """The update's last host work, eager or pipelined: the mixer, evaluation, the row."""
        # 0-dim host tensors (read above): exp3 skips non-finite ones, seeded ignores them
        self.plan.observe(update, {n: row[f"loss_{n}"] for n in self.source_names})
        row |= self.evaluator.maybe_evaluate(update, self.model) if evaluate else {}
        row.update(
            applied=ctx.applied,
            batch_hash=batch.hash,
            injected=injected,
            time_s=time.perf_counter() - t0,
        )
        self.recorder.log(row)
        self.state.update = update
        return row

    def _batch(self, update: int) -> tuple[Batch, str | None]:
        batch = self.plan.batch(update)
        injected = self.injections.get(update)
        if injected == "outlier":
            # Half of one microbatch becomes rare-token sequences (a quarter of the group at
            # A=2): enough to spike, few enough that the rest stays ordinary (the outlier cause
            # asks whether a few sequences carry the excess). Every arm injects the same batch.
            batch = make_outlier_batch(
                batch,
                outlier_generator(self.cfg.seed, update),
                self.data.vocab_size,
                self.rare_ids,
                n_sequences=max(1, batch.micro_batch // 2),
            )
        self.state.batch_hashes.append(batch.hash)
        self.state.phases.append(batch.phase)
        return batch, injected

    def _accumulate(self, batch: Batch, injected: str | None) -> GroupResult:
        host = self.reducer.local_batch(batch.tokens)  # (A, m, T+1), this replica's, on the host
        local_tokens = int((host[:, :, 1:] != IGNORE).sum())  # the denominator: no device read
        hook = overflow_last(host.size(0)) if injected == "nonfinite" else None
        return self.groups.run(host, local_tokens, hook)  # zero grads, forward, backward

    def _reduce_and_clip(self) -> ClipResult:
        """Gradients global, in true units, then clipped (timed): eager and pipelined alike."""
        self.reducer.reduce(self.params)
        self.precision.unscale_(self.optimizer)
        with self.clip_timer:
            return self.clipper(self.params)

    def _measure(
        self, update: int, batch: Batch, injected: str | None, group: GroupResult,
        clip: ClipResult, read: UpdateRead | None = None, lr: float | None = None,
    ) -> tuple[dict[str, Any], UpdateContext]:  # fmt: skip
        """The update's one host read (``read``: the pipeline's, done), its row's loop columns,
        then the probes' context (whose ``row`` is that row: the probes add their columns)."""
        read = read or read_group(batch, group, clip, self.reducer, self.dist)  # host sync
        st = self.state
        st.microbatches += group.microbatches
        st.examples += read.example_loss.numel()
        st.tokens += group.tokens
        boundary = self.probes.enter_phase(batch.phase)  # the driver remembers the last phase
        lr = self.optimizer.param_groups[0]["lr"] if lr is None else lr  # before its step
        row = loop_columns(update, batch, read, boundary, self.source_names, lr=lr,
                           counts=self.state.counts(), clip_ms=self.clip_timer.ms(),
                           loss_scale=self.precision.scale())  # fmt: skip
        return row, self._context(update, batch, injected, clip, read, row, boundary)

    def _context(
        self, update: int, batch: Batch, injected: str | None, clip: ClipResult,
        read: UpdateRead | None, row: dict[str, Any], boundary: bool,
    ) -> UpdateContext:  # fmt: skip
        """What the probes see of this update: the loop's facts, the driver's boundary.
        ``read`` None (the pipeline's launch hooks): nothing read yet, so the host values are
        placeholders (``row`` a scratch one) and only the device facts are real."""
        ctx = UpdateContext(
            update=update, model=self.model, optimizer=self.optimizer,
            param_names=self.names, params=self.params,
            loss=read.loss if read is not None else math.nan,
            example_loss=read.example_loss if read is not None else torch.empty(0),
            example_source=batch.source_idx.reshape(-1), clip=clip, recorder=self.recorder,
            row=row, phase=batch.phase, boundary=boundary, weights=dict(batch.weights),
            injected=injected, applied=read.applied if read is not None else True,
            skipped=read.skipped if read is not None else False,
        )  # fmt: skip
        if read is not None:
            ctx.cache["grads_nonfinite"] = read.grads_nonfinite  # read above: no second sync
        return ctx

    # -- the whole run -------------------------------------------------------------------------
    def run(self, progress: ProgressFn | None = None) -> dict[str, Any]:
        """Train to ``cfg.steps``; returns the summary. A crash keeps what was recorded."""
        t_start = time.perf_counter()
        try:
            for update in range(self.state.update + 1, self.cfg.steps + 1):
                rows = self.pipeline.advance(update)  # this update launched, the one before done
                due = self.checkpointer.due(update, self.cfg.steps)
                if due or update == self.cfg.steps:  # a checkpoint holds whole updates only
                    rows += self.pipeline.drain()
                for row in rows if progress is not None else ():
                    progress(row["update"], row)
                if due:
                    self.checkpointer.save(self.checkpoint_state(), update)
        except torch.OutOfMemoryError:
            self._close_crashed()
            raise UserError(*oom_advice(self.cfg, self.state.update + 1, self.device)) from None
        except BaseException:
            self._close_crashed()
            raise
        finally:
            heap.release()  # the set-up's objects, frozen by the pipeline (train/heap.py)
        return self._close(time.perf_counter() - t_start)

    def _close_crashed(self) -> None:
        if not self.dist.is_main:
            return
        # Keep everything recorded so far: the probes' events (spikes are written at close)
        # and metrics.parquet. Neither may replace the error that stopped the run, and a second
        # Ctrl-C must not skip the steps after it (the lock above all).
        partial: dict[str, Any] = {"status": "crashed"}
        # a launched update's row (train/pipeline.py), where it can still be read
        with contextlib.suppress(BaseException):
            self.pipeline.drain(crashed=True)
        with contextlib.suppress(BaseException):
            partial.update(self.probes.close(self.run_dir))
        with contextlib.suppress(BaseException):
            self.recorder.close()
        with contextlib.suppress(BaseException):  # each step on its own: a full disk failing one
            self.recorder.write("partial_summary.json", partial)
        with contextlib.suppress(BaseException):  # must not keep the lock
            self.recorder.release()

    def _close(self, wall_s: float) -> dict[str, Any]:
        if not self.dist.is_main:
            return {}
        self.recorder.flush()  # summarize reads metrics.jsonl
        summary = summarize(self.recorder, self.cfg, wall_s=wall_s)
        precision = self.precision.describe(self.cfg.matmul_precision, self.device)
        summary["run_sheet"] = run_sheet(self.cfg, self.device, self.state.tokens,
                                         precision=precision, replicas=self.reducer.world_size)  # fmt: skip
        summary["run_sheet"]["checkpoint_bytes"] = self.checkpointer.last_bytes
        summary["run_sheet"].update(run_sheet_origins(self.cfg, self.model, self.data))
        graphs = self.groups.describe() | self.steps.describe() | self.pipeline.describe()
        summary["run_sheet"].update(graphs)  # --cuda-graph
        summary.update(self.evaluator.summary(wall_s))
        summary.update(self.probes.close(self.run_dir))
        mixer = self.plan.mixer
        schedule = {"batch_hashes": self.state.batch_hashes, "phases": self.state.phases,
                    "mixer": mixer.describe() if mixer is not None else "replayed"}  # fmt: skip
        self.recorder.write("schedule.json", schedule)
        self.recorder.close(summary)
        return summary

    def components(self) -> dict[str, Stateful]:
        """Every part with ``state_dict`` / ``load_state_dict``, by its checkpoint key, in load
        order: the one list :meth:`state_dict` and :meth:`restore` both walk."""
        return {"model": self.model, "optimizer": self.optimizer, "scheduler": self.scheduler,
                "precision": self.precision, "reducer": self.reducer, "clipper": self.clipper,
                "evaluator": self.evaluator, "probe_driver": self.probes,
                "train_state": self.state}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """Every component's state: what a checkpoint holds (the probes' own state aside)."""
        return {key: part.state_dict() for key, part in self.components().items()}

    # -- checkpoints ---------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """What a checkpoint must match to be resumed into this trainer."""
        return {
            "version": __version__,
            "size": self.cfg.size,
            "vocab_size": self.cfg.model.vocab_size,
            "n_params": sum(p.numel() for p in self.model.parameters()),
            "replicas": self.reducer.world_size,
            "precision": self.cfg.precision,
            "data_key": getattr(self.data, "key", None),  # the same tokens, or no resume
        }

    def checkpoint_state(self) -> dict[str, Any]:
        """Everything :meth:`restore` needs to continue bit for bit (train/checkpoint.py)."""
        return {
            "identity": self.identity(),
            "update": self.state.update,
            "trainer": self.state_dict(),
            "probes": self.probes.probe_states(),
            "plan": self.plan.state_dict(),
            "rng": rng_state(),
            "recorder": self.recorder.positions(),
        }

    def restore(self, path: Path) -> None:
        """Continue from the checkpoint at ``path``: rows written after it are cut. It is
        checked against the live model and optimizer (a --model's too) before it is read."""
        state = load_checkpoint(path, self.identity(), Need.of(self.model, self.optimizer))
        with fitting(path):  # all of it, before any table is cut back
            for key, part in self.components().items():
                part.load_state_dict(state["trainer"][key])
            self.probes.load_probe_states(state["probes"])
            self.plan.load_state_dict(state["plan"])
            set_rng_state(state["rng"])
            positions = {str(k): int(v) for k, v in state["recorder"].items()}
        self.recorder.rewind(positions)
        self.checkpointer.last_bytes = path.stat().st_size


def train_arm(
    cfg: RunConfig,
    run_dir: Path,
    data: PreparedData,
    plan: BatchPlan,
    *,
    progress: ProgressFn | None = None,
    resume_from: Path | None = None,
) -> dict[str, Any]:
    """Train one arm for ``cfg.steps`` updates, recording into ``run_dir``; returns the summary.

    ``data`` is a ``PreparedData`` (tokenizer, streams, source metadata), ``plan`` a ``BatchPlan``
    whose ``batch(update)`` gives every arm of a cascade the same tokens, and ``resume_from`` a
    checkpoint of this arm to continue from (``--resume``)."""
    trainer = Trainer(cfg, run_dir, data, plan, resume=resume_from is not None)
    try:
        if resume_from is not None:
            trainer.restore(resume_from)
    except BaseException:  # a checkpoint refused (nothing was written): the arm's lock goes too
        trainer.recorder.release()
        raise
    return trainer.run(progress)
