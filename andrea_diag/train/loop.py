"""One training arm: bandit batches -> accumulation group -> clip -> optimizer -> probes.

    from andrea_diag.train.loop import train_arm
    summary = train_arm(cfg.resolve(), run_dir, data, plan)

Order per optimizer update (the v2 fix depends on it):

1. zero grads (only here, between groups);
2. ``accumulate_group``: forward + token-weighted backward for each of the A microbatches;
3. clip (``andrea_diag.clip_grad_norm_with_stats``) after the last microbatch, before Adam
   touches ``m``/``v``; probes' ``after_clip`` see the final gradients;
4. a non-finite gradient skips the update (attempted, not applied: both are recorded);
5. ``optimizer.step()``, then the scheduler (per update), then probes' ``after_step``;
6. one metrics row, flushed to disk.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from andrea_diag.clip.api import clip_grad_norm_with_stats
from andrea_diag.config import SOURCE_NAMES, RunConfig, parse_injections
from andrea_diag.data.batches import make_outlier_batch, outlier_generator
from andrea_diag.device import resolve_device
from andrea_diag.model import GPT
from andrea_diag.probes import ProbeDriver, build_probes
from andrea_diag.record import Recorder
from andrea_diag.train.accumulation import accumulate_group
from andrea_diag.train.optim import build_optimizer, build_scheduler

ProgressFn = Callable[[int, dict[str, Any]], None]
PROMPT_TOKENS = 16  # lock-in prompt length, taken from the start of each source stream


def unigram_entropy(counts: torch.Tensor) -> float:
    """Context-free token entropy of the training streams (nats): the loss of a unigram model."""
    p = counts.double() / counts.sum()
    p = p[p > 0]
    return float(-(p * p.log()).sum())


def _overflow_last(n_micro: int) -> Callable[[int, torch.Tensor], torch.Tensor]:
    """The nonfinite injection: the group's last microbatch loss overflows (an fp16-style inf)."""

    def hook(i: int, loss: torch.Tensor) -> torch.Tensor:
        return loss * math.inf if i == n_micro - 1 else loss

    return hook


def _per_source_loss(
    example_loss: torch.Tensor, example_tokens: torch.Tensor, example_source: torch.Tensor
) -> dict[str, float]:
    """Token-weighted loss of each source's sequences in this group (NaN when absent)."""
    out = {}
    for i, name in enumerate(SOURCE_NAMES):
        sel = example_source == i
        tok = example_tokens[sel].sum()
        out[f"loss_{name}"] = (
            float((example_loss[sel] * example_tokens[sel]).sum() / tok) if tok > 0 else math.nan
        )
    return out


