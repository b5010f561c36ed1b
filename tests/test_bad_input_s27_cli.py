"""Command-line input refused in one line, or shown as typed (round 27, from a bad-input audit):

- A positive number option past float32's range went into the run as it was: ``--lr 1e38`` and
  ``--agc-eps 1e39`` ended mid-run in torch's "value cannot be converted to type float without
  overflow" traceback, after the run's folder was made; ``--max-norm 1e-320`` (0 in float32,
  the value ``--max-norm 0`` refuses) zeroed every gradient without a word. Each positive option
  is now from 1e-30 to 1e30 (``fields.POSITIVE_RANGE``), refused before any folder.
- A name holding a rich emoji code printed as another name: ``--model a:b:c`` was quoted back as
  ``'a🅱c'``, ``--out runs/x:fire:y`` as ``runs/x🔥y`` in its "run directory" line. Every console
  of the toolkit is now ``console_text.make_console``'s, with the codes off.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_refusals import empty_fixture, refused  # noqa: F401 (empty)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("args", "words"),
    [(["cascade", "--lr", "1e38"], "--lr must be from 1e-30 to 1e+30, got 1e+38"),
     (["cascade", "--clip", "agc", "--agc-eps", "1e39"], "--agc-eps must be from 1e-30 to 1e+30"),
     (["train", "--max-norm", "1e-320"], "--max-norm must be from 1e-30 to 1e+30, got 1e-320"),
     (["cascade", "--spike-z", "1e-320"], "--spike-z must be from 1e-30 to 1e+30"),
     (["sweep", "--lr", "1e-3,1e31"], "--lr must be from 1e-30 to 1e+30, got 1e+31"),
     (["ladder", "--max-norm", "1,1e-40"], "--max-norm must be from 1e-30 to 1e+30")],
    ids=["lr-overflows", "agc-eps-overflows", "max-norm-is-0-in-float32", "spike-z-tiny",
         "sweep-lr-list", "ladder-max-norm-list"],
)  # fmt: skip
def test_a_positive_option_past_float32s_range_is_one_line_before_any_work(
    args: list[str], words: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused([*args, "--steps", "2", "--out", "out"], monkeypatch, empty)
    assert words in line, line


@pytest.mark.parametrize(
    "args",
    [["cascade", "--steps", "2", "--clip", "a:b:c"], ["report", "no:smile:such"]],
    ids=["clip-mode", "report-path"],
)
def test_an_error_line_quotes_a_value_with_an_emoji_code_as_typed(
    args: list[str], monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused(args, monkeypatch, empty)
    typed = args[-1]
    assert typed in line and "\U0001f171" not in line and "\U0001f604" not in line, line


def test_an_error_line_of_a_fresh_process_quotes_an_emoji_code_as_typed(tmp_path: Path) -> None:
    """The error console of ``python -m andrea_diag.cli`` itself, in its own process (the
    in-process runner above shares the test's consoles)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "andrea_diag.cli", "report",
                          str(tmp_path / "x:fire:y")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    said = res.stderr.replace("\n", "")  # rich wraps a long path at the pipe's 80 columns
    assert res.returncode != 0 and "Traceback" not in said, res.stderr
    assert "x:fire:y does not exist" in said and "\U0001f525" not in said, said


@pytest.mark.slow
def test_the_run_directory_line_of_a_cascade_prints_its_out_folder_as_typed(
    tmp_path: Path,
) -> None:
    out = tmp_path / "exp:fire:1"
    args = ["cascade", "--steps", "2", "--clip", "none", "--device", "cpu", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "andrea_diag.cli", *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    said = res.stderr.replace("\n", "")  # rich wraps a long path at the pipe's 80 columns
    assert f"run directory: {out}" in said and "\U0001f525" not in said, res.stderr
