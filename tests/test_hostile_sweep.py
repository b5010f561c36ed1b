"""A sweep folder is untrusted input too: a re-run never writes through a link planted in it,
never trains in a cell folder linked out of it, and a refused re-run loses nothing recorded.

Also the --out folders of the measuring commands (accum-check, bench-kernels, bench-train): a
file in the folder's place is refused before the measurement, and a link planted in the folder
is replaced, not written through.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from finished_sweep import CELL, SWEEP
from finished_sweep import strict_cli as _run
from rich.console import Console

from andrea_diag.commands.pages import render_sweep_page, sweep_page_after
from andrea_diag.config import RunConfig
from andrea_diag.errors import CellsCrashed, UserError
from andrea_diag.experiments.cascade_place import check_fresh
from andrea_diag.experiments.executor import ExecutorConfig
from andrea_diag.experiments.ladder import write_ladder
from andrea_diag.experiments.sweep import SweepSpec, cells, check_cells_runnable
from andrea_diag.experiments.throughput import recorded_updates
from andrea_diag.rundir import make_out_dir


@pytest.fixture
def sweep(finished_sweep: Path, tmp_path: Path) -> Path:
    """A private copy of the finished sweep, to plant things in."""
    return Path(shutil.copytree(finished_sweep, tmp_path / "s", symlinks=True))


def _outside(tmp_path: Path) -> Path:
    victim = tmp_path / "outside.txt"
    victim.write_text("not the sweep's")
    return victim


@pytest.mark.parametrize("table", ["sweep.csv", "arms.csv", "gaps.csv"])
def test_a_rerun_replaces_a_link_planted_for_a_table_and_leaves_its_target_alone(
    sweep: Path, tmp_path: Path, table: str
) -> None:
    victim = _outside(tmp_path)
    (sweep / table).unlink()
    (sweep / table).symlink_to(victim)
    code, output = _run(*SWEEP, "--out", str(sweep))
    assert code == 0, output
    assert victim.read_text() == "not the sweep's"
    assert not (sweep / table).is_symlink() and len(pd.read_csv(sweep / table)) > 0


def test_a_cell_folder_linked_out_of_the_sweep_is_refused_and_nothing_is_written(
    sweep: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    shutil.move(sweep / CELL, outside)
    (sweep / CELL).symlink_to(outside, target_is_directory=True)
    before = {p.name: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    meta = (sweep / "sweep.json").read_bytes()
    code, output = _run(*SWEEP, "--out", str(sweep))
    assert code != 0 and f"cell {CELL!r} points outside" in output
    assert {p.name: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before
    assert (sweep / "sweep.json").read_bytes() == meta


def test_a_cells_folder_linked_out_of_the_sweep_is_refused_before_any_write(
    sweep: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "logs"
    outside.mkdir()
    (sweep / "cells").symlink_to(outside, target_is_directory=True)
    meta = (sweep / "sweep.json").read_bytes()
    code, output = _run(*SWEEP, "--seed", "0,1", "--jobs", "2", "--out", str(sweep))
    assert code != 0 and "the cells' folder 'cells' points outside" in output
    assert list(outside.iterdir()) == [] and (sweep / "sweep.json").read_bytes() == meta
    assert not (sweep / "tiny-lr0.001-mn1-s1").exists()  # nothing trained


@pytest.mark.slow
def test_links_planted_for_a_cells_log_and_job_file_are_replaced_not_followed(
    sweep: Path, tmp_path: Path
) -> None:
    """Cells in their own processes (--jobs 2) write cells/<cell>.log and .json."""
    victim = _outside(tmp_path)
    (sweep / "cells").mkdir()
    for seed in (1, 2):
        for ext in ("log", "json"):
            (sweep / "cells" / f"tiny-lr0.001-mn1-s{seed}.{ext}").symlink_to(victim)
    code, output = _run(*SWEEP, "--seed", "0,1,2", "--jobs", "2", "--out", str(sweep))
    assert code == 0, output
    assert victim.read_text() == "not the sweep's"
    logs = sorted((sweep / "cells").iterdir())
    assert len(logs) == 4 and not any(p.is_symlink() for p in logs)


@pytest.mark.slow
def test_a_submitit_folder_linked_out_of_the_sweep_is_never_written_through(
    sweep: Path, tmp_path: Path
) -> None:
    """submitit's pickles (which its parent process unpickles) and logs go to a fresh folder
    of this invocation's inside cells/, never to a cells/submitit planted beforehand."""
    pytest.importorskip("submitit")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (sweep / "cells").mkdir()
    (sweep / "cells" / "submitit").symlink_to(outside, target_is_directory=True)
    argv = [*SWEEP, "--seed", "0,1", "--executor", "submitit-local", "--out", str(sweep)]
    code, output = _run(*argv)
    assert code == 0, output
    assert list(outside.iterdir()) == []
    (fresh,) = (sweep / "cells").glob("submitit-*")
    assert not fresh.is_symlink() and list(fresh.glob("*_result.pkl"))


