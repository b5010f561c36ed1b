"""An ``--hf-config`` the loader cannot use is one line, from the CLI and from Python alike
(review of bad input, round 25): ``integrations/hf_model.read_config`` owns every check, and
``commands/options.checked`` (the CLI's pre-flight) calls it.

Before, the pre-flight alone caught a deeply nested file, a 5000-digit integer and a sparse
40 GiB file; ``read_config`` called from Python raised RecursionError, ValueError or read the
whole file. A size field no model can have (``n_layer: -1`` or 0: a model of no blocks) trained
and exited 0. A config's ``pad_token_id: -1`` froze the embedding of our last token, and its
``torch_dtype`` made the fresh weights bf16 under ``--precision fp32``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_refusals import empty_fixture, refused  # noqa: F401 (empty)

from andrea_diag.config import MODEL_PRESETS
from andrea_diag.errors import UserError
from andrea_diag.integrations.hf_model import MAX_HF_CONFIG_BYTES, build_hf_model, read_config

GPT2 = {"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 64}
LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "max_position_embeddings": 64,
}


def _write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(json.dumps(config))
    return path


# ---- 1. the file itself, read from Python ----


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[" * 100_000, "nested too deeply"),  # was: RecursionError
        ('{"model_type": "gpt2", "n_layer": 1' + "0" * 5000 + "}", "digits"),  # was: ValueError
    ],
)
def test_read_config_from_python_refuses_json_it_cannot_parse_in_one_line(
    text: str, words: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(UserError, match=words):
        read_config(path)


def test_read_config_from_python_refuses_a_huge_file_by_its_size_unread(tmp_path: Path) -> None:
    """Sparse: it costs no disk. It was read whole (a 40 GiB one: MemoryError)."""
    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(MAX_HF_CONFIG_BYTES + 1)
    with pytest.raises(UserError, match=f"{MAX_HF_CONFIG_BYTES + 1:,} bytes"):
        read_config(tmp_path)


def test_read_config_from_python_says_a_fifo_is_not_a_regular_file(tmp_path: Path) -> None:
    """It said "does not exist" of a file that is there."""
    path = tmp_path / "config.json"
    os.mkfifo(path)
    with pytest.raises(UserError, match="is not a regular file"):
        read_config(path)


@pytest.mark.parametrize(
    "path",
    [
        "~no-such-user-andrea-diag/config.json",  # was: pathlib's RuntimeError
        "x" * 5000 + ".json",  # a name too long for the OS: was OSError from Path.is_dir
    ],
)
def test_read_config_from_python_refuses_a_path_pathlib_raised_on(path: str) -> None:
    with pytest.raises(UserError) as info:
        read_config(path)
    assert info.value.message.startswith("--hf-config")


# ---- 2. size fields no model can have ----

BAD_SIZES = [
    ("n_layer", -1),
    ("n_layer", 0),
    ("n_layer", None),
    ("n_layer", True),  # an int to Python
    ("n_layer", 2.5),
    ("n_head", 0),
    ("n_head", -2),
    ("n_head", 10**9),
    ("n_embd", "32"),
    ("n_embd", 0),
    ("vocab_size", 0),
    ("vocab_size", -50257),
    ("n_positions", -5),
    ("n_positions", 10**12),
    ("n_inner", 2.0),
    ("num_hidden_layers", 0),
    ("hidden_size", [32]),
]


@pytest.mark.parametrize(("key", "value"), BAD_SIZES)
def test_a_size_field_out_of_range_or_not_a_whole_number_is_refused_naming_field_and_file(
    key: str, value: Any, tmp_path: Path
) -> None:
    path = _write(tmp_path / "my-config.json", {**GPT2, key: value})
    with pytest.raises(UserError) as info:
        read_config(path)
    assert f"{key} is {json.dumps(value)}" in info.value.message
    assert "my-config.json" in info.value.message and "\n" not in info.value.message


def test_a_size_field_of_a_composite_configs_text_model_is_checked(tmp_path: Path) -> None:
    path = _write(tmp_path / "config.json", {**GPT2, "text_config": {"num_hidden_layers": -1}})
    with pytest.raises(UserError, match=r"text_config\.num_hidden_layers is -1"):
        read_config(path)


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_config_of_no_layers_is_refused_before_any_work(
    command: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    """n_layer -1 built a GPT-2 of no blocks: it trained, and the run exited 0."""
    path = _write(empty.parent / "config.json", {**GPT2, "n_layer": -1})
    line = refused([command, "--hf-config", str(path)], monkeypatch, empty)
    assert "n_layer is -1" in line and "config.json" in line


def test_the_bounds_sit_past_every_published_model_and_null_stays_the_librarys_default(
    tmp_path: Path,
) -> None:
    """null is the library's own default for some (GPT-2's n_inner, Mistral's head_dim); the
    largest published sizes pass, one past a bound does not."""
    config = {**GPT2, "n_inner": None, "vocab_size": 50257, "n_ctx": 1024}
    assert read_config(_write(tmp_path / "gpt2.json", config))["n_inner"] is None
    llama = {**LLAMA, "num_key_value_heads": None, "head_dim": None, "vocab_size": 128256}
    big = {**llama, "num_hidden_layers": 126, "max_position_embeddings": 10_485_760}
    assert read_config(_write(tmp_path / "big.json", big))["num_hidden_layers"] == 126
    with pytest.raises(UserError, match="num_hidden_layers is 1025, not a whole number"):
        read_config(_write(tmp_path / "deep.json", {**llama, "num_hidden_layers": 1025}))


# ---- 3. fields of the config's own checkpoint that silently changed the model ----


def test_a_negative_pad_token_id_does_not_freeze_our_last_tokens_embedding(
    tmp_path: Path,
) -> None:
    """-1 became Llama's padding_idx, i.e. our token 8448, whose embedding never trained."""
    pytest.importorskip("transformers")
    path = _write(tmp_path / "config.json", {**LLAMA, "pad_token_id": -1})
    model = build_hf_model(path, MODEL_PRESETS["tiny"], 32)
    assert model.model.model.embed_tokens.padding_idx is None


@pytest.mark.parametrize("key", ["torch_dtype", "dtype"])
def test_a_configs_storage_dtype_does_not_make_the_fresh_weights_low_precision(
    key: str, tmp_path: Path
) -> None:
    """Most published configs say "torch_dtype": "bfloat16": the weights were bf16 under
    --precision fp32, the trainer's own precision silently not the one trained."""
    pytest.importorskip("transformers")
    path = _write(tmp_path / "config.json", {**GPT2, key: "bfloat16"})
    model = build_hf_model(path, MODEL_PRESETS["tiny"], 32)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
