"""The training loop against a plain one: what the engine (every default probe on) costs.

    from andrea_diag.bench.train import bench_train
    result = bench_train(RunConfig(size="12m", precision="bf16").resolve(), updates=200,
                         warmup=20, block=10)

Both loops train the same model (same seed, preset, ``m``/``A``/``seq_len``, precision,
matmul precision, clip mode and clip implementation) on the same token batches, in one process:

- **engine**: :class:`~andrea_diag.train.loop.Trainer` updates as a run makes them
  (``pipeline.advance``: pipelined under ``--cuda-graph``, train/pipeline.py; a block ends with
  its last update finished), every default probe on
  (evaluation and checkpoints off: they are not per-update work; nor is the lock-in probe's
  sample, once a run by default: it is timed on its own, ``once_per_run``, with its share of
  an update over the run's own length);
- **plain**: forward, token-weighted backward per microbatch, the same clipper (``make_clipper``
  of the same mode and implementation: no clipping for ``none``), the optimizer
  step, and one ``.item()`` every 50 updates (nanoGPT's logging habit).

Method: ``warmup`` updates of each first, then blocks of ``block`` updates, alternating
engine/plain, each block timed from a synchronised start to a synchronised end, so drifts in
clock or temperature hit both alike. ms/update is the blocks' total over their updates. Each
probe's hooks are timed in one more block of the engine alone, after the timed ones
(``ProbeDriver.time_hooks``: CUDA events / perf_counter), so the result shows where the
engine's extra time goes; not inside the timed blocks, since two events a hook call (about 40
an update) are host work of their own that the plain loop does not carry. MFU is the model's
training FLOPs per token (``ModelConfig.flops_per_token``: 6 x non-embedding parameters plus attention) x tokens/s over
the device's dense peak (:data:`PEAK_TFLOPS`); on the CPU it is not given.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from andrea_diag.bench.train_checks import check_args, check_captured, host_speed
from andrea_diag.config import RunConfig

PLAIN_ITEM_EVERY = 50  # the plain loop's one host sync: a logged loss every 50 updates
# Dense peak TFLOPs by GPU name and matmul kind. Source: NVIDIA H100/H200 Tensor Core GPU
# datasheets (SXM, without sparsity): BF16/FP16 989, TF32 494, FP32 (no tensor cores) 67.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989.0, "tf32": 494.0, "fp32": 67.0},
    "H100 80GB HBM3": {"bf16": 989.0, "tf32": 494.0, "fp32": 67.0},
}
PEAK_SOURCE = "NVIDIA H100/H200 datasheets, SXM, dense (no sparsity)"


def peak_tflops(gpu: str | None, precision: str, matmul_precision: str) -> float | None:
    """The dense peak for this GPU and precision, or None (CPU, or a GPU not in the table)."""
    if gpu is None:
        return None
    kind = "bf16" if precision in ("bf16", "fp16") else "fp32"
    if kind == "fp32" and matmul_precision != "highest":
        kind = "tf32"
    for name, peaks in PEAK_TFLOPS.items():
        if name in gpu:
            return peaks[kind]
    return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # host sync: a block's clock starts and stops here


class PlainLoop:
    """The reference: the same model and parts, none of the engine's bookkeeping. ``graphed``:
    its forward and backward captured once as a CUDA graph and replayed, and its optimizer step
    through the engine's :class:`~andrea_diag.train.graphed_step.StepRunner`, as ``--cuda-graph``
    does the engine's (after the same :data:`~andrea_diag.train.graphed.WARMUP_UPDATES`)."""

    def __init__(self, cfg: RunConfig, device: torch.device, graphed: bool = False) -> None:
        from andrea_diag.clip.modes import make_clipper
        from andrea_diag.model import GPT
        from andrea_diag.train.components import make_precision
        from andrea_diag.train.optim import build_optimizer

        torch.manual_seed(cfg.seed)  # the engine's initial weights
        self.model = GPT(cfg.model).to(device)
        self.params = list(self.model.parameters())
        self.optimizer = build_optimizer(self.model, cfg.recipe_cfg, cfg.lr, device)
        self.precision = make_precision(cfg.precision, device)
        self.device = device
        # the engine's own clipper, made as the Trainer makes it: its mode's parameters, and
        # the optimizer bound (SPAM reads Adam's v: unbound, its first call raised)
        self.clipper = make_clipper(
            cfg.clip, cfg.max_norm, cfg.clip_impl, cfg.clip_params, optimizer=self.optimizer
        )
        self.n = 0
        self.graphed = graphed
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: tuple[torch.Tensor, torch.Tensor | None] | None = None  # (tokens, loss)
        from andrea_diag.train.graphed_step import StepRunner  # the engine's own step (graphed)

        self.steps = StepRunner(self.optimizer, self.precision, self.params, graphed=graphed)

    def _forward_backward(self, tokens: torch.Tensor) -> torch.Tensor | None:
        n_tokens = tokens[:, :, 1:].numel()
        loss = None
        for a in range(tokens.size(0)):
            x, y = tokens[a, :, :-1], tokens[a, :, 1:]  # (m, T) each
            with self.precision.autocast():
                logits = self.model(x)  # (m, T, vocab)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum")
            self.precision.backward(loss / n_tokens)  # token-weighted over the group
        return loss

    def _graphed(self, tokens: torch.Tensor) -> torch.Tensor | None:
        if self.graph is None:  # capture: grads from the graph's pool, as GroupRunner does
            from andrea_diag.train.graphed import graph_forward_backward

            static = tokens.clone()
            self.optimizer.zero_grad(set_to_none=True)
            self.graph, loss = graph_forward_backward(self._forward_backward, static)
            self.static = (static, loss)
        else:
            assert self.static is not None
            self.static[0].copy_(tokens)
        self.graph.replay()
        return self.static[1]

    def update(self, tokens: torch.Tensor) -> None:
        """One optimizer update on ``tokens`` (A, m, T+1)."""
        from andrea_diag.train.graphed import WARMUP_UPDATES

        tokens = tokens.to(self.device)
        if self.graphed and self.n >= WARMUP_UPDATES:
            loss = self._graphed(tokens)
        else:
            self.optimizer.zero_grad(set_to_none=True)
            loss = self._forward_backward(tokens)
        self.precision.unscale_(self.optimizer)
        self.clipper(self.params)
        self.steps.step(True)
        self.n += 1
        if self.n % PLAIN_ITEM_EVERY == 0 and loss is not None:
            loss.item()  # host sync: the plain loop's logged loss


