"""Every ``andrea-diag ...`` line in README.md and docs/ is a real command with real options.

Convention (README.md says it too): a command line that ends in ``# GPU`` needs a GPU or hours of
CPU. Every line, GPU or not, must name an existing command and only existing options
(``tests/cli_lines.py``); every other line is also handed to the CLI with ``--help`` appended,
so click parses it for real (the command and each flag it is given). Lines are taken from
fenced ``bash`` blocks and from inline ``code``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from cli_lines import cli_lines, problems
from typer.testing import CliRunner

from andrea_diag.cli import app

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GPU = re.compile(r"#\s*GPU\b")


def _lines(page: Path) -> list[tuple[str, bool]]:
    """(command line, GPU-only) for every ``andrea-diag`` line of the page."""
    out, fence = [], None
    for raw in page.read_text().splitlines():
        if raw.lstrip().startswith("```"):
            fence = None if fence is not None else raw.strip("` ")
            continue
        gpu = bool(GPU.search(raw))
        if fence in ("bash", "sh", "console"):
            out += [(line, gpu) for line in cli_lines(raw)]
        elif fence is None:  # prose: inline ``code`` only
            for span in re.findall(r"`([^`]+)`", raw):
                out += [(line, gpu) for line in cli_lines(span)]
    return out


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in readme, page.name
    assert len(readme.encode()) < 8 * 1024


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_line_names_real_commands_and_options(page: Path) -> None:
    lines = _lines(page)
    assert not [p for line, _ in lines for p in problems(line)]


def _prose_flags(page: Path) -> set[str]:
    """``--flags`` named in inline code outside fenced blocks (``--eval-every N``)."""
    out, fenced = set(), False
    for raw in page.read_text().splitlines():
        if raw.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            for span in re.findall(r"`([^`]+)`", raw):
                if span.startswith(("pip ", "python", "pytest")):
                    continue  # another program's flags
                out |= set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", span))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_flag_named_in_the_prose_is_an_option_of_some_command(page: Path) -> None:
    root = typer.main.get_command(app)
    flags = {
        o for c in root.commands.values() for p in c.params for o in (*p.opts, *p.secondary_opts)
    }
    assert _prose_flags(page) - flags - {"--help"} == set()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_cpu_command_line_parses_with_help(page: Path) -> None:
    runner = CliRunner()
    for line, gpu in _lines(page):
        words = [w for w in shlex.split(line)[1:] if w != "..."]
        if gpu or not words:
            continue
        res = runner.invoke(app, [*words, "--help"])
        assert res.exit_code == 0, (line, res.output)
