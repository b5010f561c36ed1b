"""The CLI's contract with users: help that explains, one-line errors, non-zero exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from andrea_diag import __version__
from andrea_diag.cli import app
from andrea_diag.errors import UserError

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, list(args))


def test_no_arguments_prints_help_listing_the_commands() -> None:
    res = _run()
    for cmd in ("cascade", "train", "report"):
        assert cmd in res.output


def test_version_flag() -> None:
    res = _run("--version")
    assert res.exit_code == 0 and __version__ in res.output


def test_cascade_help_explains_the_stress_knobs() -> None:
    res = _run("cascade", "--help")
    assert res.exit_code == 0
    for opt in (
        "--size",
        "--clip",
        "--max-norm",
        "--lr",
        "--steps",
        "--recipe",
        "--seed",
        "--device",
        "--out",
        "--source",
        "--inject",
        "--boundary-k",
        "--shadow",
    ):
        assert opt in res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["cascade", "--size", "7b"], "unknown size"),
        (["cascade", "--clip", "none,sometimes"], "unknown clip mode"),
        (["cascade", "--clip", "none,none"], "twice"),
        (["cascade", "--lr", "-0.1"], "--lr must be a positive"),
        (["cascade", "--max-norm", "0"], "--max-norm must be a positive"),
        (["cascade", "--steps", "0"], "--steps must be at least 1"),
        (["cascade", "--recipe", "v9"], "unknown recipe"),
        (["cascade", "--inject", "meteor@3"], "bad --inject"),
        (["cascade", "--steps", "5", "--inject", "outlier@99"], "outside 1..5"),
        (["cascade", "--source", "wikipedia=/tmp"], "wikipedia"),
        (["cascade", "--source", "gutenberg=/no/such/path"], "/no/such/path"),
        (["cascade", "--source", "gutenberg"], "NAME=PATH"),
        (["train", "--clip", "sometimes"], "unknown clip mode"),
        (["train", "--clip", "none,global"], "train runs one arm"),
        # --device cpu: on a GPU host the default device is CUDA, whose --nproc cap is the GPU count
        (
            ["train", "--nproc", "1000", "--device", "cpu"],
            "more CPU worker processes than this machine runs",
        ),
        (
            ["cascade", "--nproc", "1000", "--device", "cpu"],
            "more CPU worker processes than this machine runs",
        ),
        (["cascade", "--boundary-k", "-1"], "--boundary-k must be 0 or more"),
        (["cascade", "--update-stats-every", "0"], "--update-stats-every must be at least 1"),
        (["train", "--update-stats-every", "0"], "--update-stats-every must be at least 1"),
        (["report", "/no/such/run"], "does not exist"),
    ],
)
def test_bad_input_gives_one_clear_line_and_nonzero_exit(args: list[str], message: str) -> None:
    res = _run(*args)
    assert res.exit_code != 0
    assert message in res.output
    assert "Traceback" not in res.output
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_device_cuda_without_gpu_is_a_clear_error(tmp_path: Path) -> None:
    res = _run("cascade", "--device", "cuda", "--steps", "2", "--out", str(tmp_path / "o"))
    assert res.exit_code != 0 and "no CUDA device" in res.output


def test_report_of_a_directory_that_is_not_a_run_is_a_clear_error(tmp_path: Path) -> None:
    res = _run("report", str(tmp_path))
    assert res.exit_code != 0 and "not a run directory" in res.output


def test_existing_output_directory_is_never_overwritten(tmp_path: Path) -> None:
    keep = tmp_path / "out" / "precious.txt"
    keep.parent.mkdir()
    keep.write_text("recorded earlier")
    res = _run("cascade", "--steps", "2", "--out", str(keep.parent))
    assert res.exit_code != 0 and "not empty" in res.output
    assert keep.read_text() == "recorded earlier"


def test_empty_source_folder_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _run(
        "cascade", "--steps", "2", "--source", f"gutenberg={empty}", "--out", str(tmp_path / "o")
    )
    assert res.exit_code != 0 and "Traceback" not in res.output


def test_output_path_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    res = _run("cascade", "--steps", "2", "--out", str(f))
    assert res.exit_code != 0 and "is a file" in res.output and "Traceback" not in res.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_clipper_on_a_cpu_run_fails_before_any_output(tmp_path: Path) -> None:
    out = tmp_path / "o"
    res = _run("cascade", "--steps", "2", "--clip-impl", "cuda", "--out", str(out))
    assert res.exit_code != 0 and "--clip-impl cuda" in res.output
    assert not out.exists()


def test_unknown_clip_impl_is_a_clear_error() -> None:
    res = _run("cascade", "--clip-impl", "fast")
    assert res.exit_code != 0 and "unknown clip implementation" in res.output


def test_a_source_too_short_for_the_sequence_length_fails_before_any_output(
    tmp_path: Path,
) -> None:
    src = tmp_path / "tiny_src"
    src.mkdir()
    (src / "a.txt").write_text("just a few words")
    out = tmp_path / "o"
    res = _run("cascade", "--steps", "2", "--source", f"gutenberg={src}", "--out", str(out))
    assert res.exit_code != 0 and "too little text" in res.output
    assert not out.exists()


def test_non_utf8_jsonl_source_is_refused_in_one_line(tmp_path: Path) -> None:
    # issue 18: a file that is not UTF-8 text is refused, not trained on with replacements
    from andrea_diag.data.corpus import load_override

    p = tmp_path / "s.jsonl"
    p.write_bytes(b'{"text": "caf\xe9 ' + b"long enough text " * 20 + b'"}\n')
    with pytest.raises(UserError, match="is not UTF-8 text"):
        load_override("gutenberg", p)


def test_report_out_that_is_a_directory_is_a_clear_error(tmp_path: Path) -> None:
    from andrea_diag.record import Recorder

    Recorder(tmp_path / "run", {"size": "tiny"}).close()
    res = _run("report", str(tmp_path / "run"), "--out", str(tmp_path))
    assert res.exit_code != 0 and "is a directory" in res.output


def test_an_output_location_that_cannot_be_created_is_one_clear_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    # a path under a regular file cannot be created (as /proc or a read-only mount cannot)
    res = _run("cascade", "--steps", "2", "--out", str(blocker / "sub" / "run"))
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "cannot create or write the output directory" in res.output


def test_a_full_disk_during_a_run_says_what_was_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import os

    real_fsync, calls = os.fsync, {"n": 0}

    def fsync_until_full(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] > 12:  # past the run's set-up files: a checkpoint or summary write
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_until_full)  # every writer's flush to disk
    out = tmp_path / "run"
    res = _run("train", "--clip", "none", "--steps", "6", "--checkpoint-every", "2",
               "--flush-every", "1", "--out", str(out))  # fmt: skip
    said = " ".join(res.output.split())
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "no space left" in said.lower() and "rows so far are kept" in said
    rows = (out / "none" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) >= 1  # what was written before the disk filled is still there


def test_resume_of_a_run_with_a_corrupt_config_is_one_clear_line(tmp_path: Path) -> None:
    out = tmp_path / "c"
    assert _run("cascade", "--steps", "2", "--out", str(out)).exit_code == 0
    (out / "none" / "config.json").write_text('{"size": "tiny", "steps": ')  # torn
    res = _run("cascade", "--resume", str(out))
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "a run file is corrupt" in res.output


def test_resume_of_a_directory_that_is_not_a_run_is_one_clear_line(tmp_path: Path) -> None:
    res = _run("train", "--resume", str(tmp_path))
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "is not a cascade or train run directory" in res.output


@pytest.mark.parametrize(
    ("command", "advice"),
    [("export", None), ("bench-kernels", None), ("cascade", "continue with --resume DIR"),
     ("sweep", "run the same command again to continue")],
)  # fmt: skip
def test_a_signal_advises_resuming_only_where_the_command_can_continue(
    monkeypatch: pytest.MonkeyPatch, command: str, advice: str | None
) -> None:
    """SIGTERM during an export once said "continue with --resume", an option export lacks."""
    import typer

    from andrea_diag.cli import AFTER_STOP
    from andrea_diag.commands.errors import friendly_errors
    from andrea_diag.signals import Terminated

    def stopped() -> None:
        raise Terminated(15)

    one = typer.Typer()
    one.command()(friendly_errors(stopped, AFTER_STOP.get(command)))
    res = CliRunner().invoke(one, [])
    assert res.exit_code == 143
    assert "stopped by SIGTERM" in res.output
    if advice is None:
        assert "resume" not in res.output and "again" not in res.output
    else:
        assert advice in res.output
