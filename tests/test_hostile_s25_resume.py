"""``--resume`` of a hostile run directory (round 25):

- a checkpoint is checked before any of its tensor data is read: its size (by stat) against
  what the arm's model and optimizer hold and against the memory free, its header's names and
  its JSON document's size, and each model tensor's and Adam moment's dtype and shape
  (train/checkpoint_fit.py). Before, a header declaring a tensor of 1 GiB or a sparse 40 GiB
  was mapped and read whole (then passed over as "cannot be read"), a model tensor of another
  dtype was cast without a word, and an Adam moment of another shape failed mid-training;
- a checkpoint whose JSON document holds an integer tensor that requires a gradient, or a
  number past its numpy scalar or deque length, is one line (a RuntimeError or OverflowError
  traceback before);
- a saved config.json that no run takes (an unknown precision, a nan where the bounds cannot
  see it, a microbatch past one forward) is said of that file, as every bound of RunConfig was
  in round 23, and so is a cascade.json arm that is no clip mode.

python -m pytest -q tests/test_hostile_s25_resume.py
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import safetensors
import torch
from stopped_cascade import stopped  # the same stopped cascade
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import RunConfig
from andrea_diag.errors import UserError
from andrea_diag.experiments.resume import run_configs
from andrea_diag.train.checkpoint import (
    FORMAT,
    STATE_KEY,
    _crc,
    _write_atomic,
    latest_checkpoint,
    load_checkpoint,
    read_checkpoint,
)
from andrea_diag.train.state_codec import encode

NAMES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.uint8: "U8",
         torch.uint32: "U32"}  # fmt: skip
SIZES = {"F32": 4, "F64": 8, "I64": 8, "U8": 1, "U32": 4}


def _invoke(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    out = res.output + (repr(res.exception) if res.exit_code == 1 else "")
    return res.exit_code, out


def _error_line(output: str) -> str:
    assert "Traceback" not in output, output
    lines = [x for x in output.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, output
    return lines[0]


def _snapshot(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def _write(path: Path, tree: object, tensors: list[torch.Tensor], **extra: torch.Tensor) -> None:
    """A checkpoint as ours are written (names, document, CRC) holding ``tree``."""
    named = {f"t{i:06d}": t for i, t in enumerate(tensors)} | extra
    named[STATE_KEY] = torch.frombuffer(bytearray(json.dumps(tree).encode()), dtype=torch.uint8)
    _write_atomic(path, named, {"format": FORMAT, "crc32": _crc(named)})


def _plant(path: Path, specs: dict[str, tuple[str, list[int]]]) -> None:
    """Rewrite ``path`` with a valid safetensors header declaring ``specs`` (name -> dtype,
    shape) for some tensors; what a grown tensor adds is a hole of a sparse file."""
    with safetensors.safe_open(str(path), framework="pt") as f:  # its tensors map the file:
        meta = f.metadata()  # copied before it is replaced (a write through them is a SIGBUS)
        tensors = {k: f.get_tensor(k).clone() for k in f.keys()}  # noqa: SIM118
    header: dict[str, object] = {"__metadata__": meta}
    offset, sizes = 0, []
    for name, t in tensors.items():
        dtype, shape = specs.get(name, (NAMES[t.dtype], list(t.shape)))
        n = math.prod(shape) * SIZES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        sizes.append(n)
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = path.with_suffix(".planted")
    with open(tmp, "wb") as out:
        out.write(struct.pack("<Q", len(raw)) + raw)
        for t, n in zip(tensors.values(), sizes, strict=True):
            data = t.reshape(-1).view(torch.uint8).numpy().tobytes()[:n]
            out.write(data)
            out.seek(n - len(data), os.SEEK_CUR)
        out.truncate(8 + len(raw) + offset)
    os.replace(tmp, path)


def _recraft(ckpt: Path, mutate: Callable[[dict], None]) -> None:
    """``ckpt`` with ``mutate`` applied and a valid CRC (which guards against a torn write, not
    against whoever made the run directory)."""
    state = read_checkpoint(ckpt)
    mutate(state)
    tree, tensors = encode(state)
    _write(ckpt, tree, tensors)


# ---- a checkpoint checked before its tensor data is read (slow: a trained tiny cascade)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("shape", "size"), [([2**28], "1.0 GiB"), ([10 * 2**30], "40.0 GiB")], ids=["1GiB", "40GiB"]
)
def test_a_checkpoint_declaring_tensors_past_the_models_need_is_refused_by_size_unread(
    finished_cascade: Path, tmp_path: Path, shape: list[int], size: str
) -> None:
    """Before: mapped and read whole, then passed over as "cannot be read" for the one before
    (or, past the memory free, mapped until the kernel refused)."""
    out = stopped(finished_cascade, tmp_path)
    ckpt = latest_checkpoint(out / "none")
    assert ckpt is not None
    _plant(ckpt, {"t000000": ("F32", shape)})
    before = _snapshot(out)
    code, output = _invoke("cascade", "--resume", str(out))
    line = _error_line(output)
    assert code == 2 and f"checkpoint {ckpt} is {size}" in line, output
    assert "model and optimizer hold" in line or "memory free" in line, output
    assert _snapshot(out) == before


def _wte_float64(s: dict) -> None:
    s["trainer"]["model"]["wte.weight"] = s["trainer"]["model"]["wte.weight"].double()


def _moment_of_another_shape(s: dict) -> None:
    s["trainer"]["optimizer"]["state"][0]["exp_avg"] = torch.zeros(1)


def _extra_model_tensor(s: dict) -> None:
    s["trainer"]["model"]["planted.weight"] = torch.zeros(3)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mutate", "says"),
    [(_wte_float64, "model tensor wte.weight is F64 [8449, 64], the model's F32 [8449, 64]"),
     (_moment_of_another_shape, "optimizer exp_avg of parameter 0 is F32 [1], the parameter"),
     (_extra_model_tensor, "model tensor planted.weight is F32 [3], the model's none")],
    ids=["dtype", "moment-shape", "extra-tensor"],
)  # fmt: skip
def test_a_checkpoint_whose_tensors_do_not_match_the_model_is_one_line_before_it_is_read(
    finished_cascade: Path, tmp_path: Path, mutate: Callable[[dict], None], says: str
) -> None:
    """Before: a float64 weight was cast into the model without a word, a moment of another
    shape failed at the first update, a planted tensor was read before load_state_dict said
    so."""
    out = stopped(finished_cascade, tmp_path)
    ckpt = latest_checkpoint(out / "none")
    assert ckpt is not None
    _recraft(ckpt, mutate)
    before = _snapshot(out)
    code, output = _invoke("cascade", "--resume", str(out))
    line = _error_line(output)
    assert code == 2 and f"checkpoint {ckpt} does not fit this run ({says}" in line, output
    assert _snapshot(out) == before


@pytest.mark.slow
def test_the_trainers_own_load_checks_a_checkpoint_against_its_run_config_before_reading(
    finished_cascade: Path, tmp_path: Path
) -> None:
    """load_checkpoint (the trainer's restore) builds the need from the run's config.json."""
    out = stopped(finished_cascade, tmp_path)
    ckpt = latest_checkpoint(out / "none")
    assert ckpt is not None
    _recraft(ckpt, _wte_float64)
    with pytest.raises(UserError, match=r"model tensor wte\.weight is F64"):
        load_checkpoint(ckpt, expect={})


# ---- a checkpoint's document and header (fast: crafted files)


@pytest.mark.parametrize(
    ("tree", "tensors"),
    [({"format": FORMAT, "x": {"$tensor": 0, "grad": True}}, [torch.zeros(2, dtype=torch.int64)]),
     ({"format": FORMAT, "x": {"$tensor": 0, "param": True, "grad": True}},
      [torch.zeros(2, dtype=torch.int64)]),
     ({"format": FORMAT, "x": {"$npscalar": "<i1", "value": 10**30}}, []),
     ({"format": FORMAT, "x": {"$npscalar": "<f2", "value": 10**400}}, []),
     ({"format": FORMAT, "x": {"$deque": [], "maxlen": 10**30}}, [])],
    ids=["int-grad", "int-param", "int8-overflow", "float16-overflow", "deque-maxlen"],
)  # fmt: skip
def test_a_document_entry_torch_or_numpy_refuses_is_one_line_not_a_traceback(
    tmp_path: Path, tree: dict, tensors: list[torch.Tensor]
) -> None:
    path = tmp_path / "ckpt-0000001.pt"
    _write(path, tree, tensors)
    with pytest.raises(UserError, match=f"checkpoint {path} holds a"):
        read_checkpoint(path)


def test_a_state_document_past_its_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "ckpt-0000001.pt"
    _write(path, {"format": FORMAT}, [])
    _plant(path, {STATE_KEY: ("U8", [100 << 20])})
    with pytest.raises(UserError, match="state document is U8 \\[104857600\\], not bytes under"):
        read_checkpoint(path)


def test_a_tensor_of_a_name_we_never_write_is_refused(tmp_path: Path) -> None:
    """Before: read, and left out of the state without a word (names are t<index>)."""
    path = tmp_path / "ckpt-0000001.pt"
    _write(path, {"format": FORMAT, "x": {"$tensor": 0}}, [torch.ones(2)], zzz=torch.ones(1))
    with pytest.raises(UserError, match="holds tensors of names we never write"):
        read_checkpoint(path)


# ---- a saved config.json and cascade.json no run takes (fast: refused before any training)


def _saved_run(root: Path, **fields: object) -> tuple[Path, Path]:
    """A started one-arm cascade (config.json and cascade.json only): a resume reads them
    before anything else."""
    out = root / "c"
    (out / "none").mkdir(parents=True)
    config = RunConfig(clip="none", steps=6).resolve().to_dict() | fields
    path = out / "none" / "config.json"
    path.write_text(json.dumps(config))
    meta = {"arms": ["none"], "status": "running", "size": "tiny", "seed": 0}
    (out / "cascade.json").write_text(json.dumps(meta))
    return out, path


@pytest.mark.parametrize(
    ("fields", "says"),
    [({"precision": "fp8"}, "unknown precision 'fp8'"),
     ({"precision": ""}, "unknown precision ''"),
     ({"mixer_sharpness": float("nan")}, "mixer_sharpness must be a finite number, got nan")],
    ids=["fp8", "empty-precision", "nan-sharpness"],
)  # fmt: skip
@pytest.mark.parametrize("command", ["cascade", "train"])
def test_a_saved_config_value_no_run_takes_is_said_of_the_file(
    tmp_path: Path, fields: dict, says: str, command: str
) -> None:
    out, path = _saved_run(tmp_path, **fields)
    before = _snapshot(out)
    code, output = _invoke(command, "--resume", str(out))
    line = _error_line(output)
    assert code == 2 and f"{path} holds a value no run takes: {says}" in line, output
    assert _snapshot(out) == before


def test_a_saved_microbatch_past_one_forward_is_said_of_the_file_before_any_training(
    tmp_path: Path,
) -> None:
    """Before: the arm trained with it, a forward of 8M tokens, until the kernel's OOM killer
    ended the process (so this asks run_configs, which every resume calls first, and trains
    nothing whatever it answers)."""
    out, path = _saved_run(tmp_path, micro_batch=2**17)
    with pytest.raises(UserError) as info:
        run_configs(out)
    said = (
        "a microbatch of micro_batch 131072 x seq_len 64 is 8,388,608 tokens, more than one forward"
    )
    assert f"{path} holds a value no run takes: {said}" in info.value.message


def test_a_cascade_json_arm_that_is_no_clip_mode_is_said_of_the_file(tmp_path: Path) -> None:
    """Before: "unknown clip mode 'bogus'; choose from ...", as if --clip had been typed."""
    out, _ = _saved_run(tmp_path / "x", arm="bogus", clip="bogus")
    (out / "none").rename(out / "bogus")
    (out / "cascade.json").write_text(json.dumps({"arms": ["bogus"], "status": "running"}))
    code, output = _invoke("cascade", "--resume", str(out))
    line = _error_line(output)
    assert code == 2 and f"{out / 'cascade.json'} lists arm 'bogus', which is no clip" in line
