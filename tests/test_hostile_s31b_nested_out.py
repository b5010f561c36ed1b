"""A command that makes a folder of records (train, cascade, sweep, ladder; their Python API)
never makes it inside another run's, cascade's or sweep's folder (round 31b):
``train --out C/none/sub`` made a cascade inside the arm ``none`` of cascade ``C``, and
``cascade --out C/cas`` one beside its arms. Refused before anything is made, one line; a
sweep's own cells (named by its ``sweep.json``) are still made, in its process or their own.
The benches' check is the same rule, with one definition of a run folder (``out_place``).

python -m pytest -q tests/test_hostile_s31b_nested_out.py
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hostile_dirs import (  # noqa: F401 (the *_fixture names are fixtures: run, cascade)
    cascade_fixture,
    one_line_error,
    run_fixture,
)

from andrea_diag.config import RunConfig
from andrea_diag.errors import UserError

TINY = ["--size", "tiny", "--steps", "2", "--device", "cpu"]


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def _sweep_folder(root: Path, cells: list[str]) -> Path:
    """A sweep's folder as the sweep leaves it before its cells run: sweep.json naming them."""
    root.mkdir()
    (root / "sweep.json").write_text(json.dumps({"cells": cells, "status": "running"}))
    return root


@pytest.mark.parametrize("command", ["train", "cascade"])
def test_a_run_out_inside_a_cascades_arm_is_refused_and_makes_nothing(
    cascade: Path, command: str
) -> None:
    before = _digest(cascade)
    said = one_line_error(command, *TINY, "--out", str(cascade / "none" / "sub"))
    assert "is inside" in said and "a run folder" in said and str(cascade / "none") in said
    assert _digest(cascade) == before and not (cascade / "none" / "sub").exists()


@pytest.mark.parametrize("command", ["train", "cascade"])
def test_a_run_out_beside_a_cascades_arms_is_refused(cascade: Path, command: str) -> None:
    said = one_line_error(command, *TINY, "--out", str(cascade / "cas"))
    assert "a cascade" in said and "cascade.json" in said
    assert not (cascade / "cas").exists()


def test_a_train_out_in_a_sweep_folder_that_names_no_such_cell_is_refused(tmp_path: Path) -> None:
    sweep = _sweep_folder(tmp_path / "s", ["tiny-lr0.001-mn1-s0"])
    said = one_line_error("train", *TINY, "--out", str(sweep / "mine"))
    assert "a sweep" in said and not (sweep / "mine").exists()


@pytest.mark.parametrize("where", ["global/s", "s", ""])
def test_a_sweep_out_in_or_inside_a_cascade_is_refused(cascade: Path, where: str) -> None:
    before = _digest(cascade)
    out = cascade / where if where else cascade
    said = one_line_error("sweep", *TINY, "--lr", "1e-3", "--out", str(out))
    assert "a run folder" in said
    assert _digest(cascade) == before and not (cascade / "s").exists()


def test_a_ladder_out_inside_a_run_is_refused(run: Path) -> None:
    said = one_line_error("ladder", "--size", "tiny,tiny2", "--seed", "0", "--steps", "2",
                          "--device", "cpu", "--out", str(run / "ladder"))  # fmt: skip
    assert "a run folder" in said and str(run) in said
    assert not (run / "ladder").exists()


def test_run_cascade_refuses_an_out_inside_a_run_before_making_it(cascade: Path) -> None:
    from andrea_diag.experiments.cascade import CascadeSpec, run_cascade

    base = RunConfig(size="tiny", steps=2, device="cpu")
    with pytest.raises(UserError, match="a run folder"):
        run_cascade(CascadeSpec(base=base, clips=["none"], out=cascade / "global" / "x"))
    assert not (cascade / "global" / "x").exists()


def test_run_sweep_refuses_an_out_inside_a_cascade_before_making_it(cascade: Path) -> None:
    from andrea_diag.experiments.sweep import SweepSpec, run_sweep

    spec = SweepSpec(base=RunConfig(size="tiny", steps=2, device="cpu"), lrs=[1e-3],
                     out=cascade / "s")  # fmt: skip
    with pytest.raises(UserError, match="a run folder"):
        run_sweep(spec)
    assert not (cascade / "s").exists()


def test_a_cell_its_sweep_names_is_a_cascades_place_and_no_other_folder_is(
    tmp_path: Path,
) -> None:
    from andrea_diag.out_place import refuse_nested

    sweep = _sweep_folder(tmp_path / "s", ["c0"])
    refuse_nested(sweep / "c0", cell=True)  # the sweep's cell: made in its sweep
    refuse_nested(sweep, resumes="sweep")  # a sweep re-run on its own folder
    for place, cell in ((sweep / "c1", True), (sweep / "c0", False), (sweep / "c0" / "x", True)):
        with pytest.raises(UserError, match=r"a sweep: it holds sweep\.json"):
            refuse_nested(place, cell=cell)


def test_a_bench_out_inside_a_run_of_parquet_metrics_is_refused(tmp_path: Path) -> None:
    """One definition of a run folder: the benches' own list knew only config.json beside
    metrics.jsonl, so a run whose table is metrics.parquet took a bench's files."""
    from andrea_diag.bench.train_checks import check_out_outside_runs

    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.json", "metrics.parquet"):
        (run / name).write_text("{}")
    with pytest.raises(UserError, match="a run folder"):
        check_out_outside_runs(run / "bench")
    check_out_outside_runs(tmp_path / "bench")  # beside it: a plain folder
