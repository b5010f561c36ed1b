"""What a framework was told to do, recorded in the run's ``config.json`` under the toolkit's
own keys, so the report's header and findings read a Hugging Face or Lightning run like one of
the toolkit's (lr, clip and max_norm, m×A×D, precision), plus the framework's raw settings.

    meta = {**monitor_meta(...), **hf_settings(args, optimizer, model)}
"""

from __future__ import annotations

from typing import Any

import torch

# Lightning's precision flags as ``trainer.precision`` reports them (its aliases 16, "16", "bf16",
# 32 and 64 resolved: Lightning's _PRECISION_INPUT_STR) -> the label config.json records. The
# toolkit's own three (fp32, bf16 = bf16 autocast, fp16 = fp16 autocast + GradScaler) where
# Lightning runs the same thing; the others say what ran: weights and gradients in half
# precision ("-true"), fp64, fp8 matmuls under Transformer Engine. Every one was "fp32" before,
# except the two mixed ones ("64-true" and "transformer-engine" included).
LIGHTNING_PRECISION = {
    "32-true": "fp32",
    "16-mixed": "fp16",
    "bf16-mixed": "bf16",
    "16-true": "fp16-true",
    "bf16-true": "bf16-true",
    "64-true": "fp64",
    "transformer-engine": "fp8-bf16",  # fp8 matmuls, bf16 weights (Lightning's default)
    "transformer-engine-float16": "fp8-fp16",
}
_ALIASES = {"16": "16-mixed", "bf16": "bf16-mixed", "32": "32-true", "64": "64-true"}
# a parameter dtype -> its label, where the weights themselves are not fp32
_DTYPES = {torch.float64: "fp64", torch.bfloat16: "bf16-true", torch.float16: "fp16-true"}


def lightning_precision(flag: Any) -> str:
    """The label of a Lightning precision flag (an alias read as Lightning reads it); one this
    table does not know (a custom plugin's) is recorded as it is, never guessed as fp32."""
    text = str(flag)
    text = _ALIASES.get(text, text)
    return LIGHTNING_PRECISION.get(text, text)


def _param_dtype(model: Any) -> str | None:
    """The trainable parameters' dtype ("float32"), "mixed" for several, None for none."""
    params = getattr(model, "parameters", None)
    dtypes = {p.dtype for p in params() if p.requires_grad} if callable(params) else set()
    if len(dtypes) != 1:
        return "mixed" if dtypes else None
    return str(next(iter(dtypes))).removeprefix("torch.")


def _weights_say(label: str, model: Any) -> str:
    """``label``, unless it names fp32 weights (fp32, or bf16 / fp16 autocast over them) and
    the weights are not: a model cast with ``.double()`` or loaded in bf16 runs in that dtype
    whatever the framework's flag (32-true, or a Trainer's bf16 / fp16 flag, casts no weight),
    so a bf16 model under ``bf16=True`` is ``bf16-true``, not autocast over fp32."""
    if label not in ("fp32", "bf16", "fp16"):
        return label  # the flag names the weights itself (-true, fp64) or a plugin (fp8)
    dtype = getattr(torch, _param_dtype(model) or "float32", None)
    return _DTYPES.get(dtype, label) if isinstance(dtype, torch.dtype) else label


def _optimizer(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    plain = (int, float, str, bool, tuple, list, type(None))
    hyper = {k: v for k, v in group.items() if k != "params" and isinstance(v, plain)}
    return {"optimizer": type(optimizer).__name__, "optimizer_hparams": hyper,
            "lr": group.get("lr")}  # fmt: skip


def _clip(max_norm: float | None, algorithm: str = "norm") -> dict[str, Any]:
    if not max_norm or max_norm <= 0:
        return {"clip": "none", "max_norm": None}
    return {"clip": "global" if algorithm == "norm" else f"by-{algorithm}", "max_norm": max_norm}


def _hf_max_norm(value: Any) -> Any:
    """The threshold the Trainer clips with, or None: it clips when ``max_grad_norm > 0``, so
    NaN (and 0, a negative, None) never clips: NaN was recorded as a clip it never ran."""
    try:
        return value if value > 0 else None
    except TypeError:  # None, text: the Trainer's own comparison fails there
        return None


def _batch(m: int | None, accum: int, world: int) -> dict[str, Any]:
    examples = m * accum * world if m else None
    return {"micro_batch": m, "accum": accum, "world_size": world,
            "effective_batch": {"m": m, "A": accum, "D": world, "examples": examples}}  # fmt: skip


def hf_settings(args: Any, optimizer: torch.optim.Optimizer, model: Any) -> dict[str, Any]:
    """``config.json`` fields of a ``transformers.Trainer`` run from its ``TrainingArguments``."""
    precision = (
        "bf16"
        if getattr(args, "bf16", False)
        else "fp16"
        if getattr(args, "fp16", False)
        else "fp32"
    )
    precision = _weights_say(precision, model)
    accum = max(1, int(getattr(args, "gradient_accumulation_steps", 1) or 1))
    world = max(1, int(getattr(args, "world_size", 1) or 1))
    raw = {k: getattr(args, k, None) for k in (
        "learning_rate", "max_grad_norm", "gradient_accumulation_steps", "per_device_train_batch_size",
        "bf16", "fp16", "weight_decay", "warmup_steps", "warmup_ratio", "lr_scheduler_type",
        "max_steps", "seed", "optim")}  # fmt: skip
    raw["param_dtype"] = _param_dtype(model)
    return {
        "size": type(model).__name__,
        "precision": precision,
        "steps": raw["max_steps"] if raw["max_steps"] and raw["max_steps"] > 0 else None,
        **_optimizer(optimizer),
        **_clip(_hf_max_norm(getattr(args, "max_grad_norm", None))),
        **_batch(getattr(args, "per_device_train_batch_size", None), accum, world),
        "framework_settings": {
            k: str(v) if not isinstance(v, (int, float, bool, type(None))) else v
            for k, v in raw.items()
        },
    }


def lightning_settings(
    trainer: Any, optimizer: torch.optim.Optimizer, model: Any
) -> dict[str, Any]:
    """``config.json`` fields of a Lightning run from its ``Trainer`` flags."""
    accum = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
    world = max(1, int(getattr(trainer, "world_size", 1) or 1))
    prec = str(getattr(trainer, "precision", "32-true"))
    precision = _weights_say(lightning_precision(prec), model)
    clip_val = getattr(trainer, "gradient_clip_val", None)
    algorithm = str(getattr(trainer, "gradient_clip_algorithm", None) or "norm")
    steps = getattr(trainer, "max_steps", -1)
    return {
        "size": type(model).__name__,
        "precision": precision,
        "steps": steps if steps and steps > 0 else None,
        **_optimizer(optimizer),
        **_clip(float(clip_val) if clip_val else None, algorithm.split(".")[-1].lower()),
        **_batch(None, accum, world),
        "framework_settings": {
            "precision": prec,
            "param_dtype": _param_dtype(model),
            "gradient_clip_val": clip_val,
            "gradient_clip_algorithm": algorithm,
            "accumulate_grad_batches": accum,
            "max_steps": steps,
            "max_epochs": getattr(trainer, "max_epochs", None),
            "world_size": world,
        },
    }
