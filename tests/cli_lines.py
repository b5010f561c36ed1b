"""Check ``andrea-diag ...`` command lines found in prose (docstrings, docs/, the README).

A line is checked against the real click command tree that typer builds from the CLI: the
command must exist and every flag on the line must be one of its options. Arguments and flag
values are not type-checked (they are placeholders such as ``RUN_DIR`` or ``runs/x-*/``), and
``...`` stands for "the other options" and is skipped.
"""

from __future__ import annotations

import re
import shlex
from functools import cache

import typer

# at the start of a line (after an optional ``$ ``), or inside ``backticks``
CLI_LINE = re.compile(r"(?:^\s*(?:\$\s+)?|`)andrea-diag((?:\s+[^\s`#][^`#]*)?)")


@cache
def _root():  # a click Group (typer >= 0.16 vendors its own click)
    from andrea_diag.cli import app

    return typer.main.get_command(app)


def cli_lines(text: str) -> list[str]:
    """The ``andrea-diag ...`` invocations in ``text``, comments (``# ...``) cut off."""
    found = []
    for line in text.splitlines():
        m = CLI_LINE.search(line)
        if m and m.group(1).strip() and not m.group(1).strip().startswith(("version", "runs ")):
            found.append("andrea-diag" + m.group(1).rstrip().rstrip("`.,;:)"))
    return found


def problems(line: str) -> list[str]:
    """What is wrong with one ``andrea-diag CMD [ARGS]`` line; empty when it parses."""
    try:
        words = shlex.split(line)[1:]
    except ValueError as e:
        return [f"{line!r}: {e}"]
    root = _root()
    if not words or words[0].startswith("-"):
        flags = {"--help"} | {o for p in root.params for o in (*p.opts, *p.secondary_opts)}
        return [f"{line!r}: no option {w}" for w in words if w.startswith("-") and w not in flags]
    cmd = root.commands.get(words[0])
    if cmd is None:
        return [f"{line!r}: no command {words[0]!r}"]
    flags = {"--help"} | {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    bad = []
    for w in words[1:]:
        if w.startswith("-") and w != "-" and not re.fullmatch(r"-\d[\d.e-]*", w):
            name = w.split("=", 1)[0]
            if name not in flags:
                bad.append(f"{line!r}: {words[0]} has no option {name}")
    return bad
