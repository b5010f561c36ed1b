"""Command-line input refused in one line (round 26, from a bad-input audit):

- ``sweep`` or ``ladder`` started under a launcher (``WORLD_SIZE`` above 1: torchrun, or the
  environment of an ``--nproc`` replica) printed its first cell, then waited forever for a
  rendezvous no other rank would join, with the cell's folder made. Each cell starts its own
  processes: it is one line now, before any folder.
- ``export --tensorboard --project P`` and ``export --mlflow STORE --out DIR`` exited 0 with the
  option dropped without a word.
- ``report --title "   "`` made an empty heading, and a pasted newline or ESC went into the
  page as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_refusals import empty_fixture, refused  # noqa: F401 (empty)
from hostile_dirs import one_line_error, run_fixture  # noqa: F401 (run)

ROOT = Path(__file__).resolve().parent.parent
LAUNCHED = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}


@pytest.mark.parametrize("command", ["sweep", "ladder"])
def test_a_sweep_or_ladder_under_a_launcher_is_one_line_before_any_folder(
    command: str, tmp_path: Path
) -> None:
    """In a fresh process with a timeout: on the old code this hung (killed at 120 s here)."""
    out = tmp_path / "out"
    args = [command, "--steps", "2", "--seed", "0", "--out", str(out)]
    if command == "sweep":
        args += ["--lr", "1e-3"]
    env = {**os.environ, **LAUNCHED, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "andrea_diag.cli", *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 2, res.stderr[-2000:]
    assert "runs as one process, not under a launcher (WORLD_SIZE=2)" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not any(tmp_path.iterdir())  # no --out, no runs/


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--tensorboard", "--project", "mine"], "--project is not used by --tensorboard"),
     (["--mlflow", "store", "--out", "tb"], "--out is not used by --mlflow")],
    ids=["project-tensorboard", "out-mlflow"],
)  # fmt: skip
def test_an_export_option_no_chosen_format_reads_is_refused(
    args: list[str], words: str, monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    line = refused(["export", *args, "some-run"], monkeypatch, empty)
    assert words in line, line


@pytest.mark.parametrize(
    ("title", "words"),
    [("   ", "--title is empty"), ("a\nb", "holds control characters"),
     ("red\x1b[31m", "holds control characters")],
    ids=["blank", "newline", "escape"],
)  # fmt: skip
def test_a_blank_title_or_one_with_control_characters_is_refused(
    title: str, words: str, run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "page.html"
    said = one_line_error("report", str(run), "--out", str(out), "--title", title)
    assert words in said and not out.exists(), said


def test_a_plain_title_with_letters_beyond_ascii_still_makes_the_page(
    run: Path, tmp_path: Path
) -> None:
    from hostile_dirs import cli

    out = tmp_path / "page.html"
    code, said = cli("report", str(run), "--out", str(out), "--title", "Résumé: 12m ✓")
    assert code == 0, said
    assert "Résumé: 12m ✓" in out.read_text(encoding="utf-8")