@pytest.mark.parametrize(
    ("change", "says"),
    [(["--steps", "4"], "steps 3 -> 4"), (["--clip", "none,none"], "twice"),
     (["--clip", "none"], "other settings")],
)  # fmt: skip
def test_a_refused_rerun_leaves_every_recorded_file_as_it_was(
    sweep: Path, change: list[str], says: str
) -> None:
    before = {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()}
    code, output = _run(*SWEEP, *change, "--out", str(sweep))
    assert code != 0 and says in output
    assert {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(("damage", "says"), [("{", "is not valid JSON"), ("[1]", "holds a list")])
def test_a_damaged_sweep_json_is_the_preflights_one_line_not_a_page_traceback(
    sweep: Path, damage: str, says: str
) -> None:
    (sweep / "sweep.json").write_text(damage)
    page = (sweep / "sweep.html").read_bytes()
    code, output = _run(*SWEEP, "--out", str(sweep))
    assert code == 2 and says in output and output.count("error:") == 1, output
    assert (sweep / "sweep.html").read_bytes() == page  # nothing rendered after a refusal


@pytest.mark.parametrize("name", ["sweep.json", "sweep.csv"])
def test_the_sweep_page_never_renders_a_file_linked_out_of_the_sweep(
    sweep: Path, tmp_path: Path, name: str
) -> None:
    outside = tmp_path / name
    shutil.copy(sweep / name, outside)
    (sweep / name).unlink()
    (sweep / name).symlink_to(outside)
    (sweep / "sweep.html").unlink()
    with pytest.raises(UserError, match="link out of its run"):
        render_sweep_page(sweep, Console(quiet=True))
    assert not (sweep / "sweep.html").exists()


def test_a_page_that_cannot_be_rendered_after_crashed_cells_does_not_hide_the_crash(
    sweep: Path,
) -> None:
    meta = json.loads((sweep / "sweep.json").read_text())
    (sweep / "sweep.json").write_text(json.dumps({**meta, "status": "crashed"}))
    (sweep / "sweep.csv").write_text("")  # no table a page can be drawn from
    with pytest.raises(CellsCrashed, match="1 of 1"), sweep_page_after(sweep, Console(quiet=True)):
        raise CellsCrashed("1 of 1 sweep cells crashed")


NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a host without CUDA")


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize(
    ("option", "says"),
    [pytest.param(["--device", "cuda"], "no CUDA device is available", marks=NO_CUDA),
     (["--model", "nosuch:x"], "cannot import 'nosuch'"),
     (["--device", "cpu", "--clip-impl", "cuda"], "--clip-impl cuda needs the run on a CUDA")],
    ids=["device", "model", "clip-impl"],
)  # fmt: skip
def test_a_grid_that_cannot_run_here_is_one_line_and_no_sweep_folder(
    tmp_path: Path, option: list[str], says: str, jobs: str
) -> None:
    out = tmp_path / "s"
    argv = [*SWEEP, "--lr", "1e-3,3e-3", "--jobs", jobs, *option, "--out", str(out)]
    code, output = _run(*argv)
    assert code == 2 and says in output and output.count("error:") == 1, output
    assert "crashed" not in output and not out.exists()


@NO_CUDA
def test_a_slurm_cells_device_is_not_judged_on_the_host_that_submits_it() -> None:
    spec = SweepSpec(base=RunConfig(device="cuda"), lrs=[1e-3],
                     executor=ExecutorConfig(kind="slurm"))  # fmt: skip
    check_cells_runnable(spec, cells(spec))  # the job's node has the GPU, not this one
    local = dataclasses.replace(spec, executor=ExecutorConfig(kind="submitit-local"))
    with pytest.raises(UserError, match="no CUDA device"):
        check_cells_runnable(local, cells(local))


@NO_CUDA
def test_a_finished_cuda_sweep_re_run_on_a_host_without_cuda_trains_nothing_and_is_not_refused(
    sweep: Path,
) -> None:
    """Every cell done: nothing would train, so this host's lack of a GPU is no reason to
    refuse (a sweep brought back from the GPU machine, re-run to redraw its pages)."""
    on_cuda = [a if a != "cpu" else "cuda" for a in SWEEP]
    code, output = _run(*on_cuda, "--out", str(sweep))
    assert code == 0 and "already done, kept" in output, output
    code, output = _run(*on_cuda, "--seed", "0,1", "--out", str(sweep))  # one cell to train
    assert code == 2 and "no CUDA device" in output, output


def test_a_sweep_grown_by_a_seed_keeps_the_first_invocations_throughput(sweep: Path) -> None:
    first = json.loads((sweep / "sweep.json").read_text())["throughput"]
    code, output = _run(*SWEEP, "--seed", "0,1", "--out", str(sweep))
    assert code == 0, output
    meta = json.loads((sweep / "sweep.json").read_text())
    assert meta["throughput_earlier"] == [first]
    assert meta["throughput"]["updates"] == 2 * 3  # the new cell's two arms, three updates each


def test_a_throughput_earlier_that_is_not_a_list_of_dicts_is_dropped_not_spread(
    sweep: Path,
) -> None:
    meta = json.loads((sweep / "sweep.json").read_text())
    first = meta["throughput"]
    (sweep / "sweep.json").write_text(json.dumps({**meta, "throughput_earlier": {"a": 1}}))
    code, output = _run(*SWEEP, "--seed", "0,1", "--out", str(sweep))
    assert code == 0, output
    assert json.loads((sweep / "sweep.json").read_text())["throughput_earlier"] == [first]


def test_earlier_throughputs_without_a_last_figure_are_kept(sweep: Path) -> None:
    meta = json.loads((sweep / "sweep.json").read_text())
    old = [{"updates": 6, "wall_s": 1.0}, {"updates": 4, "wall_s": 2.0}]
    del meta["throughput"]
    (sweep / "sweep.json").write_text(json.dumps({**meta, "throughput_earlier": [*old, 7]}))
    code, output = _run(*SWEEP, "--seed", "0,1", "--out", str(sweep))
    assert code == 0, output
    meta = json.loads((sweep / "sweep.json").read_text())
    assert meta["throughput_earlier"] == old and meta["throughput"]["updates"] == 2 * 3


@pytest.mark.parametrize("planted", ["link-out", "arm-link-out", "fifo"])
def test_the_throughput_count_never_reads_metrics_outside_the_run_nor_hangs_on_a_fifo(
    sweep: Path, tmp_path: Path, planted: str
) -> None:
    assert recorded_updates([sweep / CELL], ["none", "global"]) == 2 * 3
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "metrics.jsonl").write_text('{"update": 1}\n' * 100)
    arm = sweep / CELL / "none"
    if planted == "arm-link-out":
        shutil.rmtree(arm)
        arm.symlink_to(outside, target_is_directory=True)
    else:
        (arm / "metrics.jsonl").unlink()
        if planted == "fifo":
            os.mkfifo(arm / "metrics.jsonl")
        else:
            (arm / "metrics.jsonl").symlink_to(outside / "metrics.jsonl")
    assert recorded_updates([sweep / CELL], ["none", "global"]) == 3  # the global arm's alone


