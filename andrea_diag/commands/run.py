"""``andrea-diag cascade`` (paired arms + report) and ``andrea-diag train`` (one arm)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from andrea_diag.config import CLIP_MODES, MODEL_PRESETS, RunConfig
from andrea_diag.data.corpus import parse_source_overrides
from andrea_diag.errors import UserError

console = Console(stderr=True)

Size = Annotated[str, typer.Option(help=f"Model preset: {', '.join(MODEL_PRESETS)}.")]
MaxNorm = Annotated[float, typer.Option(help="Global (or per-tensor) clipping threshold.")]
Lr = Annotated[
    float | None,
    typer.Option(
        help="Peak learning rate; overrides the recipe's 3e-4. Cascades appear "
        "under lr stress (a pilot saw one at 1e-2 on 120m), so sweep it."
    ),
]
Steps = Annotated[int | None, typer.Option(help="Optimizer updates per arm [default: per size].")]
Recipe = Annotated[str, typer.Option(help="v1: Adam, no decay, no warmup. v2: AdamW 0.1 + warmup.")]
Seed = Annotated[int, typer.Option(help="Seed for init, data, bandit schedule (shared by arms).")]
Device = Annotated[str, typer.Option(help="auto (CUDA when present), cpu or cuda.")]
Out = Annotated[
    Path | None, typer.Option(help="Output directory [default: runs/<kind>-<size>-<time>].")
]
Source = Annotated[
    list[str] | None,
    typer.Option(
        "--source",
        help="Replace a source: NAME=PATH (folder of .txt/.md, or .jsonl "
        "with a 'text' field). Repeatable.",
    ),
]
Inject = Annotated[
    list[str] | None,
    typer.Option("--inject", help="Cause a spike: outlier@UPDATE or nonfinite@UPDATE. Repeatable."),
]
Micro = Annotated[
    int | None, typer.Option("--micro-batch", "-m", help="Examples per microbatch (m).")
]
Accum = Annotated[int | None, typer.Option("--accum", "-A", help="Microbatches per update (A).")]
SeqLen = Annotated[int | None, typer.Option(help="Tokens per sequence.")]
Mixer = Annotated[
    str, typer.Option(help="seeded: a fixed phase schedule. exp3: a loss-rewarded bandit.")
]
ClipImpl = Annotated[str, typer.Option(help="Clipper: auto, cuda, reference or torch.")]
BoundaryK = Annotated[
    int,
    typer.Option(
        help="A spike up to this many updates after a phase boundary is "
        "attributed to the phase transition."
    ),
]
Shadow = Annotated[
    bool | None,
    typer.Option(
        "--shadow/--no-shadow",
        help="Shadow buffers for exact Adam-state pollution "
        "(2 fp32 copies of the parameters) [default: on for tiny and 12m].",
    ),
]


def _base(
    source: list[str] | None = None, inject: list[str] | None = None, **options: Any
) -> RunConfig:
    """The shared RunConfig of a command's arms, validated before any work starts."""
    cfg = RunConfig(sources=parse_source_overrides(source or []), inject=list(inject or []),
                    **options)  # fmt: skip
    cfg.resolve()
    return cfg


def _arms(clip: str) -> list[str]:
    arms = [c.strip() for c in clip.split(",") if c.strip()]
    bad = [c for c in arms if c not in CLIP_MODES]
    if bad:
        raise UserError(
            f"unknown clip mode {bad[0]!r}", hint=f"choose from {', '.join(CLIP_MODES)}"
        )
    return arms


def cascade(
    size: Size = "tiny",
    clip: Annotated[
        str, typer.Option(help=f"Comma-separated arms, from {', '.join(CLIP_MODES)}.")
    ] = "none,global",
    max_norm: MaxNorm = 1.0,
    lr: Lr = None,
    steps: Steps = None,
    recipe: Recipe = "v1",
    seed: Seed = 0,
    device: Device = "auto",
    out: Out = None,
    source: Source = None,
    inject: Inject = None,
    micro_batch: Micro = None,
    accum: Accum = None,
    seq_len: SeqLen = None,
    mixer: Mixer = "seeded",
    clip_impl: ClipImpl = "auto",
    boundary_k: BoundaryK = 3,
    shadow: Shadow = None,
) -> None:
    """Train clipped and unclipped arms on identical batches and write an HTML report.

    Only the clip mode differs between arms: same seed, same initial weights, same bandit
    schedule and token batches (checked by per-update hashes).
    """
    from andrea_diag.experiments.cascade import CascadeSpec, run_cascade

    arms = _arms(clip)
    base = _base(source, inject, size=size, max_norm=max_norm, lr=lr, steps=steps,
                 recipe=recipe, seed=seed, device=device, micro_batch=micro_batch, accum=accum,
                 seq_len=seq_len, mixer=mixer, clip_impl=clip_impl, boundary_k=boundary_k,
                 shadow=shadow)  # fmt: skip
    res = run_cascade(CascadeSpec(base=base, clips=arms, out=out), console)
    for arm, s in res.summaries.items():
        console.print(
            f"  {arm:<11} final loss {s.get('final_loss') or float('nan'):.3f}  "
            f"max |g| {s.get('max_grad_norm') or float('nan'):.2f}  "
            f"clipped {s.get('pct_clipped', 0):.0f}% of updates"
        )
    console.print(f"batches identical across arms: {res.hashes_identical}")
    console.print(f"run directory: {res.out_dir}")
    if res.report:
        console.print(f"[bold green]report:[/] {res.report}")


