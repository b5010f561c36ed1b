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
from typing import Any

from andrea_diag.errors import UserError

VOCAB_SIZE = 8449  # the ANDREA tokenizer's vocabulary (seeds); odd on purpose, so no padding tricks
SOURCE_NAMES = ("repo-docs", "gutenberg", "hermes3-general")
CLIP_MODES = ("none", "global", "per-tensor")


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


@dataclass
class RunConfig:
    """Everything one training arm needs; saved resolved as ``config.json``."""

    size: str = "tiny"
    recipe: str = "v1"
    clip: str = "none"
    max_norm: float = 1.0
    lr: float | None = None  # None: the recipe's lr
    steps: int | None = None  # optimizer updates; None: the size default
    micro_batch: int | None = None  # m, examples per microbatch
    accum: int | None = None  # A, microbatches per update
    seq_len: int | None = None
    seed: int = 0  # init, batch draws and the bandit schedule: shared by the arms
    corpus_seed: int = 0  # the generated sources' text; fixed so seed sweeps share one corpus
    device: str = "auto"
    mixer: str = "seeded"  # "seeded" schedule or "exp3" online bandit
    partial_group: str = "use-real-denominator"  # or "drop"; see train/loop.py
    sources: dict[str, str] = field(default_factory=dict)  # NAME -> PATH overrides
    clip_impl: str = "auto"
    # fp32 matmuls on CUDA: "high" allows TF32 tensor cores (about 5x faster on an H200);
    # "highest" keeps full fp32. No effect on CPU.
    matmul_precision: str = "high"
    # probes
    spike_window: int = 50
    spike_z: float = 6.0
    boundary_k: int = 3
    inject: list[str] = field(default_factory=list)  # "outlier@UPDATE", "nonfinite@UPDATE"
    shadow: bool | None = None  # Adam-state pollution shadow buffers; None: on for tiny/12m
    lockin_every: int | None = None  # None: about 8 samples per run
    arm: str = ""  # label inside a cascade, e.g. "global"

    def resolve(self) -> RunConfig:
        """Fill size/recipe defaults and validate; returns a new, fully concrete config."""
        if self.size not in MODEL_PRESETS:
            raise UserError(
                f"unknown size {self.size!r}", hint=f"choose one of {', '.join(MODEL_PRESETS)}"
            )
        if self.recipe not in RECIPES:
            raise UserError(
                f"unknown recipe {self.recipe!r}", hint=f"choose one of {', '.join(RECIPES)}"
            )
        if self.clip not in CLIP_MODES:
            raise UserError(
                f"unknown clip mode {self.clip!r}", hint=f"choose from {', '.join(CLIP_MODES)}"
            )
        if self.mixer not in ("seeded", "exp3"):
            raise UserError(f"unknown mixer {self.mixer!r}", hint="choose seeded or exp3")
        if self.partial_group not in ("use-real-denominator", "drop"):
            raise UserError(f"unknown partial-group policy {self.partial_group!r}")
        if self.clip_impl not in ("auto", "cuda", "reference", "torch"):
            raise UserError(
                f"unknown clip implementation {self.clip_impl!r}",
                hint="choose auto, cuda, reference or torch",
            )
        if self.matmul_precision not in ("highest", "high", "medium"):
            raise UserError(f"unknown matmul precision {self.matmul_precision!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise UserError(f"unknown device {self.device!r}", hint="choose auto, cpu or cuda")
        steps, m, a, t = SIZE_DEFAULTS[self.size]
        out = dataclasses.replace(
            self,
            lr=RECIPES[self.recipe].lr if self.lr is None else self.lr,
            steps=steps if self.steps is None else self.steps,
            micro_batch=m if self.micro_batch is None else self.micro_batch,
            accum=a if self.accum is None else self.accum,
            seq_len=t if self.seq_len is None else self.seq_len,
            shadow=(self.size != "120m") if self.shadow is None else self.shadow,
            arm=self.arm or self.clip,
        )
        for name, value in (
            ("steps", out.steps),
            ("micro-batch", out.micro_batch),
            ("accum", out.accum),
            ("seq-len", out.seq_len),
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
        if out.boundary_k < 0:
            raise UserError(f"--boundary-k must be 0 or more, got {out.boundary_k}")
        parse_injections(out.inject, out.steps)  # validate now, before any output exists
        if out.lockin_every is None:
            out.lockin_every = max(1, out.steps // 8)
        return out

    @property
    def model(self) -> ModelConfig:
        return MODEL_PRESETS[self.size]

    @property
    def recipe_cfg(self) -> Recipe:
        return RECIPES[self.recipe]

    @property
    def examples_per_update(self) -> int:
        """Effective batch m x A x D (D = 1 data replica here)."""
        return (self.micro_batch or 0) * (self.accum or 0)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["model_config"] = dataclasses.asdict(self.model)
        d["model_config"]["n_params"] = self.model.n_params()
        d["recipe_config"] = dataclasses.asdict(self.recipe_cfg)
        d["effective_batch"] = {
            "m": self.micro_batch,
            "A": self.accum,
            "D": 1,
            "examples": self.examples_per_update,
        }
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