def test_the_ladder_table_replaces_a_planted_link(finished_sweep: Path, tmp_path: Path) -> None:
    victim = _outside(tmp_path)
    out = tmp_path / "ladder"
    out.mkdir()
    (out / "ladder.csv").symlink_to(victim)
    (out / "ladder.json").symlink_to(victim)
    table = pd.read_csv(finished_sweep / "sweep.csv")
    write_ladder(out, table, ["tiny2", "tiny"], {"steps": 3})  # a rung with no rows yet
    assert victim.read_text() == "not the sweep's"
    assert not (out / "ladder.csv").is_symlink() and len(pd.read_csv(out / "ladder.csv")) > 0


MEASURING = [
    ["accum-check", "--size", "tiny", "--micro-batch", "2", "--accum", "2"],
    ["bench-kernels", "--sizes", "tiny", "--reps", "1"],
    ["bench-train", "--size", "tiny", "--updates", "2", "--warmup", "1", "--block", "1"],
]


@pytest.mark.parametrize("command", MEASURING, ids=lambda c: c[0])
def test_an_out_that_is_a_file_is_refused_before_the_measurement(
    tmp_path: Path, command: list[str]
) -> None:
    taken = tmp_path / "taken"
    taken.write_text("a file")
    code, output = _run(*command, "--out", str(taken))
    assert code != 0 and "is a file, not a directory" in output
    assert "measuring" not in output and "timing" not in output  # refused before the work
    assert taken.read_text() == "a file"