def _engine(cfg: RunConfig, run_dir: Path) -> tuple[Any, Callable[[int], torch.Tensor]]:
    """The Trainer on the run's data (--source/--data/--vocab-size, as a cascade reads them),
    and the plan's batches (the plain loop's tokens)."""
    from andrea_diag.data import BatchPlan, Mixer
    from andrea_diag.factories import prepare_run_data
    from andrea_diag.train.loop import Trainer

    data = prepare_run_data(cfg)
    mixer = Mixer(cfg.seed, cfg.mixer, data.names, sharpness=cfg.mixer_sharpness)
    plan = BatchPlan(data, mixer, seed=cfg.seed,
                     micro_batch=cfg.micro_batch, accum=cfg.accum, seq_len=cfg.seq_len)  # fmt: skip
    trainer = Trainer(cfg, run_dir, data, plan)
    return trainer, lambda u: plan.batch(u).tokens


def _arm_numbers(ms: float, tokens: int, flops: float, peak: float | None) -> dict[str, Any]:
    """``flops``: training FLOPs per token (``ModelConfig.flops_per_token``)."""
    tokens_per_s = tokens / (ms / 1e3)
    mfu = flops * tokens_per_s / (peak * 1e12) if peak else None
    return {"ms_per_update": ms, "tokens_per_s": tokens_per_s, "mfu": mfu}


