"""The options that ``cascade``, ``train`` and ``sweep`` share, declared once.

    @run_options(SHARED, ONE_CELL)
    def cascade(clip: ..., opts: RunOptions) -> None:
        base = base_config(opts)

``run_options`` appends the listed options to a typer command's signature and hands them to the
command as one dict (``opts``). Defaults come from :class:`~andrea_diag.config.RunConfig` and
:class:`~andrea_diag.config.ProbeConfig`, so the CLI never restates a library default.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from andrea_diag.clip.params import ClipParams
from andrea_diag.config import MODEL_PRESETS, ProbeConfig, RunConfig
from andrea_diag.data.corpus import parse_source_overrides
from andrea_diag.errors import UserError

RunOptions = dict[str, Any]
_RUN, _PROBES, _CLIP = RunConfig(), ProbeConfig(), ClipParams()

Size = Annotated[str, typer.Option(help=f"Model preset: {', '.join(MODEL_PRESETS)}.")]
MaxNorm = Annotated[float, typer.Option(help="Global (or per-tensor) clipping threshold.")]
Lr = Annotated[
    float | None,
    typer.Option(
        help="Peak learning rate; overrides the recipe's 3e-4. Cascades appear "
        "under lr stress (a pilot saw one at 1e-2 on 120m), so sweep it."
    ),
]
Steps = Annotated[int | None, typer.Option(help="Optimizer updates per arm (default: per size).")]
Recipe = Annotated[str, typer.Option(help="v1: Adam, no decay, no warmup. v2: AdamW 0.1 + warmup.")]
Seed = Annotated[int, typer.Option(help="Seed for init, data, bandit schedule (shared by arms).")]
Device = Annotated[str, typer.Option(help="auto (CUDA when present), cpu or cuda.")]
Out = Annotated[
    Path | None, typer.Option(help="Output directory (default: runs/<kind>-<size>-<time>).")
]
Source = Annotated[
    list[str] | None,
    typer.Option(
        "--source",
        help="Replace a source: NAME=PATH (folder of .txt/.md, or .jsonl with a 'text' "
        "field), or NAME=generated for the seeded generator (gutenberg, hermes3-general). "
        "Repeatable.",
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
Precision = Annotated[
    str,
    typer.Option(
        help="fp32; bf16 (autocast); fp16 (autocast + GradScaler: an overflow skips the "
        "update and halves the scale, both recorded)."
    ),
]
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
        "(2 fp32 copies of the parameters) (default: on for every size but 120m).",
    ),
]

Nproc = Annotated[
    int,
    typer.Option(
        "--nproc",
        help="Data-parallel replicas D: worker processes (gloo on CPU, NCCL on GPUs), each "
        "training m of every microbatch's m*D sequences.",
    ),
]

CheckpointEvery = Annotated[
    int | None,
    typer.Option(
        help="Updates between checkpoints (default: about every 10% of the run, and at least "
        "every 10 minutes); 0: none."
    ),
]
Resume = Annotated[
    Path | None,
    typer.Option(
        help="Continue the run in this directory from its newest checkpoints (its own options; "
        "an option given that differs from the run's is refused)."
    ),
]


def _adaptive(help: str) -> Any:
    return typer.Option(
        help=help, rich_help_panel="Adaptive clip modes (--clip zclip,agc,spam,skip)"
    )


# The papers' defaults come from ClipParams (clip/params.py); only the help is written here.
ADAPTIVE: list[tuple[str, Any, Any]] = [
    ("zclip_alpha", Annotated[float, _adaptive("ZClip: EMA factor of the norm's mean/variance.")],
     _CLIP.zclip_alpha),
    ("zclip_z", Annotated[float, _adaptive("ZClip: z-score above which an update is clipped.")],
     _CLIP.zclip_z),
    ("zclip_warmup", Annotated[int, _adaptive("ZClip: updates that initialise the EMA.")],
     _CLIP.zclip_warmup),
    ("agc_lambda", Annotated[float, _adaptive("AGC: max unit gradient/weight norm ratio.")],
     _CLIP.agc_lambda),
    ("agc_eps", Annotated[float, _adaptive("AGC: floor of the unit weight norm.")],
     _CLIP.agc_eps),
    ("spam_theta", Annotated[float, _adaptive("SPAM: clip elements with g^2 > theta * v.")],
     _CLIP.spam_theta),
    ("spam_reset", Annotated[int, _adaptive("SPAM: updates between resets of Adam's m and v.")],
     _CLIP.spam_reset),
    ("spam_warmup", Annotated[int, _adaptive("SPAM: updates after a reset with no clipping.")],
     _CLIP.spam_warmup),
    ("skip_z", Annotated[float, _adaptive("skip: skip a step whose norm is this many rolling "
                                          "standard deviations above the rolling mean.")],
     _CLIP.skip_z),
    ("skip_window", Annotated[int, _adaptive("skip: updates in the rolling window.")],
     _CLIP.skip_window),
]  # fmt: skip
CLIP_PARAM_FIELDS = tuple(name for name, _, _ in ADAPTIVE)

FlushEvery = Annotated[
    int,
    typer.Option(
        help="Metric rows per write to metrics.jsonl (also at checkpoints, the end and a crash): "
        "a kill -9 loses at most this many minus one finished updates' rows; 1: every row."
    ),
]
ModelFactory = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Your model: package.module:factory; factory(size preset) returns an nn.Module "
        "mapping token ids (B, T) to logits (B, T, vocab). See the README.",
    ),
]
DataFactory = Annotated[
    str | None,
    typer.Option(
        "--data",
        help="Your data: package.module:factory; factory() returns {source name: [documents]} "
        "for any of the three sources. See the README.",
    ),
]
HfConfig = Annotated[
    str | None,
    typer.Option(
        help="A Hugging Face causal LM from a local config.json (no download; the toolkit's "
        "vocabulary). Needs the hf extra."
    ),
]

Option = tuple[str, Any, Any]  # (parameter name, Annotated type, default)
# Every run command: how to train and probe, where to write.
SHARED: list[Option] = [
    ("steps", Steps, _RUN.steps),
    ("recipe", Recipe, _RUN.recipe),
    ("device", Device, _RUN.device),
    ("out", Out, None),
    ("source", Source, None),
    ("micro_batch", Micro, _RUN.micro_batch),
    ("accum", Accum, _RUN.accum),
    ("seq_len", SeqLen, _RUN.seq_len),
    ("mixer", Mixer, _RUN.mixer),
    ("clip_impl", ClipImpl, _RUN.clip_impl),
    ("precision", Precision, _RUN.precision),
    ("boundary_k", BoundaryK, _PROBES.boundary_k),
    ("shadow", Shadow, _PROBES.shadow),
    ("checkpoint_every", CheckpointEvery, _RUN.checkpoint_every),
    ("flush_every", FlushEvery, _RUN.flush_every),
    *ADAPTIVE,
    ("model_factory", ModelFactory, _RUN.model_factory),
    ("data_factory", DataFactory, _RUN.data_factory),
    ("hf_config", HfConfig, _RUN.hf_config),
]
# Commands that run one cell (cascade, train); sweep takes lists of these instead.
ONE_CELL: list[Option] = [
    ("size", Size, _RUN.size),
    ("max_norm", MaxNorm, _RUN.max_norm),
    ("lr", Lr, _RUN.lr),
    ("seed", Seed, _RUN.seed),
    ("inject", Inject, None),
    ("nproc", Nproc, _RUN.replicas),
    ("resume", Resume, None),
]
PROBE_FIELDS = ("boundary_k", "shadow")  # options that are ProbeConfig fields
NOT_CONFIG = ("out", "source", "inject", "resume", "explicit")  # not RunConfig fields as given


def run_options(*groups: list[Option]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Append ``groups`` of options to a command; it receives them as ``opts``."""
    options = [o for group in groups for o in group]

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "opts"]
        extra = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann)
            for name, ann, default in options
        ]

        @functools.wraps(fn)
        def wrapper(**kwargs: Any) -> Any:
            ctx: typer.Context = kwargs.pop("typer_ctx")
            opts = {name: kwargs.pop(name) for name, _, _ in options}
            # what the user typed, as opposed to defaults: --resume compares only these
            opts["explicit"] = {
                name
                for name in [*opts, *kwargs]
                # by name: typer may carry its own copy of click's ParameterSource enum
                if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"
            }
            return fn(**kwargs, opts=opts)

        ctx_param = inspect.Parameter(
            "typer_ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context
        )
        params = [*own, *extra, ctx_param]
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate


