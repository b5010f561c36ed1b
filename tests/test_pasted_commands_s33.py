"""The follow-up commands the CLI prints (``report``'s comparison, ``export``'s viewers) work
when pasted: a run named ``-tb`` or holding a space was printed bare, so the shell split it or
the tool read it as an option (session 33's audit).

    pytest tests/test_pasted_commands_s33.py -q
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.console_text import shell_word

runner = CliRunner()


@pytest.mark.parametrize(
    ("given", "word"),
    [("-tb", "./-tb"), ("a b", "'a b'"), ("/abs/-x", "/abs/-x"), ("$HOME", "'$HOME'")],
)
def test_a_pasted_word_is_one_argument_and_never_an_option(given: str, word: str) -> None:
    assert shell_word(given) == word
    (arg,) = shlex.split(shell_word(given))
    assert not arg.startswith("-") and os.path.normpath(arg) == os.path.normpath(given)


def test_the_comparison_command_names_each_run_as_given(
    tmp_path: Path, make_run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("-lead", "with space"):
        make_run(tmp_path / name)
    res = runner.invoke(app, ["report", "--", "-lead", "with space"], terminal_width=400)
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if "one page comparing them:" in ln)
    command = shlex.split(line.split("one page comparing them: ", 1)[1])
    assert command == ["andrea-diag", "report", "./-lead", "with space", "--out", "compare.html"]


def test_the_tensorboard_view_line_pastes(tmp_path: Path, make_run, monkeypatch) -> None:
    pytest.importorskip("tensorboardX")
    monkeypatch.chdir(tmp_path)
    make_run(tmp_path / "r")
    res = runner.invoke(app, ["export", "r", "--tensorboard", "--out", "-tb x"],
                        terminal_width=400)  # fmt: skip
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("view: "))
    assert shlex.split(line[len("view: ") :]) == ["tensorboard", "--logdir", "./-tb x"]
