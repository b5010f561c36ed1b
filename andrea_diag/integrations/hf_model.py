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

**Refusals.** :func:`read_config` owns every check of the file: not a regular file, past 16
MiB, JSON that does not parse (nested too deeply, an integer past 4300 digits), no
``model_type``, or a size field (``n_layer``, ``n_head``, ``hidden_size``, ...) that is not a
whole number in range are each one line naming the file (and the field), for the CLI's
pre-flight check (``commands/options.checked``) and for Python callers alike. Fields in range
that add up to more weights than the memory free holds are one line before the model is built
(:func:`check_memory`, counted on the meta device).

The wrapper's ``forward(ids)`` returns ``.logits`` (B, T, V), the protocol ``--model`` factories
follow (``andrea_diag.factories``). Needs the ``hf`` extra: ``pip install 'andrea-diag[hf]'``.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

import torch

from andrea_diag.config import ModelConfig
from andrea_diag.errors import UserError
from andrea_diag.host_memory import available_memory

POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx")
SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")
STORAGE_DTYPES = ("torch_dtype", "dtype")  # the checkpoint's, dropped: see hf_config
WEIGHT_BYTES = 4  # per parameter as the model is made: fp32 (the trainer's precision casts later)

# a model's config.json is a few kB; a long one (token maps) a few hundred
MAX_HF_CONFIG_BYTES = 16 << 20
_HINT = "give a model's config.json or the folder holding it"

# The size fields of causal LMs' configs, under each name an architecture gives them: bound,
# and whether null is a value (the library then derives it: GPT-2's n_inner is 4 x n_embd,
# num_key_value_heads the head count). Bounds sit far past any published model (126 layers,
# 128 heads, width 25,600, 10M positions, vocabulary 262k): only a typo or a junk file meets them.
_LAYERS, _HEADS, _WIDTH, _POSITIONS, _VOCAB = 1 << 10, 1 << 10, 1 << 20, 1 << 24, 1 << 24
SIZE_FIELDS: dict[str, tuple[int, bool]] = {
    "n_layer": (_LAYERS, False), "num_hidden_layers": (_LAYERS, False),
    "num_layers": (_LAYERS, False),
    "n_head": (_HEADS, False), "num_attention_heads": (_HEADS, False),
    "num_heads": (_HEADS, False), "num_key_value_heads": (_HEADS, True),
    "num_kv_heads": (_HEADS, True),
    "n_embd": (_WIDTH, False), "hidden_size": (_WIDTH, False), "d_model": (_WIDTH, False),
    "n_inner": (_WIDTH, True), "intermediate_size": (_WIDTH, True),
    "ffn_dim": (_WIDTH, True), "head_dim": (_WIDTH, True),
    **{key: (_POSITIONS, True) for key in POSITION_KEYS},
    "vocab_size": (_VOCAB, True),  # replaced by the toolkit's, but recorded on the run sheet
}  # fmt: skip


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


def config_file(path: str | Path) -> Path:
    """``path``'s config.json (``path`` itself, or the file in the folder ``path``), refused in
    one line unless it is a regular file of a config's size. ``os.path`` rather than pathlib:
    its checks say False where ``Path.is_file`` raised (a name too long: OSError)."""
    try:
        p = Path(path).expanduser()
    except RuntimeError:  # pathlib's "Could not determine home directory" for ~no-such-user
        raise UserError(f"--hf-config {str(path)!r}: no home folder to expand its ~ to",
                        hint="give the config's full path") from None  # fmt: skip
    if os.path.isdir(p):
        p = p / "config.json"
    if os.path.islink(p) and not os.path.exists(p):
        raise UserError(f"--hf-config: {str(p)!r} is a dangling symbolic link")
    if not os.path.exists(p):
        raise UserError(f"--hf-config: {str(p)!r} does not exist")
    if not os.path.isfile(p):  # a FIFO would block the read, /dev/zero never end it
        raise UserError(f"--hf-config: {str(p)!r} is not a regular file", hint=_HINT)
    size = os.path.getsize(p)
    if size > MAX_HF_CONFIG_BYTES:  # a sparse 40 GiB file was read whole: MemoryError
        raise UserError(
            f"--hf-config: {str(p)!r} is {size:,} bytes, not a config.json "
            f"(at most {MAX_HF_CONFIG_BYTES:,})",
            hint=_HINT,
        )
    return p


def _parsed(p: Path) -> Any:
    """The JSON of ``p`` (a regular file of a config's size): every way it fails is one line."""
    try:
        with open(p, "rb") as f:  # bounded: the file may have grown since its size was read
            raw = f.read(MAX_HF_CONFIG_BYTES + 1)
        if len(raw) > MAX_HF_CONFIG_BYTES:
            raise UserError(f"--hf-config: {str(p)!r} is over {MAX_HF_CONFIG_BYTES:,} bytes, "
                            "not a config.json", hint=_HINT)  # fmt: skip
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"--hf-config: {str(p)!r} is not valid JSON ({exc})") from None
    except RecursionError:  # "[[[[..." past the interpreter's stack
        raise UserError(f"--hf-config: {str(p)!r} is nested too deeply to be a config",
                        hint=_HINT) from None  # fmt: skip
    except ValueError as exc:  # an integer past int()'s digit limit (4300 digits)
        raise UserError(f"--hf-config: {str(p)!r} cannot be read as JSON "
                        f"({str(exc).split(':')[0]})", hint=_HINT) from None  # fmt: skip
    except MemoryError:  # 16 MiB of tiny objects, under a ulimit -v
        raise UserError(f"--hf-config: {str(p)!r} is too large to read in the memory free",
                        hint=_HINT) from None  # fmt: skip
    except OSError as exc:
        raise UserError(f"--hf-config: cannot read {str(p)!r} ({exc.strerror})") from None


