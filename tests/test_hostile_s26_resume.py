"""``--resume`` of a run whose model only the user's code builds (``--model``, round 26).

The trainer checks a checkpoint against its own live model and optimizer before a byte of
tensor data is read. Before, a ``--model`` or ``--hf-config`` run had only a byte budget from
its parameter count: a float64 weight in a float32 model was cast in without a word, and an Adam
moment of another shape failed at the first update after the resume.

python -m pytest -q tests/test_hostile_s26_resume.py
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from stopped_cascade import ARGS as CASCADE
from stopped_cascade import stopped
from test_byo import make_model
from test_hostile_s25_resume import _error_line, _invoke, _recraft, _snapshot

from andrea_diag.config import ModelConfig
from andrea_diag.runlock import LOCK_NAME
from andrea_diag.train.checkpoint import latest_checkpoint

MODEL = ("--model", "test_byo:make_model")  # PairModel: emb, mix, head (tests/test_byo.py)
ARGS = [*CASCADE, *MODEL]  # the --resume tests' cascade, of the user's model


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("byo-ref") / "c"
    code, output = _invoke(*ARGS, "--out", str(out))
    assert code == 0, output
    return out


def _emb_float64(s: dict) -> None:
    s["trainer"]["model"]["emb.weight"] = s["trainer"]["model"]["emb.weight"].double()


def _moment_of_another_shape(s: dict) -> None:
    s["trainer"]["optimizer"]["state"][0]["exp_avg"] = torch.zeros(1)


def _missing_model_tensor(s: dict) -> None:
    del s["trainer"]["model"]["head.bias"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mutate", "says"),
    [(_emb_float64, "model tensor emb.weight is F64 ["),
     (_moment_of_another_shape, "optimizer exp_avg of parameter 0 is F32 [1], the parameter"),
     (_missing_model_tensor, "model tensor head.bias is none, the model's F32 [")],
    ids=["dtype", "moment-shape", "missing-tensor"],
)  # fmt: skip
def test_a_user_models_checkpoint_that_does_not_match_it_is_one_line_before_it_is_read(
    finished: Path, tmp_path: Path, mutate: Callable[[dict], None], says: str
) -> None:
    out = stopped(finished, tmp_path)
    ckpt = latest_checkpoint(out / "none")
    assert ckpt is not None
    _recraft(ckpt, mutate)
    before = _snapshot(out)
    code, output = _invoke("cascade", "--resume", str(out), *MODEL)
    line = _error_line(output)
    assert code == 2 and f"checkpoint {ckpt} does not fit this run ({says}" in line, output
    assert _snapshot(out) == before


@pytest.mark.slow
def test_a_user_models_untouched_checkpoint_still_resumes_to_the_end(
    finished: Path, tmp_path: Path
) -> None:
    """The control: the live model's need admits the checkpoint its own run wrote."""
    out = stopped(finished, tmp_path)
    code, output = _invoke("cascade", "--resume", str(out), *MODEL)
    assert code == 0, output
    summary = json.loads((out / "none" / "summary.json").read_text())
    assert summary["n_updates"] == 6, summary["n_updates"]


def meta_shy_model(config: ModelConfig) -> torch.nn.Module:
    """test_byo's model moved to the CPU, as a factory may: on the meta device it cannot be
    built (a meta tensor is not copied out), so only the trainer checks its checkpoint."""
    return make_model(config).to("cpu")


def test_the_resume_check_builds_an_hf_config_model_on_the_meta_device(tmp_path: Path) -> None:
    """The same need as the model the trainer builds for real (tensor by tensor)."""
    pytest.importorskip("transformers")
    from test_byo import _tiny_hf_config

    from andrea_diag.config import RunConfig
    from andrea_diag.experiments.resume import arm_need
    from andrea_diag.factories import build_model
    from andrea_diag.train.checkpoint_fit import need_of

    cfg = RunConfig(size="tiny", hf_config=str(_tiny_hf_config(tmp_path / "h.json"))).resolve()
    need = arm_need(cfg)
    assert need is not None and need.model is not None
    assert need.model["model.transformer.wte.weight"] == ("F32", (cfg.model.vocab_size, 32))
    assert need == need_of(build_model(cfg), cfg)


def test_a_factory_that_cannot_build_on_meta_leaves_the_check_to_the_trainer() -> None:
    from andrea_diag.config import RunConfig
    from andrea_diag.experiments.resume import arm_need

    cfg = RunConfig(size="tiny", model_factory="test_hostile_s26_resume:meta_shy_model")
    assert arm_need(cfg.resolve()) is None


@pytest.mark.slow
def test_a_checkpoint_the_trainer_refuses_gives_the_arms_lock_back(tmp_path: Path) -> None:
    """Before: the arm's run.lock stayed, held by this (live) process, so a second --resume
    from the same Python session said the arm was in use by itself."""
    shy = ("--model", "test_hostile_s26_resume:meta_shy_model")
    ref = tmp_path / "ref" / "c"
    code, output = _invoke(*ARGS[:-2], *shy, "--out", str(ref))
    assert code == 0, output
    out = stopped(ref, tmp_path)
    ckpt = latest_checkpoint(out / "none")
    assert ckpt is not None
    _recraft(ckpt, _missing_model_tensor)
    for _ in range(2):  # the second attempt is refused for the checkpoint again, not the lock
        code, output = _invoke("cascade", "--resume", str(out), *shy)
        line = _error_line(output)
        assert code == 2 and "model tensor head.bias is none" in line, output
        assert not (out / "none" / LOCK_NAME).exists()


# ---- the toolkit GPT's cascade: rows and steps the checkpoint does not match (hostile audit)


def _rows_end_in_carriage_returns(out: Path) -> None:
    path = out / "none" / "metrics.jsonl"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r"))  # the same size: check_rows passes


def _steps_below_the_checkpoint(out: Path) -> None:
    for arm in ("none", "global"):  # both: a resume whose arms differ is refused first
        path = out / arm / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "steps": 3}))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("damage", "says"),
    [(_rows_end_in_carriage_returns, "has no row end where checkpoint ckpt-"),
     (_steps_below_the_checkpoint, ", past the 3 steps of")],
    ids=["no-row-end", "steps-below"],
)  # fmt: skip
def test_a_table_or_config_the_checkpoint_does_not_match_is_one_line_and_nothing_changes(
    finished_cascade: Path, tmp_path: Path, damage: Callable[[Path], None], says: str
) -> None:
    """Before: rows not ending in a newline where the checkpoint says were cut to nothing by the
    recorder's torn-tail repair, then the line blamed the user ("rows were lost"); a config.json
    of fewer steps than the checkpoint's update resumed, trained nothing and said done."""
    from test_hostile_resume import _snapshot as contents

    out = stopped(finished_cascade, tmp_path)
    damage(out)
    before = contents(out)
    code, output = _invoke("cascade", "--resume", str(out))
    line = _error_line(output)
    assert code == 2 and says in line, output
    assert contents(out) == before
