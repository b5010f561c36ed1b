"""Configuration: model presets, optimizer recipes and the resolved run config.

Presets are named dicts of small frozen dataclasses (torchtitan style). Every run saves the
resolved :class:`RunConfig` as ``config.json``, so a run directory says exactly what ran.

    >>> from andrea_diag.config import MODEL_PRESETS, RunConfig
    >>> MODEL_PRESETS["12m"].n_params()
    17529600
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from andrea_diag.clip.modes import clip_modes
from andrea_diag.clip.params import ClipParams
from andrea_diag.errors import UserError

VOCAB_SIZE = 8449  # the ANDREA tokenizer's vocabulary (seeds); odd on purpose, so no padding tricks
SOURCE_NAMES = ("repo-docs", "gutenberg", "hermes3-general")
CLIP_MODES = clip_modes()  # the clipper registry (clip/modes.py) is the one list of modes

MixerPolicy = Literal["seeded", "exp3"]
ClipImpl = Literal["auto", "cuda", "reference", "torch"]
MatmulPrecision = Literal["highest", "high", "medium"]
DeviceName = Literal["auto", "cpu", "cuda"]
RecipeName = Literal["v1", "v2"]
SizeName = Literal["tiny", "12m", "120m", "tiny2", "30m", "60m"]
PrecisionName = Literal["fp32", "bf16", "fp16"]


@dataclass(frozen=True)
class ModelConfig:
    """A GPT-2-style pre-LayerNorm decoder with learned positions and an untied head."""

    name: str
    d_model: int
    n_layer: int
    n_head: int
    block_size: int  # position-table size; 1024 matches the H200 baselines' gradient sets
    vocab_size: int = VOCAB_SIZE
    mlp_ratio: int = 4

    def n_params(self) -> int:
        """Exact parameter count (weights + biases), equal to ``sum(p.numel())`` of the model."""
        d, v = self.d_model, self.vocab_size
        hidden = self.mlp_ratio * d
        per_layer = (
            2 * d  # ln_1 weight + bias
            + d * 3 * d
            + 3 * d  # qkv projection
            + d * d
            + d  # attention output projection
            + 2 * d  # ln_2
            + d * hidden
            + hidden  # mlp up
            + hidden * d
            + d  # mlp down
        )
        return v * d + self.block_size * d + self.n_layer * per_layer + 2 * d + v * d

    def n_tensors(self) -> int:
        """Number of parameter tensors (the clipper's tensor-list length)."""
        return 12 * self.n_layer + 5

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token, 6N plus attention (PaLM appendix B estimate)."""
        n = self.n_params() - self.block_size * self.d_model
        return 6 * n + 12 * self.n_layer * self.d_model * seq_len


MODEL_PRESETS: dict[str, ModelConfig] = {
    # tiny: the CPU/test sibling; a CPU update (8x64 tokens) takes tens of milliseconds.
    "tiny": ModelConfig("tiny", d_model=64, n_layer=2, n_head=2, block_size=128),
    "12m": ModelConfig("12m", d_model=384, n_layer=6, n_head=6, block_size=1024),
    "120m": ModelConfig("120m", d_model=768, n_layer=12, n_head=12, block_size=1024),
    # The capacity ladder's middle rungs (issue 13), same vocab and block; head size 64 like
    # 120m. Exact counts: 12m 17,529,600; 30m 34,396,160; 60m 60,706,560; 120m 98,820,096.
    "30m": ModelConfig("30m", d_model=512, n_layer=8, n_head=8, block_size=1024),
    "60m": ModelConfig("60m", d_model=640, n_layer=10, n_head=10, block_size=1024),
    # the tiny ladder's second rung (1,970,208 parameters): tests run a ladder of tiny, tiny2
    "tiny2": ModelConfig("tiny2", d_model=96, n_layer=3, n_head=3, block_size=128),
}


@dataclass(frozen=True)
class Recipe:
    """An optimizer recipe from the seeds: v1 (the one that collapsed) and v2 (the fix)."""

    name: str
    optimizer: str  # "adam" | "adamw"
    lr: float
    weight_decay: float
    warmup_updates: int
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8


RECIPES: dict[str, Recipe] = {
    "v1": Recipe("v1", optimizer="adam", lr=3e-4, weight_decay=0.0, warmup_updates=0),
    "v2": Recipe("v2", optimizer="adamw", lr=3e-4, weight_decay=0.1, warmup_updates=100),
}

# Per-size run defaults: (updates, microbatch m, accumulation A, seq_len). tiny must keep
# `cascade --size tiny` (two arms + report) under three minutes on two CPU cores.
SIZE_DEFAULTS: dict[str, tuple[int, int, int, int]] = {
    "tiny": (240, 8, 2, 64),
    "12m": (1200, 16, 1, 256),
    "120m": (1200, 16, 1, 256),
    "30m": (1200, 16, 1, 256),
    "60m": (1200, 16, 1, 256),
    "tiny2": (240, 8, 2, 64),
}


def parse_injections(specs: list[str], steps: int) -> dict[int, str]:
    """``["outlier@40", "nonfinite@90"]`` -> {40: "outlier", 90: "nonfinite"}."""
    out: dict[int, str] = {}
    for spec in specs:
        kind, _, at = spec.partition("@")
        if kind not in ("outlier", "nonfinite") or not at.isdigit():
            raise UserError(
                f"bad --inject {spec!r}",
                hint="use outlier@UPDATE or nonfinite@UPDATE, e.g. outlier@40",
            )
        update = int(at)
        if not 1 <= update <= steps:
            raise UserError(f"--inject {spec!r}: update {update} is outside 1..{steps}")
        out[update] = kind
    return out


EVALS_PER_RUN = 50  # held-out evaluations when --eval-every is not given
LOCKIN_SAMPLES_PER_RUN = 1  # lock-in samples when not given: the final state only (issue 19)
LOCKIN_EVERY_OPEN_ENDED = 100  # ... and for a loop of unknown length (SpikeMonitor)


@dataclass(frozen=True)
class ProbeConfig:
    """Every probe default, in one place: the trainer, ``SpikeMonitor``, the CLI and the report
    read these fields (the report from the run's own ``config.json``)."""

    spike_window: int = 50  # trailing updates of the robust z-score
    spike_z: float = 6.0  # robust z above which an update is a spike
    boundary_k: int = 3  # a spike up to k updates after a phase boundary is a phase transition
    shadow: bool | None = None  # Adam-state shadow buffers; None: on except for 120m (memory)
    lockin_every: int | None = None  # None: about LOCKIN_SAMPLES_PER_RUN samples per run
    per_layer: bool = True  # per-layer grad / m / v norms
    update_stats: bool = True  # update RMS and its cosine with the gradient (a param snapshot)
    lockin: bool = True

    def resolve(self, steps: int | None, size: str | None = None) -> ProbeConfig:
        """Concrete ``shadow`` and ``lockin_every`` for a run of ``steps`` updates."""
        if self.spike_window < 1:
            raise UserError(f"--spike-window must be at least 1, got {self.spike_window}")
        if not (math.isfinite(self.spike_z) and self.spike_z > 0):
            raise UserError(f"--spike-z must be a positive number, got {self.spike_z}")
        if self.boundary_k < 0:
            raise UserError(f"--boundary-k must be 0 or more, got {self.boundary_k}")
        every = self.lockin_every
        if every is None:
            every = max(1, steps // LOCKIN_SAMPLES_PER_RUN) if steps else LOCKIN_EVERY_OPEN_ENDED
        shadow = (size != "120m") if self.shadow is None else self.shadow
        return dataclasses.replace(self, shadow=shadow, lockin_every=max(1, every))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProbeConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _check_choice(value: str, choices: Any, what: str) -> None:
    allowed = get_args(choices) if not isinstance(choices, tuple) else choices
    if value not in allowed:
        raise UserError(f"unknown {what} {value!r}", hint=f"choose from {', '.join(allowed)}")


@dataclass
class RunConfig:
    """Everything one training arm needs; saved resolved as ``config.json``."""

    size: SizeName = "tiny"
    recipe: RecipeName = "v1"
    clip: str = "none"  # a registered clip mode (clip/modes.py)
    max_norm: float = 1.0
    lr: float | None = None  # None: the recipe's lr
    steps: int | None = None  # optimizer updates; None: the size default
    micro_batch: int | None = None  # m, examples per microbatch
    accum: int | None = None  # A, microbatches per update
    seq_len: int | None = None
    seed: int = 0  # init, batch draws and the bandit schedule: shared by the arms
    corpus_seed: int = 0  # the generated sources' text; fixed so seed sweeps share one corpus
    device: DeviceName = "auto"
    mixer: MixerPolicy = "seeded"  # "seeded" schedule or "exp3" online bandit
    sources: dict[str, str] = field(default_factory=dict)  # NAME -> PATH overrides
    clip_impl: ClipImpl = "auto"
    # fp32 matmuls on CUDA: "high" allows TF32 tensor cores (about 5x faster on an H200);
    # "highest" keeps full fp32. No effect on CPU.
    matmul_precision: MatmulPrecision = "high"
    # fp32, bf16 autocast, or fp16 autocast + GradScaler (train/components.py)
    precision: PrecisionName = "fp32"
    replicas: int = 1  # D: data-parallel worker processes (train/distributed.py)
    # updates between checkpoints; None: about every 10% of the run; 0: none (train/checkpoint.py)
    checkpoint_every: int | None = None
    # updates between held-out evaluations; None: about 50 per run; 0: none (train/evaluation.py)
    eval_every: int | None = None
    inject: list[str] = field(default_factory=list)  # "outlier@UPDATE", "nonfinite@UPDATE"
    probes: ProbeConfig = field(default_factory=ProbeConfig)
    clip_params: ClipParams = field(default_factory=ClipParams)  # zclip / agc / spam / skip
    arm: str = ""  # label inside a cascade, e.g. "global"
    # metric rows per write to metrics.jsonl; a kill -9 loses at most flush_every - 1 finished
    # rows (record.py); 1: every row written and fsync'd as it comes
    flush_every: int = 50
    # Bring your own (factories.py): import specs "package.module:factory", or a local HF config
    model_factory: str | None = None  # --model: factory(ModelConfig) -> nn.Module (ids -> logits)
    data_factory: str | None = None  # --data: factory() -> {source name: [documents]}
    hf_config: str | None = None  # --hf-config: a Hugging Face config.json (integrations/)

    def resolve(self) -> RunConfig:
        """Fill size/recipe defaults and validate; returns a new, fully concrete config."""
        _check_choice(self.size, tuple(MODEL_PRESETS), "size")
        _check_choice(self.recipe, tuple(RECIPES), "recipe")
        _check_choice(self.clip, CLIP_MODES, "clip mode")
        _check_choice(self.mixer, MixerPolicy, "mixer")
        _check_choice(self.clip_impl, ClipImpl, "clip implementation")
        _check_choice(self.matmul_precision, MatmulPrecision, "matmul precision")
        _check_choice(self.device, DeviceName, "device")
        _check_choice(self.precision, PrecisionName, "precision")
        steps, m, a, t = SIZE_DEFAULTS[self.size]
        out = dataclasses.replace(
            self,
            lr=RECIPES[self.recipe].lr if self.lr is None else self.lr,
            steps=steps if self.steps is None else self.steps,
            micro_batch=m if self.micro_batch is None else self.micro_batch,
            accum=a if self.accum is None else self.accum,
            seq_len=t if self.seq_len is None else self.seq_len,
            arm=self.arm or self.clip,
        )
        for name, value in (
            ("steps", out.steps),
            ("micro-batch", out.micro_batch),
            ("accum", out.accum),
            ("seq-len", out.seq_len),
            ("nproc", out.replicas),
            ("flush-every", out.flush_every),
        ):
            if value is None or value < 1:
                raise UserError(f"--{name} must be at least 1, got {value}")
        if not (out.lr is not None and math.isfinite(out.lr) and out.lr > 0):
            raise UserError(f"--lr must be a positive number, got {out.lr}")
        if not (math.isfinite(out.max_norm) and out.max_norm > 0):
            raise UserError(f"--max-norm must be a positive number, got {out.max_norm}")
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
        if out.eval_every is None:
            out.eval_every = max(1, out.steps // EVALS_PER_RUN)
        if out.eval_every < 0:
            raise UserError(f"--eval-every must be 0 (off) or more, got {out.eval_every}")
        if out.checkpoint_every is None:
            out.checkpoint_every = max(1, out.steps // 10)
        if out.checkpoint_every < 0:
            raise UserError(
                f"--checkpoint-every must be 0 (off) or more, got {out.checkpoint_every}"
            )
        parse_injections(out.inject, out.steps)  # validate now, before any output exists
        if out.model_factory and out.hf_config:
            raise UserError("--model and --hf-config both name the model", hint="give one")
        return out

    @property
    def model(self) -> ModelConfig:
        return MODEL_PRESETS[self.size]

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
        return cls(**kw)
