"""A checkpoint whose trainer counters are not of the types the trainer keeps (round 31).

``TrainState.load_state_dict`` sets whatever the checkpoint gives: a crafted ``"update": "4"``,
``"batch_hashes": "abc"``, ``"tokens": [1]`` or ``"counts": 5`` (a method replaced by a number)
passed every check (the CRC guards against a torn write, not against whoever made the run
directory), and ``cascade --resume`` ended in a TypeError or AttributeError traceback at the
first update after it, the arm's tables already cut back. They are now one line when the
checkpoint is read, before anything is changed (``train/checkpoint_state.py``).

python -m pytest -q tests/test_hostile_s31_checkpoint_state.py
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from stopped_cascade import stopped
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.errors import UserError


def _recraft(ckpt: Path, mutate: Callable[[dict], None]) -> None:
    """Rewrite a checkpoint with ``mutate`` applied to its decoded state and a valid CRC."""
    from andrea_diag.train.checkpoint import FORMAT, STATE_KEY, _crc, _write_atomic, read_checkpoint
    from andrea_diag.train.state_codec import encode

    state = read_checkpoint(ckpt)
    mutate(state)
    tree, tensors = encode(state)
    named = {f"t{i:06d}": t for i, t in enumerate(tensors)}
    named[STATE_KEY] = torch.frombuffer(bytearray(json.dumps(tree).encode()), dtype=torch.uint8)
    _write_atomic(ckpt, named, {"format": FORMAT, "crc32": _crc(named)})


def _set(key: str, value: object) -> Callable[[dict], None]:
    def mutate(state: dict) -> None:
        state["trainer"]["train_state"][key] = value

    return mutate


def _top_update(state: dict) -> None:
    state["update"] = "4"


CRAFTED = {
    "update-text": _set("update", "4"),
    "method-replaced": _set("counts", 5),
    "hashes-not-a-list": _set("batch_hashes", "abc"),
    "tokens-a-list": _set("tokens", [1]),
    "update-not-the-checkpoints": _top_update,
}


@pytest.mark.parametrize("mutate", list(CRAFTED.values()), ids=list(CRAFTED))
def test_a_checkpoint_whose_trainer_counters_are_crafted_is_one_line_and_cuts_no_table(
    finished_cascade: Path, tmp_path: Path, mutate: Callable[[dict], None]
) -> None:
    from andrea_diag.train.checkpoint import latest_checkpoint

    out = stopped(finished_cascade, tmp_path)
    ckpt = latest_checkpoint(out / "none")
    assert ckpt is not None
    _recraft(ckpt, mutate)
    tables = {n: (out / "none" / n).read_bytes() for n in ("metrics.jsonl", "events.jsonl")}
    res = CliRunner().invoke(app, ["cascade", "--resume", str(out)])
    output = res.output + (repr(res.exception) if res.exit_code == 1 else "")
    assert res.exit_code == 2 and output.count("error:") == 1, output
    assert "does not fit this run" in output and "trainer state" in output, output
    assert "Traceback" not in output
    assert {n: (out / "none" / n).read_bytes() for n in tables} == tables
    assert not (out / "none" / "summary.json").exists()


def _good() -> dict:
    counters = {"update": 4, "microbatches": 8, "examples": 64, "tokens": 4096,
                "batch_hashes": ["a", "b", "c", "d"], "phases": [0, 0, 0, 0]}  # fmt: skip
    return {"update": 4, "trainer": {"train_state": counters}}


def test_the_trainers_own_counters_pass() -> None:
    from andrea_diag.train.checkpoint_state import check_train_state

    check_train_state(_good(), Path("ckpt-0000004.pt"))


def test_a_state_without_a_trainer_part_is_left_to_the_trainer() -> None:
    from andrea_diag.train.checkpoint_state import check_train_state

    check_train_state({"update": 4}, Path("ckpt-0000004.pt"))  # the monitor's own state


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [("update", True, "not a count"), ("examples", -1, "not a count"),
     ("phases", [0, "x"], "not a list of int"), ("tokens", 1.5, "not a count")],
)  # fmt: skip
def test_a_counter_of_another_type_is_named(key: str, value: object, said: str) -> None:
    from andrea_diag.train.checkpoint_state import check_train_state

    state = _good()
    state["trainer"]["train_state"][key] = value
    with pytest.raises(UserError, match=said) as info:
        check_train_state(state, Path("ckpt-0000004.pt"))
    assert key in info.value.message


def test_a_missing_counter_is_named() -> None:
    from andrea_diag.train.checkpoint_state import check_train_state

    state = _good()
    del state["trainer"]["train_state"]["tokens"]
    with pytest.raises(UserError, match="lacks tokens"):
        check_train_state(state, Path("ckpt-0000004.pt"))


def test_train_state_refuses_a_name_that_is_no_field_and_keeps_its_methods() -> None:
    """The second guard behind the checkpoint check: a state naming no field sets nothing."""
    from andrea_diag.train.components import TrainState

    state = TrainState(update=3)
    with pytest.raises(ValueError, match="no field counts"):
        state.load_state_dict({"update": 4, "counts": 5})
    assert state.update == 3  # nothing set: the refusal comes before any field
    assert state.counts() == {"microbatches": 0, "examples": 0, "tokens": 0}
    state.load_state_dict({"update": 4, "batch_hashes": ["a"]})
    assert state.update == 4 and state.batch_hashes == ["a"]