OUT_COMMANDS = [
    *MEASURING, SWEEP, ["cascade", "--size", "tiny", "--steps", "3", "--device", "cpu"],
    ["ladder", "--size", "tiny,tiny2", "--seed", "0", "--steps", "3", "--device", "cpu"],
]  # fmt: skip


@pytest.mark.parametrize("command", OUT_COMMANDS, ids=lambda c: c[0])
def test_an_out_with_a_component_too_long_to_look_up_is_one_line_and_makes_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    out = tmp_path / "parent" / ("x" * 300)  # ENAMETOOLONG from exists() itself
    code, output = _run(*command, "--out", str(out))
    assert code == 2 and "longer than 255 bytes" in output and output.count("error:") == 1
    assert not (tmp_path / "parent").exists()


def test_an_out_too_long_in_all_is_one_line_where_the_folder_is_checked(tmp_path: Path) -> None:
    out = tmp_path.joinpath(*["y" * 200] * 25)  # each component fine, the whole past PATH_MAX
    with pytest.raises(UserError, match="cannot create or write the output directory"):
        make_out_dir(out)
    with pytest.raises(UserError, match="cannot use --out"):
        check_fresh(out)


@pytest.mark.parametrize(
    ("option", "says"),
    [(["--precision", "nope"], "unknown precision 'nope'"),
     (["--clip", "nope"], "unknown clip mode 'nope'"),
     (["--clip-impl", "cuda"], "--clip-impl cuda needs the run on a CUDA device"),
     (["--clip-impl", "nope"], "unknown clip implementation 'nope'")],
    ids=["precision", "clip", "clip-impl-cuda-on-cpu", "clip-impl"],
)  # fmt: skip
def test_a_bench_train_option_it_cannot_run_is_one_line_and_leaves_no_out_folder(
    tmp_path: Path, option: list[str], says: str
) -> None:
    out = tmp_path / "bt"
    code, output = _run(*MEASURING[2], "--device", "cpu", *option, "--out", str(out))
    assert code == 2 and says in output and output.count("error:") == 1, output
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("command", MEASURING, ids=lambda c: c[0])
def test_links_planted_in_a_measuring_commands_out_are_replaced(
    tmp_path: Path, command: list[str]
) -> None:
    victim = _outside(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    for ext in ("json", "html"):
        (out / f"{command[0]}.{ext}").symlink_to(victim)
    code, output = _run(*command, "--out", str(out))
    assert code in (0, 1), output  # accum-check exits 1 where its own loop is off
    assert victim.read_text() == "not the sweep's"
    assert json.loads((out / f"{command[0]}.json").read_text())
    assert not any(p.is_symlink() for p in out.iterdir())


@pytest.mark.parametrize("value", ["1,,2", ",0,", "0,"], ids=["inner", "both-ends", "trailing"])
@pytest.mark.parametrize("option", ["--seed", "--lr", "--size", "--clip"])
def test_a_comma_list_with_an_empty_item_is_one_line_before_any_output(
    tmp_path: Path, option: str, value: str
) -> None:
    """Dropping the empty item would run a grid other than the one typed."""
    code, output = _run(*SWEEP, option, value, "--out", str(tmp_path / "s"))
    assert code == 2 and "has an empty item" in output
    assert not (tmp_path / "s").exists()


def test_slurm_without_sbatch_is_one_line_before_the_sweep_folder_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("submitit")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here, whatever the host has
    out = tmp_path / "s"
    code, output = _run(*SWEEP, "--executor", "slurm", "--out", str(out))
    assert code == 2 and "no sbatch on PATH" in output and output.count("error:") == 1, output
    assert not out.exists()


def test_a_missing_submitit_is_one_line_before_the_sweep_folder_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "submitit", None)  # import -> ImportError
    out = tmp_path / "s"
    code, output = _run(*SWEEP, "--executor", "submitit-local", "--out", str(out))
    assert code == 2 and "needs submitit" in output, output
    assert not out.exists()
    code, output = _run(*SWEEP, "--executor", "submitit-local", "--merge-only", "--out", str(out))
    assert "needs submitit" not in output  # a merge submits nothing