def train_arm(
    cfg: RunConfig,
    run_dir: Path,
    data: Any,
    plan: Any,
    *,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Train one arm for ``cfg.steps`` updates, recording into ``run_dir``; returns the summary.

    ``data`` is a ``PreparedData`` (tokenizer, streams, source metadata) and ``plan`` a
    ``BatchPlan`` whose ``batch(update)`` gives the same tokens to every arm of a cascade.
    """
    device = resolve_device(cfg.device)
    injections = parse_injections(cfg.inject, cfg.steps)
    torch.set_float32_matmul_precision(cfg.matmul_precision)
    torch.manual_seed(cfg.seed)  # same init in every arm: only the clip mode differs
    model = GPT(cfg.model).to(device)
    recipe = cfg.recipe_cfg
    optimizer = build_optimizer(model, recipe, cfg.lr, device)
    scheduler = build_scheduler(optimizer, recipe.warmup_updates)
    recorder = Recorder(run_dir, cfg.to_dict())
    recorder.write("data.json", data.describe())
    names, params = (list(t) for t in zip(*model.named_parameters(), strict=True))
    # lock-in prompts: the first tokens of each source stream (a document start), fixed per data
    prompts = {name: data.streams[name][:PROMPT_TOKENS] for name in SOURCE_NAMES}
    probes = ProbeDriver(
        build_probes(
            cfg,
            model,
            optimizer,
            prompts=prompts,
            tokenizer=data.tokenizer,
            unigram_entropy=unigram_entropy(data.token_counts),
        ),
        recorder,
    )
    rare_ids = data.rare_token_ids()
    counts = {"microbatches": 0, "examples": 0, "tokens": 0}
    t_start, hashes, phases = time.perf_counter(), [], []
    try:
        for update in range(1, cfg.steps + 1):
            t0 = time.perf_counter()
            batch = plan.batch(update)
            injected = injections.get(update)
            if injected == "outlier":
                # Half of one microbatch becomes rare-token sequences: a quarter of the group at
                # A=2, enough to spike, few enough that the rest of the batch stays ordinary
                # (the outlier cause asks whether a few sequences carry the batch's excess).
                # The same generator in every arm: the injected batch is identical too.
                batch = make_outlier_batch(
                    batch,
                    outlier_generator(cfg.seed, update),
                    data.vocab_size,
                    rare_ids,
                    n_sequences=max(1, batch.micro_batch // 2),
                )
            hashes.append(batch.hash)
            phases.append(batch.phase)
            tokens = batch.tokens.to(device)  # (A, m, T+1)
            micro = [(tokens[a, :, :-1], tokens[a, :, 1:]) for a in range(tokens.size(0))]

            optimizer.zero_grad(set_to_none=True)  # between groups only
            hook = _overflow_last(len(micro)) if injected == "nonfinite" else None
            group = accumulate_group(model, micro, loss_hook=hook)
            clip = clip_grad_norm_with_stats(
                params, cfg.max_norm, mode=cfg.clip, impl=cfg.clip_impl
            )
            # host sync: once per update, to log scalars and to decide whether to step.
            loss = float(group.loss)
            grad_norm = float(clip.total_norm)
            nonfinite = bool(clip.nonfinite) or not math.isfinite(loss)
            example_source = batch.source_idx.reshape(-1).to(device)
            counts["microbatches"] += group.microbatches
            counts["examples"] += int(group.example_loss.numel())
            counts["tokens"] += group.tokens
            row: dict[str, Any] = {}
            ctx = probes.context(
                update=update,
                model=model,
                optimizer=optimizer,
                param_names=names,
                params=params,
                loss=loss,
                example_loss=group.example_loss,
                example_source=example_source,
                clip=clip,
                row=row,
                phase=batch.phase,
                weights=batch.weights,
                injected=injected,
                applied=not nonfinite,
            )
            row |= {
                "update": update,
                **counts,
                "phase": batch.phase,
                "boundary": ctx.boundary,
                **{f"w_{k}": v for k, v in batch.weights.items()},
                "loss": loss,
                **_per_source_loss(group.example_loss, group.example_tokens, example_source),
                "grad_norm": grad_norm,
                "lr": optimizer.param_groups[0]["lr"],
            }
            if cfg.clip == "per-tensor":
                post = float(torch.linalg.vector_norm(clip.per_tensor_norm * clip.scale))
            elif cfg.clip == "global":
                post = float(clip.total_norm * clip.scale)
            else:
                post = grad_norm
            row["grad_norm_post"] = post
            row["clip_coef"] = (
                post / grad_norm if grad_norm > 0 and math.isfinite(grad_norm) else 1.0
            )
            probes.after_clip(ctx)
            if not nonfinite:
                optimizer.step()
            scheduler.step()  # per update, attempted or applied: the schedule counts updates
            probes.after_step(ctx)
            plan.observe(
                update,
                {n: row[f"loss_{n}"] for n in SOURCE_NAMES if math.isfinite(row[f"loss_{n}"])},
            )
            row.update(
                nonfinite=nonfinite,
                applied=not nonfinite,
                batch_hash=batch.hash,
                injected=injected,
                time_s=time.perf_counter() - t0,
            )
            recorder.log(row)
            if progress is not None:
                progress(update, row)
    except BaseException:
        # Keep everything recorded so far: the probes' events (spikes are written at close)
        # and metrics.parquet. Neither may replace the error that stopped the run.
        partial: dict[str, Any] = {"status": "crashed"}
        with contextlib.suppress(Exception):
            partial.update(probes.close(run_dir))
        with contextlib.suppress(Exception):
            recorder.close()
            recorder.write("partial_summary.json", partial)
        raise
    summary = summarize(recorder, cfg, wall_s=time.perf_counter() - t_start)
    summary["run_sheet"] = run_sheet(cfg, device, counts)
    summary.update(probes.close(run_dir))
    recorder.write(
        "schedule.json",
        {
            "batch_hashes": hashes,
            "phases": phases,
            "mixer": plan.mixer.describe() if plan.mixer is not None else "replayed",
        },
    )
    recorder.close(summary)
    return summary


def boundary_loss_delta(loss: list[float], boundary: list[bool], k: int = 3) -> dict[str, Any]:
    """Mean (loss over the k updates after a boundary) - (over the k before), over boundaries."""
    deltas = []
    for i, b in enumerate(boundary):
        if b and i >= k and i + k <= len(loss):
            before, after = loss[i - k : i], loss[i : i + k]
            if all(map(math.isfinite, before + after)):
                deltas.append(sum(after) / k - sum(before) / k)
    return {
        "after_minus_before_mean": sum(deltas) / len(deltas) if deltas else None,
        "n": len(deltas),
        "k": k,
    }


def peak_memory_bytes(device: torch.device) -> dict[str, int | None]:
    """Observed peaks: the CUDA allocator's, and the process's resident set (Linux: KiB)."""
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cuda = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {"cuda_max_allocated": cuda, "process_max_rss": rss}


def run_sheet(cfg: RunConfig, device: torch.device, counts: dict[str, int]) -> dict[str, Any]:
    """MISSION.md's run sheet: what anyone comparing two runs must know first."""
    return {
        "m": cfg.micro_batch,
        "A": cfg.accum,
        "D": 1,
        "examples_per_update": cfg.examples_per_update,
        "supervised_tokens": counts["tokens"],
        "precision": "fp32 weights and grads"
        + (f", matmuls {cfg.matmul_precision} (TF32 allowed)" if cfg.matmul_precision != "highest"
           and device.type == "cuda" else ""),
        "normalisation": "token-weighted: sum of the group's token losses / its supervised "
        "tokens (fixed before the first microbatch)",
        "last_group": f"{cfg.partial_group}; the bandit sampler always fills a group",
        "unit": "one metrics row per optimizer update",
        "peaks": peak_memory_bytes(device),
    }  # fmt: skip


def summarize(recorder: Recorder, cfg: RunConfig, wall_s: float) -> dict[str, Any]:
    """Loop-level summary fields (the probes add theirs)."""
    from andrea_diag.record import read_jsonl

    df = read_jsonl(recorder.run_dir / "metrics.jsonl")
    # all-NaN columns come back from JSON as None objects: coerce before testing finiteness
    for col in ("loss", "grad_norm", "clip_coef"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    finite = df[df["loss"].map(math.isfinite)]
    gn = df["grad_norm"][df["grad_norm"].map(math.isfinite)]
    tail = finite["loss"].tail(max(1, min(10, len(finite) // 10 or 1)))
    return {
        "arm": cfg.arm,
        "size": cfg.size,
        "clip": cfg.clip,
        "lr": cfg.lr,
        "max_norm": cfg.max_norm,
        "n_updates": len(df),
        "final_loss": float(tail.mean()) if len(tail) else None,
        "min_loss": float(finite["loss"].min()) if len(finite) else None,
        "max_grad_norm": float(gn.max()) if len(gn) else None,
        "median_grad_norm": float(gn.median()) if len(gn) else None,
        "pct_clipped": float(100.0 * (df["clip_coef"] < 1.0).mean()),
        "n_boundaries": int(df["boundary"].sum()),
        "nonfinite_updates": int(df["nonfinite"].sum()),
        "nonfinite_update_list": [int(u) for u in df.loc[df["nonfinite"], "update"]],
        "wall_s": wall_s,
        "boundary_loss_delta": boundary_loss_delta(
            df["loss"].tolist(), df["boundary"].tolist(), k=3
        ),
    }
