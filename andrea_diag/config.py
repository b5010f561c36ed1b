"""Configuration: model presets, optimizer recipes and the resolved run config.

Presets are named dicts of small frozen dataclasses (torchtitan style): a :class:`Preset` per
size carries the model shape and its run defaults. Fields declared with ``metadata=cli(...)`` are also
the command line's options (``fields.py``); this module imports no torch. Every run saves the
resolved :class:`RunConfig` as ``config.json``, so a run directory says exactly what ran.

    >>> from andrea_diag.config import MODEL_PRESETS, RunConfig
    >>> MODEL_PRESETS["12m"].n_params()
    17529600
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from andrea_diag.clip_params import ClipParams
from andrea_diag.config_choices import (
    ClipImpl,
    DeviceName,
    MatmulPrecision,
    MixerPolicy,
    RecipeName,
    SizeName,
    SourceMode,
    check_choices,
)
from andrea_diag.errors import BadArgument, UserError
from andrea_diag.field_types import plain_fields
from andrea_diag.fields import MAX_SEED, MAX_UPDATES, check_bounds, cli, cli_fields
from andrea_diag.injections import Injection, injection_forms, parse_injections
from andrea_diag.presets import (
    MODEL_PRESETS,
    PRESETS,
    RECIPES,
    VOCAB_SIZE,
    ModelConfig,
    Preset,
    Recipe,
    by_value,
    per_size,
)
from andrea_diag.probe_config import ProbeConfig

SOURCE_NAMES = ("repo-docs", "gutenberg", "hermes3-general")
__all__ = [  # the presets live in presets.py; importers of the config find them here too
    "MODEL_PRESETS", "PRESETS", "RECIPES", "RUNTIME_KEYS", "SOURCE_NAMES", "VOCAB_SIZE",
    "Injection", "ModelConfig", "Preset", "ProbeConfig", "Recipe", "RunConfig", "parse_injections",
]  # fmt: skip

EVALS_PER_RUN = 50  # held-out evaluations when --eval-every is not given


# the presets' own defaults, for --help (one source: presets.py)
_PRESET_LRS = "".join(f"{n}: {p.lr:g}; " for n, p in PRESETS.items() if p.lr is not None)
_PRESET_INJECTS = "; ".join(f"{n}: {','.join(p.inject)}" for n, p in PRESETS.items() if p.inject)
_ONE_CELL = {"one_cell": True}  # sweep and ladder take comma lists (or nothing) instead


@dataclass
class RunConfig:
    """Everything one training arm needs; saved resolved as ``config.json``.

    A field declared with ``metadata=cli(...)`` is also a command-line option of ``cascade``,
    ``train``, ``sweep`` and ``ladder`` (``commands/options.py`` generates them from here).
    """

    size: SizeName = field(
        default="tiny", metadata=cli(help=f"Model preset: {', '.join(PRESETS)}.", **_ONE_CELL)
    )
    recipe: RecipeName = field(
        default="v1", metadata=cli(help="v1: Adam, no decay, no warmup. v2: AdamW 0.1 + warmup.")
    )
    clip: str = "none"  # a registered clip mode (clip/modes.py); each command declares --clip
    max_norm: float = field(
        default=1.0,
        metadata=cli(help="Global (or per-tensor) clipping threshold.", positive=True, **_ONE_CELL),
    )
    lr: float | None = field(
        default=None,
        metadata=cli(
            help="Peak learning rate; overrides the recipe's. Cascades appear under lr "
            "stress (a pilot saw one at 1e-2 on 120m), so sweep it.",
            shown=_PRESET_LRS + "else the recipe's: " + by_value(RECIPES, "lr"),
            positive=True,
            **_ONE_CELL,
        ),
    )
    steps: int | None = field(
        default=None,
        metadata=cli(
            help="Optimizer updates per arm.", shown=per_size("steps"), lo=1, hi=MAX_UPDATES
        ),
    )
    micro_batch: int | None = field(
        default=None,
        metadata=cli(
            flags=("--micro-batch", "-m"),
            help="Examples per microbatch (m).",
            shown=per_size("micro_batch"),
            lo=1,
            hi=2**20,
        ),
    )
    accum: int | None = field(
        default=None,
        metadata=cli(
            flags=("--accum", "-A"),
            help="Microbatches per update (A).",
            shown=per_size("accum"),
            lo=1,
            hi=2**20,
        ),
    )
    seq_len: int | None = field(
        default=None,
        metadata=cli(
            help="Tokens per sequence (at most the size's block).",
            shown=per_size("seq_len"),
            lo=1,
            hi=2**20,
        ),
    )
    # init, batch draws and the bandit schedule: shared by the arms
    seed: int = field(
        default=0,
        metadata=cli(
            help="Seed for init, data, bandit schedule (shared by arms).",
            lo=0,
            hi=MAX_SEED,
            **_ONE_CELL,
        ),
    )
    corpus_seed: int = 0  # the generated sources' text; fixed so seed sweeps share one corpus
    device: DeviceName = field(
        default="auto", metadata=cli(help="auto (CUDA when present), cpu or cuda.", runtime=True)
    )
    mixer: MixerPolicy = field(
        default="seeded",
        metadata=cli(help="seeded: a fixed phase schedule. exp3: a loss-rewarded bandit."),
    )
    mixer_sharpness: float | None = field(
        default=None,
        metadata=cli(
            help="seeded mixer: a phase weighs each source u**sharpness (u uniform in 0.1..0.7, "
            "normalised); higher, one source dominates a phase and its boundary is a sharper "
            "shock. 1: the seeds' mixer. At least 0.5: flatter weights cannot make the 0.3 "
            "shift a boundary must have. At most 100: past it 0.1**sharpness underflows.",
            shown=per_size("mixer_sharpness"),
            lo=0.5,
            hi=100,
        ),
    )
    sources: dict[str, str] = field(
        default_factory=dict,
        metadata=cli(
            flags=("--source",),
            paths=True,
            help="Replace a source: NAME=PATH "
            "(folder of .txt/.md, or .jsonl with a 'text' field), or NAME=generated for the seeded "
            "generator (gutenberg, hermes3-general), or token ids: NAME=ids.bin[:uint16|uint32|"
            "int32|int64] (raw, nanoGPT's train.bin) or NAME=ids.npy, with --vocab-size. "
            "Repeatable. See docs/experiments-and-statistics.md.",
        ),
    )
    source_mode: SourceMode = field(
        default="default-plus-given",
        metadata=cli(
            flags=("--sources",),
            help="only: train on the given --source/--data sources alone. default-plus-given: "
            "the default text fills the sources not given (a line names them). Token ids: only.",
        ),
    )
    vocab_size: int | None = field(
        default=None,
        metadata=cli(
            help="Vocabulary of token-id sources (.bin/.npy or a factory's tensors): every id "
            "must be below it, and the model's vocab follows it.",
            shown=f"the toolkit tokenizer's {VOCAB_SIZE}, for text",
            lo=2,
            hi=2**31 - 1,
        ),
    )
    clip_impl: ClipImpl = field(
        default="auto", metadata=cli(help="Clipper: auto, cuda, reference or torch.", runtime=True)
    )
    # fp32 matmuls on CUDA: "high" allows TF32 tensor cores (about 5x faster on an H200);
    # "highest" keeps full fp32. No effect on CPU.
    matmul_precision: MatmulPrecision = "high"
    # fp32, bf16 autocast, or fp16 autocast + GradScaler: a registered name of
    # train/components.PRECISIONS, which (not this torch-free module) checks it and gives the
    # --precision help (commands/options.py asks it)
    precision: str = field(
        default="fp32",
        metadata=cli(help="Precision of the forward and backward passes (train/components.py)."),
    )
    # D: data-parallel worker processes (train/distributed.py)
    replicas: int = field(
        default=1,
        metadata=cli(
            flags=("--nproc",),
            help="Data-parallel replicas D: worker processes (gloo on CPU, "
            "NCCL on GPUs), each training m of every microbatch's m*D sequences.",
            lo=1,
            hi=1024,
            **_ONE_CELL,
        ),
    )
    # updates between checkpoints; None: about every 10% of the run; 0: none (train/checkpoint.py)
    checkpoint_every: int | None = field(
        default=None,
        metadata=cli(
            help="Updates between checkpoints (and at least every 10 minutes); 0: none.",
            shown="about every 10% of the run",
            runtime=True,
            lo=0,
            hi=MAX_UPDATES,
        ),
    )
    # updates between held-out evaluations; None: about 50 per run; 0: none (train/evaluation.py)
    eval_every: int | None = field(
        default=None,
        metadata=cli(
            help="Updates between held-out evaluations; 0: none.",
            shown=f"about {EVALS_PER_RUN} per run",
            lo=0,
            hi=MAX_UPDATES,
        ),
    )
    inject: list[str] = field(
        default_factory=list,
        metadata=cli(
            flags=("--inject",),
            help=f"Cause a spike: {injection_forms()}. Repeatable. Without "
            "--inject and --steps, a size's own run injects: " + _PRESET_INJECTS + ".",
            **_ONE_CELL,
        ),
    )
    # the accumulation group (forward, loss, backward) captured once as a CUDA graph and
    # replayed (train/graphed.py): the same kernels, without the host's per-op dispatch
    cuda_graph: bool = field(
        default=False,
        metadata=cli(
            flags=("--cuda-graph/--no-cuda-graph",),
            help="Replay each update's forward and backward as one CUDA graph, captured after "
            "the first few eager updates: far less host time per update, not bit-identical to "
            "eager, injected updates eager. CUDA, one process.",
            runtime=True,
        ),
    )
    probes: ProbeConfig = field(default_factory=ProbeConfig)
    clip_params: ClipParams = field(default_factory=ClipParams)  # zclip / agc / spam / skip
    arm: str = ""  # label inside a cascade, e.g. "global"
    # metric rows per write to metrics.jsonl; a kill -9 loses at most flush_every - 1 finished
    # rows (record.py); 1: every row written and fsync'd as it comes
    flush_every: int = field(
        default=50,
        metadata=cli(
            help="Metric rows per write to metrics.jsonl (also at checkpoints, the end and a "
            "crash): a kill -9 loses at most this many minus one finished updates' rows; 1: every "
            "row.",
            runtime=True,
            lo=1,
            hi=MAX_UPDATES,
        ),
    )
    # Bring your own (factories.py): import specs "package.module:factory", or a local HF config
    model_factory: str | None = field(
        default=None,
        metadata=cli(
            flags=("--model",),
            help="Your model: package.module:factory; factory(size "
            "preset) returns an nn.Module mapping token ids (B, T) to logits (B, T, vocab). See "
            "the README.",
        ),
    )
    data_factory: str | None = field(
        default=None,
        metadata=cli(
            flags=("--data",),
            help="Your data: package.module:factory; factory() returns "
            "{source name: [documents]} or {source name: 1-D int tensor of token ids} (with "
            "--vocab-size) for any of the three sources. See docs/extending.md.",
        ),
    )
    hf_config: str | None = field(
        default=None,
        metadata=cli(
            help="A Hugging Face causal LM from a local config.json (no download; the "
            "toolkit's vocabulary). Needs the hf extra."
        ),
    )

    def __post_init__(self) -> None:  # a wrong type refused where given, numpy's as Python's
        vars(self).update(plain_fields(self, "RunConfig"))
        if self.mixer == "exp3" and self.mixer_sharpness is not None:  # else silently ignored
            raise BadArgument(
                "--mixer-sharpness (mixer_sharpness) shapes the seeded mixer only; "
                f"--mixer exp3 ignores it, got {self.mixer_sharpness!r}",
                hint="drop --mixer-sharpness, or use --mixer seeded (a config resolved for the "
                "seeded mixer carries its preset's sharpness: set mixer_sharpness=None too)",
            )

    def resolve(self) -> RunConfig:
        """Fill size/recipe defaults and validate; returns a new, fully concrete config.

        The clip mode and the precision are checked where their registries are
        (``clip.modes.make_clipper`` and ``train.components.make_precision``; the commands'
        ``--clip`` and ``commands.options.checked``), so that importing the config imports no
        torch."""
        check_choices(self)
        preset = PRESETS[self.size]
        lr = RECIPES[self.recipe].lr if preset.lr is None else preset.lr
        # exp3 reads no sharpness: its config records none, not a preset's value it ignored
        sharpness = preset.mixer_sharpness if self.mixer == "seeded" else None
        out = dataclasses.replace(
            self,
            lr=lr if self.lr is None else self.lr,
            steps=preset.steps if self.steps is None else self.steps,
            micro_batch=preset.micro_batch if self.micro_batch is None else self.micro_batch,
            accum=preset.accum if self.accum is None else self.accum,
            seq_len=preset.seq_len if self.seq_len is None else self.seq_len,
            mixer_sharpness=sharpness if self.mixer_sharpness is None else self.mixer_sharpness,
            arm=self.arm or self.clip,
            # the preset's own run only: its injection is placed for its length
            inject=self.inject or ([] if self.steps is not None else list(preset.inject)),
        )
        if out.eval_every is None:
            out.eval_every = max(1, out.steps // EVALS_PER_RUN)
        if out.checkpoint_every is None:
            out.checkpoint_every = max(1, out.steps // 10)
        for name, value in (
            ("eval-every", out.eval_every),
            ("checkpoint-every", out.checkpoint_every),
        ):
            if value < 0:
                raise UserError(f"--{name} must be 0 (off) or more, got {value}")
        check_bounds(out, UserError)  # every option's bounds, named by its flag
        if out.seq_len > self.model.block_size:
            raise UserError(
                f"--seq-len {out.seq_len} exceeds the {self.size} block size "
                f"{self.model.block_size}"
            )
        out.probes = self.probes.resolve(out.steps, self.size)
        try:
            out.clip_params.validate()
        except ValueError as e:
            raise UserError(str(e)) from None
        parse_injections(out.inject, out.steps)  # validate now, before any output exists
        if out.model_factory and out.hf_config:
            raise UserError("--model and --hf-config both name the model", hint="give one")
        return out

    @property
    def model(self) -> ModelConfig:
        """The size's model; its vocab is ``--vocab-size`` when token ids declare one."""
        vocab = {} if self.vocab_size is None else {"vocab_size": self.vocab_size}
        return dataclasses.replace(PRESETS[self.size].model, **vocab)

    @property
    def recipe_cfg(self) -> Recipe:
        return RECIPES[self.recipe]

    @property
    def examples_per_update(self) -> int:
        """Effective batch m x A x D."""
        return (self.micro_batch or 0) * (self.accum or 0) * self.replicas

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["model_config"] = dataclasses.asdict(self.model)
        d["model_config"]["n_params"] = self.model.n_params()
        d["recipe_config"] = dataclasses.asdict(self.recipe_cfg)
        d["effective_batch"] = {
            "m": self.micro_batch,
            "A": self.accum,
            "D": self.replicas,
            "examples": self.examples_per_update,
        }
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """From ``config.json``; runs written before ``probes`` was nested keep their flat keys."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names and k not in ("probes", "clip_params")}
        kw["probes"] = ProbeConfig.from_dict({**d, **(d.get("probes") or {})})
        kw["clip_params"] = ClipParams.from_dict(d.get("clip_params"))
        if kw.get("mixer") == "exp3":  # recorded by older versions, never read by exp3
            kw["mixer_sharpness"] = None
        kw.setdefault("mixer_sharpness", 1.0)  # written before the knob: the seeds' mixer
        return cls(**kw)


# config.json keys that describe where or how fast a run goes, not what it computes: a
# --resume may change them (the fields declared runtime=True)
RUNTIME_KEYS = frozenset(f.name for f, meta in cli_fields(RunConfig) if meta.runtime)
