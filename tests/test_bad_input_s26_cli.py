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


@pytest.mark.parametrize(
    "title",
    ["Résumé: 12m ✓", "گزارش\u200cها", "\U0001f469\u200d\U0001f4bb run 3", "hy\u00adphen"],
    ids=["accents", "zwnj-persian", "zwj-emoji", "soft-hyphen"],
)
def test_a_plain_title_with_letters_beyond_ascii_still_makes_the_page(
    title: str, run: Path, tmp_path: Path
) -> None:
    """Zero-width (non-)joiners and the soft hyphen are text (found by review: the first check
    refused every Unicode format character, these with them)."""
    from hostile_dirs import cli

    out = tmp_path / "page.html"
    code, said = cli("report", str(run), "--out", str(out), "--title", title)
    assert code == 0, said
    assert title in out.read_text(encoding="utf-8")


@pytest.mark.parametrize("title", ["a\u2028b", "x\u202egpj.html", "a\u200bb"],
                         ids=["line-separator", "bidi-override", "zero-width-space"])  # fmt: skip
def test_a_title_with_a_separator_or_bidi_override_is_still_refused(
    title: str, run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "page.html"
    said = one_line_error("report", str(run), "--out", str(out), "--title", title)
    assert "holds control characters" in said and not out.exists(), said


def test_an_out_folder_or_project_with_a_zero_width_non_joiner_is_taken(tmp_path: Path) -> None:
    from andrea_diag.errors import unsafe
    from andrea_diag.given_checks import check_project
    from andrea_diag.rundir import check_component

    name = "گزارش\u200cها"
    assert not unsafe(name) and check_component(name, "--out") == name
    check_project(name, wandb=False)  # an MLflow experiment of that name: no refusal
