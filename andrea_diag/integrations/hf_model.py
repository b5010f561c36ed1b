"""A Hugging Face causal LM built from a local ``config.json``: ``--hf-config PATH``.

    andrea-diag cascade --hf-config ./llama-tiny/config.json --size tiny

Nothing is downloaded: the JSON is read here and handed to ``AutoConfig.for_model`` (it must
name its ``model_type``, e.g. ``"llama"``, ``"gpt_neox"``, ``"gpt2"``), and the model is built
with ``AutoModelForCausalLM.from_config``, with random weights drawn after the trainer's
``torch.manual_seed`` (identical in every arm).

**Vocabulary.** The toolkit trains its own tokenizer (vocabulary 8449) on the run's sources, so
the config's ``vocab_size`` is replaced by the toolkit's; the run sheet records both
(``vocab_size_in_config``, ``vocab_size``). A checkpoint's tokenizer is never used; special
token ids outside the toolkit's vocabulary (GPT-2's 50256) are set to None. The size
preset does not change the architecture: the config's own widths and depths are trained; use one
config file per rung of a ladder. ``--seq-len`` must fit the config's positions
(``max_position_embeddings`` / ``n_positions``).

The wrapper's ``forward(ids)`` returns ``.logits`` (B, T, V), the protocol ``--model`` factories
follow (``andrea_diag.factories``). Needs the ``hf`` extra: ``pip install 'andrea-diag[hf]'``.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import torch

from andrea_diag.config import ModelConfig
from andrea_diag.errors import UserError

POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx")
SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise UserError(
            "--hf-config needs the transformers package, which is not installed",
            hint="pip install 'andrea-diag[hf]'",
        ) from None
    return transformers


class HFCausalLM(torch.nn.Module):
    """``forward(ids (B, T)) -> logits (B, T, V)`` around a Hugging Face causal LM."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.config = model.config  # the lock-in probe reads positions and vocab from it

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, use_cache=False).logits  # (B, T, V)


def read_config(path: str | Path) -> dict[str, Any]:
    """The config file as a dict; a missing, unreadable or typeless file is one clear error."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise UserError(f"--hf-config: {str(p)!r} does not exist")
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"--hf-config: {str(p)!r} is not valid JSON ({exc})") from None
    if not isinstance(d, dict) or not isinstance(d.get("model_type"), str):
        raise UserError(
            f"--hf-config: {str(p)!r} has no 'model_type'",
            hint='a Hugging Face config.json names its architecture, e.g. "model_type": "llama"',
        )
    return d


def _said(exc: Exception, most: int = 300) -> str:
    """The library's own words, cut short: its "should contain one of ..." lists run to
    thousands of characters, and the error is one line."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= most else text[: most - 1] + "…"


def _check_model_type(model_type: str, path: str | Path) -> None:
    """One line for a ``model_type`` transformers does not know, with the nearest names
    (transformers' own message lists all ~800)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    known = list(CONFIG_MAPPING.keys())
    if model_type in known:
        return
    near = difflib.get_close_matches(model_type, known, n=3)
    raise UserError(
        f"--hf-config {path}: model_type {model_type!r} is not one transformers "
        f"{_transformers().__version__} knows",
        hint=f"did you mean {', '.join(map(repr, near))}?" if near else 'e.g. "llama", "gpt2"',
    )


def hf_config(path: str | Path, preset: ModelConfig, seq_len: int) -> Any:
    """The transformers config of ``--hf-config`` with the toolkit's vocabulary, checked
    against ``seq_len``; no weights are made (a check for a job that trains elsewhere)."""
    transformers = _transformers()
    d = read_config(path)
    kwargs = {k: v for k, v in d.items() if k != "model_type"}
    kwargs["vocab_size"] = preset.vocab_size  # the toolkit's tokenizer, not the checkpoint's
    for key in SPECIAL_IDS:  # ids of the config's own tokenizer mean nothing in ours
        if isinstance(kwargs.get(key), int) and kwargs[key] >= preset.vocab_size:
            kwargs[key] = None
    _check_model_type(d["model_type"], path)
    try:
        config = transformers.AutoConfig.for_model(d["model_type"], **kwargs)
    except Exception as exc:  # a bad field: the library says which
        raise UserError(f"--hf-config {path}: {_said(exc)}") from None
    check_positions(config, seq_len, str(path))
    return config


def build_hf_model(path: str | Path, preset: ModelConfig, seq_len: int) -> HFCausalLM:
    """The config's model with the toolkit's vocabulary, wrapped to return logits."""
    config = hf_config(path, preset, seq_len)
    try:
        model = _transformers().AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # a config the model class cannot build: the library says why
        raise UserError(f"--hf-config {path}: {_said(exc)}") from None
    check_positions(model.config, seq_len, str(path))
    return HFCausalLM(model)


def check_positions(cfg: Any, seq_len: int, path: str) -> None:
    """``--seq-len`` must fit the config's position table."""
    positions = next((getattr(cfg, k) for k in POSITION_KEYS if getattr(cfg, k, None)), None)
    if positions is not None and seq_len > int(positions):
        raise UserError(
            f"--seq-len {seq_len} exceeds the {positions} positions of --hf-config {path}",
            hint="lower --seq-len, or raise max_position_embeddings in the config",
        )


def hf_origin(model: torch.nn.Module, path: str | Path) -> dict[str, Any]:
    """The run sheet's record of an ``--hf-config`` model."""
    transformers = _transformers()
    d = read_config(path)
    return {
        "hf_config": str(Path(path).expanduser().resolve()),
        "model_type": d["model_type"],
        "architecture": type(getattr(model, "model", model)).__name__,
        "vocab_size_in_config": d.get("vocab_size"),
        "vocab_size": getattr(getattr(model, "config", None), "vocab_size", None),
        "transformers_version": transformers.__version__,
    }
