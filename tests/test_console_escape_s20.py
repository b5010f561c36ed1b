"""Names from a run directory print literally on the console: rich markup in a folder's name is
shown, not obeyed, and an ESC is shown as ``\\x1b``, never sent to the terminal
(``andrea_diag/console_text.py``: one helper for every such line)."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import RunConfig
from andrea_diag.console_text import shown
from andrea_diag.errors import UserError, visible

HOSTILE = "[red]x[link=file:evil]y\x1b[2J"
LITERAL = "[red]x[link=file:evil]y\\x1b[2J"  # as the user must see it


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=1000, force_terminal=False, color_system=None), buf


def _assert_literal(out: str) -> None:
    assert "\x1b" not in out, out
    assert LITERAL in out, out


@pytest.mark.parametrize("text", [HOSTILE, "a\\", "[/]", "\\[bold]b", "\x9b31m c"])
def test_shown_prints_any_text_exactly_as_visible_shows_it(text: str) -> None:
    """Inside the markup of a line, as every caller uses it (a trailing backslash escapes no
    closing tag: rich's escape doubles it, and the tag after it halves it again)."""
    console, buf = _console()
    console.print(f"[bold]said:[/] [dim]{shown(text)}[/] end", highlight=False, soft_wrap=True)
    assert buf.getvalue() == f"said: {visible(text)} end\n"


def test_report_prints_a_run_folder_named_with_markup_and_an_escape_literally(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    run = make_run(tmp_path / HOSTILE, clip="none", n_updates=12)
    res = CliRunner().invoke(app, ["report", str(run)])
    assert res.exit_code == 0, res.output
    _assert_literal(res.output)
    assert f"report: {visible(str(run))}/report.html" in res.output.replace("\n", "")


def test_export_prints_a_run_folder_named_with_markup_and_an_escape_literally(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    from andrea_diag.tensorboard import writer_backend

    try:
        writer_backend()
    except UserError:
        pytest.skip("neither tensorboardX nor tensorboard is installed")
    run = make_run(tmp_path / HOSTILE / "none", clip="none", n_updates=12)
    res = CliRunner().invoke(
        app, ["export", "--tensorboard", str(run), "--out", str(tmp_path / "tb")]
    )
    assert res.exit_code == 0, res.output
    _assert_literal(res.output)


def test_a_sweep_cell_named_with_markup_and_an_escape_prints_literally(tmp_path: Path) -> None:
    from andrea_diag.experiments import executor

    job = executor.CellJob(HOSTILE, tmp_path / "cell", RunConfig(), ["none"], resume=False)
    job.cell_dir.mkdir()
    console, buf = _console()

    def launch(job: executor.CellJob, job_path: Path, gpu: str | None) -> str:
        return f"RuntimeError: {HOSTILE}"  # a crash whose message quotes the name

    folder = tmp_path / "cells"
    folder.mkdir()
    procs = executor.CellProcesses()
    assert executor._run_in_slots([job], [None], launch, folder, procs, console, None)
    out = buf.getvalue()
    _assert_literal(out)
    assert f"cell {LITERAL} started" in out and f"(RuntimeError: {LITERAL})" in out


def test_an_arm_set_aside_on_resume_names_its_folder_literally(tmp_path: Path) -> None:
    from andrea_diag.experiments import cascade

    arm = tmp_path / HOSTILE / "none"
    arm.mkdir(parents=True)
    console, buf = _console()
    cascade._set_aside(arm, console)
    _assert_literal(buf.getvalue())
    assert "none: no checkpoint yet; kept as" in buf.getvalue()


def test_unrendered_report_line_names_the_run_folder_literally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from andrea_diag.commands.pages import report_renderer_available

    monkeypatch.setitem(sys.modules, "plotly", None)  # as if not installed
    console, buf = _console()
    assert not report_renderer_available(console, tmp_path / HOSTILE)
    _assert_literal(buf.getvalue())


@pytest.mark.parametrize("command", ["cascade", "train"])
def test_the_run_folder_a_training_command_names_prints_literally(
    tmp_path: Path, command: str
) -> None:
    """An --out named with rich markup (a control character there is refused outright)."""
    out = tmp_path / "[red]x[link=file:evil]y"
    args = [command, "--size", "tiny", "--steps", "2", "--device", "cpu", "--clip", "none"]
    res = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"run directory: {out}" in res.output.replace("\n", "")