def resumed(opts: RunOptions, clip: str) -> tuple[RunConfig, str]:
    """``--resume DIR``: the run's own base config and arms, checked against what was typed."""
    from andrea_diag.experiments.resume import RUNTIME_KEYS, run_configs

    out = Path(opts["resume"])
    meta, saved = run_configs(out)
    if not saved:
        raise UserError(f"{out} has no started arm to continue", hint="start it again instead")
    arms = ",".join(meta["arms"])
    typed = base_config(opts) if opts["explicit"] - {"resume"} else None
    base = dataclasses.replace(saved[0], clip="none", arm="")  # each arm sets its own
    if typed is not None:
        for name in sorted(opts["explicit"] - {"resume", "out", "clip"}):
            field = {"nproc": "replicas", "source": "sources"}.get(name, name)
            if field in PROBE_FIELDS:
                old, new = getattr(base.probes, field), getattr(typed.probes, field)
            elif field in CLIP_PARAM_FIELDS:
                old, new = getattr(base.clip_params, field), getattr(typed.clip_params, field)
            else:
                old, new = getattr(base, field, None), getattr(typed, field, None)
            if old != new and field not in RUNTIME_KEYS:
                raise UserError(
                    f"--{name.replace('_', '-')} {new!r} differs from the run's {old!r} in {out}",
                    hint="resume with only --resume DIR (the run keeps its own options)",
                )
        for field in sorted(RUNTIME_KEYS):  # how, not what: may change
            if field in opts["explicit"]:
                base = dataclasses.replace(base, **{field: getattr(typed, field)})
    if "clip" in opts["explicit"] and clip != arms:
        raise UserError(f"--clip {clip} differs from the run's arms {arms} in {out}")
    return base, arms


def base_config(opts: RunOptions, **overrides: Any) -> RunConfig:
    """The shared RunConfig of a command's arms, validated before any work starts."""
    values = {**opts, **overrides}
    probes = ProbeConfig(**{k: values[k] for k in PROBE_FIELDS if k in values})
    clip_params = ClipParams(**{k: values[k] for k in CLIP_PARAM_FIELDS if k in values})
    if "nproc" in values:
        values["replicas"] = values.pop("nproc")
    skip = (*PROBE_FIELDS, *CLIP_PARAM_FIELDS, *NOT_CONFIG)
    fields = {k: v for k, v in values.items() if k not in skip}
    cfg = RunConfig(
        sources=parse_source_overrides(values.get("source") or []),
        inject=list(values.get("inject") or []),
        probes=probes,
        clip_params=clip_params,
        **fields,
    )
    cfg.resolve()
    return cfg
