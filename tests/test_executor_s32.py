"""The sweep's executor settings and a cell's failure record (round 32).

- ``ExecutorConfig(auto_jobs=True, jobs=4)`` was taken, and the sweep then set ``jobs`` from
  the cells over the 4 without a word. The sweep refuses it now, in one line, before its
  folder (the config itself cannot: a resolved ``auto`` holds the count it chose).
- ``--jobs``' bounds are that owner's too (the parser repeated them): ``--jobs 0`` and
  ``--jobs 300`` say the same line as ``ExecutorConfig(jobs=0)`` does, by flag.
- A cell's process wrote ``error.json`` into the folder its cascade had just refused (another
  run's, or one holding someone's files). It writes it only into its own cell folder now.

python -m pytest -q tests/test_executor_s32.py
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from andrea_diag.commands.executor_options import executor_config
from andrea_diag.config import RunConfig
from andrea_diag.console_text import make_console
from andrea_diag.errors import BadArgument, UserError
from andrea_diag.experiments.executor import ERROR_FILE, run_cell
from andrea_diag.experiments.executor_config import ExecutorConfig
from andrea_diag.experiments.sweep import SweepSpec, run_sweep


def test_auto_jobs_with_a_jobs_count_is_refused_not_overwritten(tmp_path: Path) -> None:
    base = RunConfig(size="tiny", steps=2, device="cpu")
    out = tmp_path / "s"
    spec = SweepSpec(base=base, lrs=[1e-3], out=out,
                     executor=ExecutorConfig(auto_jobs=True, jobs=4))  # fmt: skip
    with pytest.raises(BadArgument) as e:
        run_sweep(spec, make_console(stderr=True, quiet=True))
    assert e.value.message == (
        "SweepSpec: executor: auto_jobs=True sets jobs from the cells; jobs=4 would be replaced"
    )
    assert not out.exists()  # before the sweep's folder


@pytest.mark.parametrize(("given", "shown"), [("0", "0"), ("000", "0"), ("300", "300")])
def test_a_jobs_flag_out_of_bounds_is_the_settings_one_line(given: str, shown: str) -> None:
    with pytest.raises(UserError) as e:
        executor_config(given, "local", "auto", None, 1, 240)
    assert e.value.message == f"--jobs must be from 1 to 256 (or auto), got {shown}"


def test_a_jobs_flag_of_thousands_of_digits_is_one_line() -> None:
    with pytest.raises(UserError, match="--jobs takes a number or auto, got 5,000 digits"):
        executor_config("9" * 5000, "local", "auto", None, 1, 240)
    with pytest.raises(UserError, match="an integer of 120 digits"):  # past int()'s fine
        executor_config("9" * 120, "local", "auto", None, 1, 240)


def _job(tmp_path: Path, out: Path, **changes: object) -> str:
    cfg = dataclasses.asdict(RunConfig(size="tiny", steps=2, device="cpu"))
    spec = {"config": {**cfg, **changes}, "clips": ["none"], "out": str(out), "resume": False}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec))
    return str(path)


def test_a_cell_refused_its_folder_writes_no_error_file_there(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="exists and is not empty"):
        run_cell(_job(tmp_path, theirs))
    assert sorted(os.listdir(theirs)) == ["notes.txt"]


def test_a_cell_whose_folder_is_a_link_writes_no_error_file_through_it(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "cascade.json").write_text("{}")  # a cascade's: only the link keeps it out
    (tmp_path / "cell").symlink_to(elsewhere)
    with pytest.raises(UserError):
        run_cell(_job(tmp_path, tmp_path / "cell", steps=-1))
    assert os.listdir(elsewhere) == ["cascade.json"]


def test_a_cell_inside_another_run_writes_no_error_file_there(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    (theirs / "none").mkdir(parents=True)
    (theirs / "cascade.json").write_text(json.dumps({"arms": ["none"]}))
    with pytest.raises(UserError, match="is inside"):
        run_cell(_job(tmp_path, theirs / "none" / "inner"))
    assert not (theirs / "none" / "inner").exists()


def test_a_cell_failing_in_its_own_new_folder_says_why_there(tmp_path: Path) -> None:
    cell = tmp_path / "cell"
    with pytest.raises(UserError):
        run_cell(_job(tmp_path, cell, steps=-1))
    said = json.loads((cell / ERROR_FILE).read_text())["error"]
    assert said == "BadArgument: --steps must be at least 1, got -1"
