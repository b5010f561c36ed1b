"""What a finished (or stopped) arm adds to its summary: loop-level numbers and the run sheet.

summary = summarize(recorder, cfg, wall_s)
summary["run_sheet"] = run_sheet(cfg, device, state.tokens, precision="fp32", replicas=1)
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import torch

from andrea_diag.config import RunConfig
from andrea_diag.record import Recorder, read_jsonl
from andrea_diag.runread import clean_table
from andrea_diag.summary_check import eval_fields, table_figures


def unigram_entropy(counts: torch.Tensor) -> float:
    """Context-free token entropy of the training streams (nats): the loss of a unigram model."""
    p = counts.double() / counts.sum()
    p = p[p > 0]
    return float(-(p * p.log()).sum())


def boundary_loss_delta(loss: list[float], boundary: list[bool], k: int = 3) -> dict[str, Any]:
    """Mean (loss over the k updates after a boundary) - (over the k before), over boundaries."""
    deltas = []
    for i, b in enumerate(boundary):  # k 0 (--boundary-k takes it) compares nothing: no delta
        if b and k >= 1 and i >= k and i + k <= len(loss):
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


def run_sheet(
    cfg: RunConfig, device: torch.device, tokens: int, precision: str, replicas: int
) -> dict[str, Any]:
    """MISSION.md's run sheet: what anyone comparing two runs must know first."""
    return {
        "m": cfg.micro_batch,
        "A": cfg.accum,
        "D": replicas,
        "examples_per_update": cfg.examples_per_update,
        "supervised_tokens": tokens,
        "precision": precision,
        "normalisation": "token-weighted: sum of the group's token losses / its supervised "
        "tokens (fixed before the first microbatch)",
        "last_group": "none partial: the bandit sampler always fills a group",
        "unit": "one metrics row per optimizer update",
        "peaks": peak_memory_bytes(device),
    }  # fmt: skip


def summarize(recorder: Recorder, cfg: RunConfig, wall_s: float) -> dict[str, Any]:
    """Loop-level summary fields (the probes add theirs)."""
    path = recorder.run_dir / "metrics.jsonl"
    # a resumed run's kept rows are the run dir's word: cleaned as the report cleans them
    df = clean_table(read_jsonl(path), "metrics", path)
    # all-NaN columns come back from JSON as None objects: coerce before testing finiteness
    for col in ("loss", "grad_norm", "clip_coef"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    figures = table_figures(df)  # the one rule, which summary_check holds the summary to
    return {
        **eval_fields(df),
        "arm": cfg.arm,
        "size": cfg.size,
        "clip": cfg.clip,
        "lr": cfg.lr,
        "max_norm": cfg.max_norm,
        "n_updates": figures["n_updates"],
        "final_loss": figures["final_loss"],
        "min_loss": figures["min_loss"],
        "max_grad_norm": figures["max_grad_norm"],
        "median_grad_norm": figures["median_grad_norm"],
        "pct_clipped": figures.get("pct_clipped", math.nan),  # no row: the mean of none
        # updates the clip mode chose to skip (skip-update); non-finite skips are counted apart
        "pct_skipped": float(100.0 * df["skipped"].fillna(False).astype(bool).mean())
        if "skipped" in df
        else 0.0,
        # the clip stage's own time per update (CUDA events on a GPU; includes the norm pass)
        "clip_ms_median": float(df["clip_ms"].median()) if "clip_ms" in df else None,
        "n_boundaries": int(df["boundary"].sum()),
        "nonfinite_updates": int(df["nonfinite"].sum()),
        "applied_updates": int(df["applied"].sum()),  # attempted = n_updates
        "nonfinite_update_list": [int(u) for u in df.loc[df["nonfinite"], "update"]],
        "wall_s": wall_s,
        "boundary_loss_delta": boundary_loss_delta(
            df["loss"].tolist(), df["boundary"].tolist(), k=cfg.probes.boundary_k
        ),
    }


def oom_advice(cfg: RunConfig, update: int, device: torch.device) -> tuple[str, str]:
    """One line for an out-of-memory error, and a hint: the same effective batch, smaller m."""
    m, a, d = cfg.micro_batch or 1, cfg.accum or 1, cfg.replicas
    message = (
        f"out of memory at update {update} of arm {cfg.arm} with m={m}, A={a}, D={d} ({device})"
    )
    if m > 1 and (m * a) % max(1, m // 2) == 0:
        m2 = max(1, m // 2)
        return (
            message,
            f"keep the effective batch m*A*D = {m * a * d}: --micro-batch {m2} --accum {a * m // m2}",
        )
    return message, "lower --seq-len or use a smaller --size; m is already 1"
