"""An ``--hf-config`` whose size fields are each in range but add up to more weights than the
memory free holds is one line before a weight is made (round 26: ``hf_model.check_memory``,
counted on the meta device).

Before, GPT-2 with ``n_layer`` 100 and ``n_embd`` 8192 (80 billion parameters, every field far
inside its bound) was built for real: minutes of page faults, then the kernel's OOM killer, with
no word of why. The tests here never make such a model's weights, even on the old code: the
huge one is built on the meta device only, and the command line is driven with a small model
and a small "memory free".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import MODEL_PRESETS
from andrea_diag.errors import UserError
from andrea_diag.integrations import hf_model

pytest.importorskip("transformers")

HUGE = {"model_type": "gpt2", "n_layer": 100, "n_embd": 8192, "n_head": 64, "n_positions": 1024}
SMALL = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 64}


def _write(path: Path, config: dict) -> Path:
    path.write_text(json.dumps(config))
    return path


def test_a_config_of_80_billion_parameters_is_refused_by_its_count_on_the_meta_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hf_model, "available_memory", lambda: 64 << 30)
    path = _write(tmp_path / "huge.json", HUGE)
    config = hf_model.hf_config(path, MODEL_PRESETS["tiny"], 64)
    with torch.device("meta"):  # no memory: the weights are never made
        model = hf_model._from_config(config, path)
    with pytest.raises(UserError) as err:
        hf_model.check_memory(model, path)
    said = err.value.message
    assert "80,618,905,600 parameters" in said and "300.3 GiB of fp32 weights" in said, said
    assert "more than the 64.0 GiB of memory free" in said, said


def test_a_model_that_fits_the_memory_free_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hf_model, "available_memory", lambda: 64 << 30)
    path = _write(tmp_path / "small.json", SMALL)
    model = hf_model.build_hf_model(path, MODEL_PRESETS["tiny"], 64)
    assert sum(p.numel() for p in model.parameters()) > 0
    assert all(p.device.type == "cpu" for p in model.parameters())


@pytest.mark.parametrize("command", ["train", "cascade"])
def test_a_config_past_the_memory_free_is_one_line_before_any_output(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Driven with a small model and 1 MiB "free": what a host too small for a model sees."""
    monkeypatch.setattr(hf_model, "available_memory", lambda: 1 << 20)
    path = _write(tmp_path / "small.json", SMALL)
    out = tmp_path / "out"
    args = [command, "--size", "tiny", "--steps", "2", "--hf-config", str(path), "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    assert "of fp32 weights, more than the 0.0 GiB of memory free" in lines[0], res.output
    assert not out.exists()
