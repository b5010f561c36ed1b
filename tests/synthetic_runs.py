"""Synthetic run directories for the report tests, written through the real Recorder.

``conftest.py`` hands these out as the ``make_run`` and ``boundary_updates`` fixtures; they live
here so the conftest stays one screenful per concern.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from andrea_diag import metrics
from andrea_diag.config import SOURCE_NAMES, RunConfig
from andrea_diag.record import Recorder

# The numbers are made up, the columns are andrea_diag.metrics' (each row is checked): boundaries
# on a fixed phase schedule, grad-norm spikes (with events) right after some boundaries, probe
# columns optional.

PHASES = [7, 14, 21, 28, 42, 7, 14]  # bandit phase lengths (updates)
LAYERS = [
    "embed.embedding",
    "h00.attention",
    "h00.mlp",
    "h01.attention",
    "h01.mlp",
    "final.norm",
    "head.head",
]


def _boundary_updates(n_updates: int) -> list[int]:
    """Updates that start a phase after the first: 8, 22, 43, ... (1-based)."""
    out, u = [], 1
    for length in PHASES * 10:
        u += length
        if u > n_updates:
            break
        out.append(u)
    return out


def _make_run(
    run_dir: Path,
    *,
    clip: str = "none",
    size: str = "tiny",
    n_updates: int = 120,
    probes: bool = True,
    spikes: tuple[int, ...] | None = None,
    final_loss: float | None = None,
    lockin: str = "healthy",
    seed: int = 0,
) -> Path:
    """Write one run dir. Spikes default to one update after the first three boundaries."""
    cfg = RunConfig(size=size, clip=clip, steps=n_updates, seed=seed).resolve()
    rec = Recorder(run_dir, cfg.to_dict())
    rec.write(
        "data.json",
        {
            "sources": {
                "repo-docs": {
                    "origin": "README files",
                    "generated": False,
                    "n_bytes": 1000,
                    "n_tokens": 300,
                    "sha256": "ab" * 32,
                },
                "gutenberg": {
                    "origin": "markov chain",
                    "generated": True,
                    "n_bytes": 2000,
                    "n_tokens": 600,
                    "sha256": "cd" * 32,
                },
                "hermes3-general": {
                    "origin": "markov chain",
                    "generated": True,
                    "n_bytes": 1500,
                    "n_tokens": 500,
                    "sha256": "ef" * 32,
                },
            },
            "tokenizer_sha256": "00" * 32,
        },
    )
    bounds = set(_boundary_updates(n_updates))
    spikes = spikes if spikes is not None else tuple(b + 1 for b in sorted(bounds)[:3])
    rng = np.random.default_rng(seed)
    phase, w = 0, [0.2, 0.3, 0.5]
    max_norm = cfg.max_norm if clip != "none" else math.inf
    for u in range(1, n_updates + 1):
        if u in bounds:
            phase += 1
            w = list(rng.dirichlet([1, 1, 1]))
        loss = 9.0 * math.exp(-u / 60) + 2.5 + 0.05 * rng.standard_normal()
        gn = 0.8 + 0.1 * rng.random() + (20.0 if u in spikes else 0.0)
        coef = min(1.0, max_norm / gn)
        row = {
            "update": u,
            "microbatches": u * 2,
            "examples": u * 16,
            "tokens": u * 16 * 64,
            "phase": phase,
            "boundary": u in bounds or u == 1,
            **{metrics.WEIGHT.name_for(s): w[i] for i, s in enumerate(SOURCE_NAMES)},
            "loss": loss,
            **{
                metrics.LOSS_SOURCE.name_for(s): (loss + 0.1 * i if w[i] > 0.05 else None)
                for i, s in enumerate(SOURCE_NAMES)
            },
            "grad_norm": gn,
            "loss_z": 0.1,  # the spike probe's z-score column: must not read as a source
            "grad_norm_z": 0.2,
            "grad_norm_post": gn * coef,
            "clip_coef": coef,
            "lr": 3e-4,
            "nonfinite": False,
            "applied": True,
            "batch_hash": f"{u:08x}",
            "time_s": 0.01 * u,
            "injected": "outlier" if u == spikes[0] else None,
        }
        if probes:
            row.update({metrics.LAYER_GN.name_for(n): gn / (1 + j) for j, n in enumerate(LAYERS)})
            row.update(
                m_norm=0.1 + 0.01 * u,
                v_norm=1e-4 * (1 + (u in spikes)),
                update_rms=3e-4,
                cos_update_grad=0.3,
                m_spike_share=0.5 if u in spikes else 0.01,
                v_spike_share=0.8 if u in spikes else 0.02,
            )
        assert metrics.undeclared(row) == [], "a synthetic column the schema does not declare"
        rec.log(row)
    causes = ["phase-transition+outlier", "numerical", "phase-transition"]
    for i, u in enumerate(spikes):
        rec.event(
            {
                "update": u,
                "metric": "grad_norm",
                "value": 20.8,
                "z": 40.0,
                "causes": causes[i % 3].split("+"),
                "cause": causes[i % 3],
                "phase": 0,
                "cascade": None,
                "outlier_example": 3,
                "outlier_source": "gutenberg",
            }
        )
    for u in (n_updates // 2, n_updates):
        for s in SOURCE_NAMES:
            for mode in ("greedy", "t1"):
                rec.sample(
                    {
                        "update": u,
                        "source": s,
                        "mode": mode,
                        "text": f"<b>sample</b> & {s} {mode} at {u}",
                        "distinct_1": 0.9,
                        "distinct_2": 0.95,
                        "distinct_3": 0.97,
                        "longest_run": 2,
                        "top_token_share": 0.1,
                        "max_logit": 12.0,
                        "mean_entropy": 3.0,
                    }
                )
    fl = final_loss if final_loss is not None else 2.6 + (0.1 if clip != "none" else 0.0)
    rec.close(
        {
            "final_loss": fl,
            "min_loss": 2.4,
            "max_grad_norm": 20.9,
            "median_grad_norm": 0.85,
            "pct_clipped": 2.5 if clip != "none" else 0.0,
            "n_updates": n_updates,
            "n_boundaries": len(bounds),
            "nonfinite_updates": 0,
            "wall_s": 1.0,
            "spikes": {
                "n_spikes": len(spikes),
                "n_grad_spikes": len(spikes),
                "n_loss_spikes": 0,
                "spike_score_loss": 0.0,
                "spike_score_grad": 1.5,
                "by_cause": {},
                "n_cascades": 0,
                "spike_updates": list(spikes),
            },
            "pollution": {
                "max_m_share": 0.5,
                "max_v_share": 0.8,
                "recovery_m": 12,
                "recovery_v": None,
                "shadow_bytes": 1024,
            },
            "lockin": {"verdict": lockin, "reasons": [], "thresholds": {}},
        }
    )
    return run_dir