def bench_train(
    cfg: RunConfig,
    updates: int,
    warmup: int,
    block: int,
    progress: Callable[[str], None] | None = None,
    plain: str = "same",
) -> dict[str, Any]:
    """Time the engine and the plain loop on ``cfg`` (resolved): ``updates`` timed updates
    each, in alternating blocks of ``block`` after ``warmup`` each. Returns the result dict.
    ``plain`` (with ``cfg.cuda_graph``): ``same``, the plain loop graphed too (like for like);
    ``eager``, the plain loop as users write it; ``all``, four loops: both, each graphed and
    eager (in one process the eager loops run slower than alone: more objects for the host)."""
    from andrea_diag.device import resolve_device

    device = resolve_device(cfg.device)
    check_args(cfg, device, updates, warmup, block, plain)
    total = warmup + updates
    hook_updates = min(block, updates)  # the probes' hook timing: one engine block after
    run_steps = cfg.steps  # the run's own length, over which its once-a-run costs spread
    # no injection: a preset's own one (tiny's outlier) is placed for its length, not the bench's.
    # steps one past the engine's updates: the lock-in probe's default schedule samples once a
    # run, at its last update, a per-run cost like evaluation; spread over the bench's few
    # updates it would read as per-update work. It is timed on its own below (``once_per_run``).
    # the lock-in schedule was resolved for the preset's length: its one sample moves to the end
    last = total + hook_updates + 1
    cfg = dataclasses.replace(cfg, steps=last, eval_every=0, checkpoint_every=0, inject=[],
                              flush_every=max(cfg.flush_every, 1),
                              probes=dataclasses.replace(cfg.probes, lockin_every=last))  # fmt: skip
    say = progress or (lambda _line: None)
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        engines, arms = _arms(cfg, device, Path(tmp), total, plain)
        engine = engines[0]
        say(f"warm-up: {warmup} updates each")
        for u in range(1, warmup + 1):
            for step in arms.values():
                step(u)
        check_captured(engines, warmup)
        times = _timed_blocks(device, arms, warmup, updates, block, say)
        for e in engines:  # the last timed update's host part, untimed (see _timed_blocks)
            e.pipeline.drain()
        engine.probes.time_hooks(device)
        for u in range(total + 1, total + hook_updates + 1):
            engine.pipeline.advance(u)
        engine.pipeline.drain()
        probe_ms = {k: v / hook_updates for k, v in engine.probes.hook_ms().items()}
        once = _once_per_run(engine, device, last, run_steps)
        for e in engines:
            e.recorder.close()
            e.recorder.release()
    result = _result(cfg, device, times, probe_ms, updates, warmup, block)
    result["meta"]["plain_graphed"] = cfg.cuda_graph and plain != "eager"
    result["meta"]["engine_pipeline"] = engine.pipeline.describe()  # {} without --cuda-graph
    result["once_per_run"] = once
    result["meta"]["probe_hook_updates"] = hook_updates  # the engine block the probes' ms are from
    return result


def _timed_blocks(
    device: torch.device,
    arms: dict[str, Callable[[int], Any]],
    warmup: int,
    updates: int,
    block: int,
    say: Callable[[str], None],
) -> dict[str, list[float]]:
    """Alternating blocks of ``block`` updates of every arm, each between two syncs: ms each.

    A pipelined engine (train/pipeline.py) finishes each update's host part in the next
    update's ``advance``, so a block of k advances holds k launches and k host parts: the
    host part of the update before the block, and of the block's first k-1. Its last
    update's host part runs in its next block, overlapped with that block's first group as
    in a run. A drain at each block's end (as before 2026-12-03) ran that host part with the
    device idle, once a block, which a run does only at a checkpoint and at its end: the
    block's ratio then charged the engine one unoverlapped host part per ``block`` updates."""
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    done = 0
    while done < updates:
        k = min(block, updates - done)
        for arm, step in arms.items():
            # a launched engine update's copies have landed: its host part waits for nothing
            _sync(device)
            t0 = time.perf_counter()
            for u in range(warmup + done + 1, warmup + done + k + 1):
                step(u)
            _sync(device)
            times[arm].append((time.perf_counter() - t0) * 1e3)
        done += k
        say(f"timed {done}/{updates} updates each")
    return times


def _arms(
    cfg: RunConfig, device: torch.device, tmp: Path, total: int, plain: str = "same"
) -> tuple[list[Any], dict[str, Callable[[int], Any]]]:
    """The engines (the probed one first) and the timed loops by name (see :func:`bench_train`
    for ``plain``): ``engine`` and ``plain``, with ``all`` also ``engine_eager`` and
    ``plain_eager`` (the same plan: the same batches)."""
    engine, batch_tokens = _engine(cfg, tmp / "engine")
    tokens = [batch_tokens(u) for u in range(1, total + 1)]  # drawn once, shared
    engines = [engine]
    arms: dict[str, Callable[[int], Any]] = {"engine": engine.pipeline.advance}
    plains = {"plain": cfg.cuda_graph and plain != "eager"}
    plains |= {"plain_eager": False} if plain == "all" else {}
    for name, graphed in plains.items():
        loop = PlainLoop(cfg, device, graphed=graphed)
        arms[name] = lambda u, loop=loop: loop.update(tokens[u - 1])
    if plain == "all":
        eager, _ = _engine(dataclasses.replace(cfg, cuda_graph=False), tmp / "engine_eager")
        engines.append(eager)
        arms["engine_eager"] = eager.pipeline.advance
    return engines, arms


