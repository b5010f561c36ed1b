"""Bad input refused in one line before anything is written: numbers int() reads only by its own
extensions, repeated or meaningless options, empty values, paths that cannot be what was meant
(review of the CLI's bad input, round 20)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from cli_refusals import empty_fixture, no_work_started, refused, runner  # noqa: F401 (empty)

from andrea_diag.cli import app

# ---- 1. numbers in ASCII digits only ----


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["train", "--inject", "outlier@²"], "--inject"),  # isdigit() but not int(): a traceback
        (["train", "--inject", "outlier@٤"], "--inject"),  # both: silently update 4
        (["train", "--seed", "1_0"], "--seed"),
        (["cascade", "--steps", "1_000"], "--steps"),
        (["train", "--lr", "1_0e-3"], "--lr"),
        (["sweep", "--seed", "0,1_0"], "--seed"),
        (["sweep", "--lr", "1e-3,1_0e-3"], "--lr"),
        (["sweep", "--jobs", "٤"], "--jobs"),
        (["ladder", "--jobs", "1_0"], "--jobs"),
        (["accum-check", "--seed", "1_0"], "--seed"),
        (["bench-kernels", "--reps", "1_0"], "--reps"),
        (["bench-train", "--updates", "1_0"], "--updates"),
    ],
)
def test_a_number_int_reads_only_by_its_own_extensions_is_one_line(
    args: list[str], flag: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    assert flag in refused(args, monkeypatch, empty)


# ---- 2. one injection per update ----


@pytest.mark.parametrize(
    "injects",
    [["outlier@5", "nonfinite@5"], ["outlier@5", "outlier@5"]],
)
def test_two_injections_at_one_update_are_refused_naming_the_update(
    injects: list[str], monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    args = ["train", "--steps", "10"] + [a for i in injects for a in ("--inject", i)]
    line = refused(args, monkeypatch, empty)
    assert "update 5 twice" in line


# ---- 3, 4: values refused at parse time, before the run's folder ----


@pytest.mark.parametrize("value", ["nan", "NaN", "-nan"])
def test_a_non_finite_mixer_sharpness_is_refused_before_the_out_folder(
    value: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    args = ["train", "--mixer-sharpness", value, "--out", "o"]
    assert "--mixer-sharpness must be a finite number" in refused(args, monkeypatch, empty)


def test_a_micro_batch_past_the_token_cap_is_refused_before_the_out_folder(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused(["train", "--micro-batch", "1048576", "--out", "o"], monkeypatch, empty)
    assert "--micro-batch 1048576" in line and "tokens" in line


# ---- 5. empty values and control characters ----


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["train", "--out", ""], "--out"),
        (["cascade", "--out", ""], "--out"),
        (["sweep", "--out", ""], "--out"),
        (["ladder", "--out", ""], "--out"),
        (["bench-train", "--out", ""], "--out"),
        (["bench-kernels", "--out", ""], "--out"),
        (["accum-check", "--out", ""], "--out"),
        (["train", "--resume", ""], "--resume"),
        (["train", "--model", ""], "--model"),
        (["train", "--data", ""], "--data"),
        (["train", "--hf-config", ""], "--hf-config"),
        (["bench-train", "--size", ""], "--size"),
        (["bench-kernels", "--sizes", ""], "--sizes"),
        (["train", "--out", "  "], "--out"),
    ],
)
def test_an_empty_value_is_one_line_not_the_current_folder_or_a_default(
    args: list[str], flag: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused(args, monkeypatch, empty)
    assert f"{flag} is empty" in line


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["train", "--out", "runs/a\nb"], "--out"),
        (["train", "--resume", "run\x1b[2J"], "--resume"),
        (["sweep", "--out", "x\ty"], "--out"),
        (["bench-kernels", "--out", "a\rb"], "--out"),
        (["bench-train", "--out", "a\x07"], "--out"),
        (["accum-check", "--out", "a\x9bb"], "--out"),
    ],
)
def test_an_out_or_resume_path_with_control_characters_isrefused(
    args: list[str], flag: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused(args, monkeypatch, empty)
    assert flag in line and "control characters" in line
    assert "\x1b" not in line and "\x9b" not in line  # shown escaped


# ---- 6. a path that is there but not what was meant ----


def test_hf_config_that_exists_but_is_not_a_regular_file_says_so(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused(["train", "--hf-config", os.devnull], monkeypatch, empty)
    assert "is not a regular file" in line and "does not exist" not in line


@pytest.mark.parametrize(
    "command",
    [["train"], ["sweep"], ["bench-kernels"], ["bench-train"], ["accum-check"]],
)
def test_an_out_that_is_a_dangling_symlink_says_so(
    command: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, empty: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    line = refused([*command, "--out", str(link)], monkeypatch, empty)
    assert "dangling symbolic link" in line
    assert not (tmp_path / "gone").exists()


def test_an_out_below_a_dangling_symlink_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, empty: Path
) -> None:
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    line = refused(["train", "--out", str(tmp_path / "link" / "run")], monkeypatch, empty)
    assert "dangling symbolic link" in line


# ---- 7. a merge with nothing to merge ----


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "--size", "tiny", "--lr", "1e-3"],
        ["ladder", "--size", "tiny,tiny2", "--seed", "0"],
    ],
)
def test_merge_only_with_no_finished_cell_is_refused_with_no_page(
    args: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def no_training(*a: Any, **k: Any) -> None:
        raise AssertionError("a cell trained")

    monkeypatch.setattr("andrea_diag.experiments.sweep.run_cascade", no_training)
    out = tmp_path / "merged"
    res = runner.invoke(
        app, [*args, "--steps", "2", "--device", "cpu", "--merge-only", "--out", str(out)]
    )
    assert res.exit_code != 0, res.output
    assert "nothing to merge" in res.output and "Traceback" not in res.output
    assert not out.exists()


# ---- 8. bench-kernels' lists ----


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--sizes", "tiny,tiny"], "--sizes"),
        (["--dtypes", "fp32,fp32"], "--dtypes"),
        (["--cases", "clip,clip"], "--cases"),
    ],
)
def test_bench_kernels_refuses_a_value_listed_twice(
    args: list[str], flag: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused(["bench-kernels", "--device", "cpu", *args], monkeypatch, empty)
    assert flag in line and "twice" in line


# ---- 9. options that have no effect in the combination typed ----


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["train", "--mixer", "exp3", "--mixer-sharpness", "2"], "--mixer-sharpness"),
        (["train", "--clip", "none", "--max-norm", "2"], "--max-norm"),
        (["train", "--clip", "zclip", "--max-norm", "2"], "--max-norm"),
        (["cascade", "--clip", "none,agc", "--max-norm", "2"], "--max-norm"),
        (["sweep", "--clip", "none,zclip", "--max-norm", "1,2"], "--max-norm"),
        (["ladder", "--clip", "none,skip", "--max-norm", "2"], "--max-norm"),
        (["sweep", "--device", "cpu", "--mps", "on"], "--mps on"),
        (["ladder", "--device", "cpu", "--mps", "on"], "--mps on"),
        (["sweep", "--slurm-partition", "gpu"], "--slurm-partition"),
        (["sweep", "--slurm-gpus", "2"], "--slurm-gpus"),
        (["sweep", "--slurm-time", "10"], "--slurm-time"),
        (
            ["sweep", "--executor", "submitit-local", "--slurm-partition", "gpu"],
            "--slurm-partition",
        ),
        (["sweep", "--executor", "slurm", "--mps", "on"], "--mps on"),
    ],
)
def test_an_option_that_has_no_effect_with_another_isrefused(
    args: list[str], words: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused(args, monkeypatch, empty)
    assert words in line


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--mixer", "seeded", "--mixer-sharpness", "2", "--seed", "7"],
        ["train", "--mixer", "exp3"],  # the preset's own sharpness is not typed
        ["train", "--clip", "global", "--max-norm", "2", "--inject", "outlier@3", "--steps", "9"],
        ["cascade", "--clip", "none,per-tensor", "--max-norm", "2", "--lr", "1e-3"],
        ["cascade", "--clip", "none,zclip"],  # --max-norm's default is not typed
        ["train", "--micro-batch", "64"],
        # an adaptive mode's parameter with its arm (s24: without one it is refused)
        ["cascade", "--clip", "none,zclip", "--zclip-z", "3"],
        ["train", "--clip", "spam", "--spam-theta", "3", "--spam-reset", "400"],
        ["cascade", "--clip", "none,agc,skip", "--agc-lambda", "0.02", "--skip-z", "4"],
    ],
)
def test_a_meaningful_combination_still_reaches_training(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def fake_run(spec: Any, console: Any) -> None:
        seen["spec"] = spec
        raise SystemExit(0)

    monkeypatch.setattr("andrea_diag.commands.run.run_cascade", fake_run)
    res = runner.invoke(app, args)
    assert "spec" in seen, res.output


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "--clip", "none,zclip"],
        ["sweep", "--executor", "slurm", "--slurm-partition", "gpu", "--slurm-gpus", "2"],
        ["sweep", "--executor", "submitit-local", "--slurm-time", "10"],
        ["sweep", "--device", "cpu", "--mps", "off", "--seed", "0,1"],
    ],
)
def test_a_meaningful_sweep_combination_still_reaches_the_sweep(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def fake_sweep(spec: Any, *a: Any) -> None:
        seen["spec"] = spec
        raise SystemExit(0)

    monkeypatch.setattr("andrea_diag.experiments.sweep.run_sweep", fake_sweep)
    monkeypatch.setattr("andrea_diag.experiments.executor_config.check_submitit", lambda kind: None)
    res = runner.invoke(app, args)
    assert "spec" in seen, res.output


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["train", "--seed", "9" * 5000], "--seed"),  # past int()'s own 4300-digit limit
        (["sweep", "--seed", "0," + "9" * 5000], "--seed"),
        (["sweep", "--jobs", "9" * 5000], "--jobs"),
    ],
)
def test_a_number_past_ints_digit_limit_is_still_one_line(
    args: list[str], flag: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused(args, monkeypatch, empty)
    assert flag in line and len(line) < 200