@pytest.mark.parametrize("merge", [[], ["--merge-only"]], ids=["re-run", "merge-only"])
def test_a_kept_cells_summary_of_the_wrong_shape_is_cleaned_not_a_traceback(
    sweep: Path, merge: list[str]
) -> None:
    """A kept cell's summary.json is the cell's word: fields of the wrong type are dropped
    (shown empty), as the report drops them, and the sweep's own files are still written."""
    path = sweep / CELL / "none" / "summary.json"
    summary = json.loads(path.read_text())
    path.write_text(json.dumps({**summary, "spikes": [1], "lockin": "x", "pollution": 5,
                                "final_eval_loss": [1, 2], "min_loss": {"a": 1}}))  # fmt: skip
    code, output = _run(*SWEEP, *merge, "--out", str(sweep))
    assert code == 0, output
    row = pd.read_csv(sweep / "sweep.csv").set_index("clip").loc["none"]
    assert pd.isna(row["final_eval_loss"]) and pd.isna(row["min_loss"]) and pd.isna(row["lockin"])
    assert json.loads((sweep / "sweep.json").read_text())["status"] == "done"


def test_text_from_a_kept_cell_never_reaches_sweep_csv_as_a_spreadsheet_formula(
    sweep: Path,
) -> None:
    path = sweep / CELL / "none" / "summary.json"
    payload = '=cmd|" /C calc"!A0'
    summary = json.loads(path.read_text())
    path.write_text(json.dumps({**summary, "error": payload,
                                "lockin": {"verdict": "@SUM(1)"}}))  # fmt: skip
    assert _run(*SWEEP, "--out", str(sweep))[0] == 0
    row = pd.read_csv(sweep / "sweep.csv").set_index("clip").loc["none"]
    assert row["error"] == "'" + payload and row["lockin"] == "'@SUM(1)"