def _once_per_run(engine: Any, device: torch.device, update: int, run_steps: int) -> list[dict]:
    """The probes' once-a-run work, timed once: the lock-in probe's final-state sample (its
    default schedule), with its share of an update over a run of ``run_steps`` updates."""
    lockin = next((p for p in engine.probes.probes if getattr(p, "name", "") == "lockin"), None)
    if lockin is None or not lockin.prompts:
        return []
    _sync(device)
    t0 = time.perf_counter()
    lockin.sample_now(update)
    _sync(device)
    ms = (time.perf_counter() - t0) * 1e3
    return [{"probe": "lockin", "work": "final-state sample (every source, greedy and temp 1)",
             "ms": ms, "run_updates": run_steps,
             "ms_per_update_over_run": ms / max(run_steps, 1)}]  # fmt: skip


def _result(
    cfg: RunConfig,
    device: torch.device,
    times: dict[str, list[float]],
    probe_ms: dict[str, float],  # ms per update, each probe's hooks
    updates: int,
    warmup: int,
    block: int,
) -> dict[str, Any]:
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    peak = peak_tflops(gpu, cfg.precision, cfg.matmul_precision)
    tokens = cfg.micro_batch * cfg.accum * cfg.seq_len  # per update
    n_params = cfg.model.n_params()
    flops = cfg.model.flops_per_token(cfg.seq_len)
    ms = {arm: sum(t) / updates for arm, t in times.items()}
    engine_ms = ms["engine"]
    return {
        "meta": {
            "device": str(device),
            "gpu": gpu,
            "torch": torch.__version__,
            "size": cfg.size,
            "precision": cfg.precision,
            "matmul_precision": cfg.matmul_precision,
            "clip": cfg.clip,
            "clip_impl": cfg.clip_impl,
            "max_norm": cfg.max_norm,
            "recipe": cfg.recipe,
            "update_stats_every": cfg.probes.update_stats_every,
            "moment_norms_every": cfg.probes.moment_norms_every,
            "cuda_graph": cfg.cuda_graph,
            "m": cfg.micro_batch,
            "A": cfg.accum,
            "seq_len": cfg.seq_len,
            "tokens_per_update": tokens,
            "n_params": n_params,
            "updates": updates,
            "warmup": warmup,
            "block": block,
            "cpu_threads": torch.get_num_threads(),
            **host_speed(),
            "peak_tflops": peak,
            "peak_source": PEAK_SOURCE if peak else None,
            "flops_per_token": flops,
            "mfu_formula": "flops_per_token * tokens_per_s / peak; flops_per_token = "
            "6 * non-embedding params + 12 * n_layer * d_model * seq_len (PaLM appendix B)",
            "plain_loop": "forward, token-weighted backward, same clipper, optimizer step, "
            f"one .item() every {PLAIN_ITEM_EVERY} updates",
        },
        "engine": _arm_numbers(engine_ms, tokens, flops, peak),
        "plain": _arm_numbers(ms["plain"], tokens, flops, peak),
        "engine_over_plain": engine_ms / ms["plain"],  # ms ratio: 1.0 = as fast as plain
        "speed_vs_plain": ms["plain"] / engine_ms,  # the "0.6x": plain ms / engine ms
        **(
            {  # --cuda-graph: the graphed engine against the eager plain loop, as users write
                # it, and the eager engine against it (the ratio without --cuda-graph)
                "plain_eager": _arm_numbers(ms["plain_eager"], tokens, flops, peak),
                "engine_eager": _arm_numbers(ms["engine_eager"], tokens, flops, peak),
                "speed_vs_plain_eager": ms["plain_eager"] / engine_ms,
                "eager_speed_vs_plain_eager": ms["plain_eager"] / ms["engine_eager"],
            }
            if "plain_eager" in ms
            else {}
        ),
        "probes": [
            {
                "probe": name,
                "ms_per_update": t,
                "share_of_engine": t / engine_ms,
            }
            for name, t in sorted(probe_ms.items(), key=lambda kv: -kv[1])
        ],
        "blocks_ms": times,
    }