def train(
    size: Size = "tiny",
    clip: Annotated[str, typer.Option(help=f"Clip mode: {', '.join(CLIP_MODES)}.")] = "global",
    max_norm: MaxNorm = 1.0,
    lr: Lr = None,
    steps: Steps = None,
    recipe: Recipe = "v1",
    seed: Seed = 0,
    device: Device = "auto",
    out: Out = None,
    source: Source = None,
    inject: Inject = None,
    micro_batch: Micro = None,
    accum: Accum = None,
    seq_len: SeqLen = None,
    mixer: Mixer = "seeded",
    clip_impl: ClipImpl = "auto",
    boundary_k: BoundaryK = 3,
    shadow: Shadow = None,
) -> None:
    """Train one arm and write its run directory and report."""
    from andrea_diag.experiments.cascade import CascadeSpec, default_out, run_cascade

    arms = _arms(clip)
    if len(arms) != 1:
        raise UserError("train runs one arm", hint="use `andrea-diag cascade` for several")
    base = _base(source, inject, size=size, max_norm=max_norm, lr=lr, steps=steps,
                 recipe=recipe, seed=seed, device=device, micro_batch=micro_batch, accum=accum,
                 seq_len=seq_len, mixer=mixer, clip_impl=clip_impl, boundary_k=boundary_k,
                 shadow=shadow)  # fmt: skip
    out = out or default_out("train", size)
    res = run_cascade(CascadeSpec(base=base, clips=arms, out=out), console)
    console.print(f"run directory: {res.out_dir / arms[0]}")
    if res.report:
        console.print(f"[bold green]report:[/] {res.report}")


def _csv(value: str, cast: type, option: str) -> list:
    """Parse a comma list for ``option``; a bad item is one clear error."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise UserError(f"{option} needs at least one value")
    try:
        return [cast(v) for v in items]
    except ValueError:
        raise UserError(f"{option}: cannot read {value!r} as a list of {cast.__name__}") from None


def sweep(
    size: Annotated[str, typer.Option(help="Comma list of presets, e.g. tiny,12m.")] = "tiny",
    lr: Annotated[str, typer.Option(help="Comma list of peak lrs.")] = "3e-4,1e-3,1e-2",
    max_norm: Annotated[str, typer.Option(help="Comma list of clip thresholds.")] = "1.0",
    seed: Annotated[str, typer.Option(help="Comma list of seeds.")] = "0",
    clip: Annotated[str, typer.Option(help="Comma-separated arms per cell.")] = "none,global",
    steps: Steps = None,
    recipe: Recipe = "v1",
    device: Device = "auto",
    out: Out = None,
    source: Source = None,
    micro_batch: Micro = None,
    accum: Accum = None,
    seq_len: SeqLen = None,
    mixer: Mixer = "seeded",
    clip_impl: ClipImpl = "auto",
    boundary_k: BoundaryK = 3,
    shadow: Shadow = None,
) -> None:
    """Find the regime: one cascade per (size, lr, max_norm, seed) cell, one summary page.

    Re-running with the same --out resumes: finished cells are kept and skipped.
    """
    from andrea_diag.experiments.sweep import SweepSpec, run_sweep

    arms = _arms(clip)
    sizes = _csv(size, str, "--size")
    base = _base(source, size=sizes[0], steps=steps, recipe=recipe, device=device,
                 micro_batch=micro_batch, accum=accum, seq_len=seq_len, mixer=mixer,
                 clip_impl=clip_impl, boundary_k=boundary_k, shadow=shadow)  # fmt: skip
    spec = SweepSpec(base=base, sizes=sizes, lrs=_csv(lr, float, "--lr"),
                     max_norms=_csv(max_norm, float, "--max-norm"), seeds=_csv(seed, int, "--seed"),
                     clips=arms, out=out)  # fmt: skip
    path, table = run_sweep(spec, console)
    page = path / "sweep.html"
    console.print(f"[bold green]sweep:[/] {page if page.exists() else path} ({len(table)} arms)")
