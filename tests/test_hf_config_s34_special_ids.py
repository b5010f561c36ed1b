"""``--hf-config`` of a model type whose config class sets special token ids by default (GPT-2's
``bos``/``eos`` 50256) gets them as it gets the config's own: kept where they are ids of the
toolkit's vocabulary, else None. Before, every GPT-2 ``--hf-config`` run began with two
transformers warnings ("eos_token_id must be None or an integer within the vocabulary").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from andrea_diag.config import MODEL_PRESETS
from andrea_diag.integrations.hf_model import hf_config

pytest.importorskip("transformers")

SMALL = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 64}


def test_gpt2s_default_ids_past_our_vocabulary_become_none(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(SMALL))
    config = hf_config(path, MODEL_PRESETS["tiny"], 32)
    assert (config.bos_token_id, config.eos_token_id) == (None, None)
    assert config.vocab_size == MODEL_PRESETS["tiny"].vocab_size


def test_a_default_id_inside_our_vocabulary_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 64,
                                "num_attention_heads": 2, "intermediate_size": 128}))  # fmt: skip
    config = hf_config(path, MODEL_PRESETS["tiny"], 32)
    assert (config.bos_token_id, config.eos_token_id) == (1, 2)  # llama's, ours too


def test_a_gpt2_config_builds_without_a_transformers_warning(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(SMALL))
    code = ("import sys; from andrea_diag.config import MODEL_PRESETS; "
            "from andrea_diag.integrations.hf_model import build_hf_model; "
            "build_hf_model(sys.argv[1], MODEL_PRESETS['tiny'], 32)")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "token_id" not in res.stdout + res.stderr, res.stderr