def read_config(path: str | Path) -> dict[str, Any]:
    """The config file as a dict: a missing, unreadable, unparsable or typeless file, or a size
    field no model can have, is one clear error (the CLI's pre-flight check calls this too)."""
    p = config_file(path)
    d = _parsed(p)
    if not isinstance(d, dict) or not isinstance(d.get("model_type"), str):
        raise UserError(
            f"--hf-config: {str(p)!r} has no 'model_type'",
            hint='a Hugging Face config.json names its architecture, e.g. "model_type": "llama"',
        )
    check_sizes(d, p)
    if isinstance(d.get("text_config"), dict):  # a composite config's language model
        check_sizes(d["text_config"], p, "text_config.")
    return d


def check_sizes(d: dict[str, Any], p: Path, where: str = "") -> None:
    """Each size field ``d`` states is a whole number from 1 to its bound, or one line naming
    the field and the file: transformers takes them as given (n_layer -1 or 0 built a model
    of no blocks that trained and exited 0; true is 1 to Python; 2.5 failed deep in a layer;
    a billion heads would exhaust the memory)."""
    for key, (most, nullable) in SIZE_FIELDS.items():
        if key not in d or (d[key] is None and nullable):
            continue
        value = d[key]
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
            said = json.dumps(value)
            raise UserError(
                f"--hf-config {str(p)!r}: {where}{key} is "
                f"{said if len(said) <= 40 else said[:39] + '…'}, not a whole number "
                f"from 1 to {most:,}",
                hint=f"set {key} in the config to the model's own value",
            )


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
    _check_model_type(d["model_type"], path)
    # ids of the config's own tokenizer mean nothing in ours; the model type's defaults too
    # (GPT-2's 50256 past our vocabulary made transformers warn twice on every --hf-config run)
    defaults = _default_ids(transformers, d["model_type"])
    for key in SPECIAL_IDS:
        if key in kwargs or defaults.get(key) is not None:
            kwargs[key] = _our_id(kwargs.get(key, defaults.get(key)), preset.vocab_size)
    # the checkpoint's storage dtype ("torch_dtype": "bfloat16" in most published configs) made
    # the fresh weights bf16 under --precision fp32; the trainer's precision owns the dtype
    for key in STORAGE_DTYPES:
        kwargs.pop(key, None)
    try:
        config = transformers.AutoConfig.for_model(d["model_type"], **kwargs)
    except Exception as exc:  # a bad field: the library says which
        raise UserError(f"--hf-config {path}: {_said(exc)}") from None
    check_positions(config, seq_len, str(path))
    return config


def _default_ids(transformers: Any, model_type: str) -> dict[str, Any]:
    """The special token ids the model type's config class sets when a config gives none."""
    try:
        config = transformers.AutoConfig.for_model(model_type)
    except Exception:  # a config class that needs fields to be made: it has no bare defaults
        return {}
    return {key: getattr(config, key, None) for key in SPECIAL_IDS}


def _our_id(value: Any, vocab_size: int) -> Any:
    """A special token id of the config kept only where it is one of ours: past the vocabulary
    (GPT-2's 50256) or negative (-1 made Llama's padding_idx our last token, whose embedding
    then never trained) it is None; a list (Llama 3's eos ids) keeps its ids that are ours."""
    if isinstance(value, list):
        ours = [v for v in value if _our_id(v, vocab_size) is not None]
        return ours or None
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < vocab_size
    return value if ok else None


def build_hf_model(path: str | Path, preset: ModelConfig, seq_len: int) -> HFCausalLM:
    """The config's model with the toolkit's vocabulary, wrapped to return logits."""
    config = hf_config(path, preset, seq_len)
    if torch.get_default_device().type != "meta":  # built for real: counted first, in no memory
        with torch.device("meta"):
            check_memory(_from_config(config, path), path)
    model = _from_config(config, path)  # on meta (--resume's check): made once, no memory
    check_positions(model.config, seq_len, str(path))
    return HFCausalLM(model)


def _from_config(config: Any, path: str | Path) -> torch.nn.Module:
    try:
        return _transformers().AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # a config the model class cannot build: the library says why
        raise UserError(f"--hf-config {path}: {_said(exc)}") from None


def check_memory(model: torch.nn.Module, path: str | Path) -> None:
    """The model's weights, as they are made (fp32), must fit the memory free, or one line
    before they are made. Each size field in range can still add up to more than the host
    has (GPT-2 with n_layer 100 and n_embd 8192 is 80 billion parameters): the build then ran
    for minutes of page faults until the kernel killed the process without a word. The
    weights alone are counted (gradients and Adam's moments may live on a GPU), so a refusal
    is certain; a model that passes may still not train here."""
    n = sum(p.numel() for p in model.parameters())
    need, free = n * WEIGHT_BYTES, available_memory()
    if free is not None and need > free:
        raise UserError(
            f"--hf-config {path}: its model has {n:,} parameters, {need / 2**30:,.1f} GiB of "
            f"fp32 weights, more than the {free / 2**30:,.1f} GiB of memory free",
            hint="check the config's widths and depths (n_layer, hidden_size, ...)",
        )


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
