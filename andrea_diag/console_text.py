"""Names read from a run directory, made safe to print through rich: the one choke point.

    from andrea_diag.console_text import shown

    console.print(f"[bold green]report:[/] {shown(path)}")   # the name prints literally

A run directory is untrusted input (``rundir``): a folder, a cell or an arm may be named
``[red]x`` or ``[link=https://evil.example]x``, which rich would read as its own markup, or hold
an ESC (``\\x1b[2J``), which the terminal would obey. :func:`shown` is
:func:`~andrea_diag.errors.visible` (control characters as ``\\xNN``, as an error line shows
them) and then :func:`rich.markup.escape`, in that order: the escapes ``visible`` adds are
plain text that ``escape`` leaves alone.

Every console of the toolkit is :func:`make_console`'s: rich's emoji codes off. With them on, a
name holding ``:fire:`` or ``:b:`` (a folder ``runs/exp:fire:1``, the spec ``a:b:c``) printed as
another name, 🔥 or 🅱 where the colons were, in the very line meant to say what was typed; no
escape of rich's own turns a code back into text, and no message of the toolkit means one.

    console = make_console(stderr=True)
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from andrea_diag.errors import visible


def shown(value: object) -> str:
    """``str(value)`` as literal console text: control characters escaped, rich markup too."""
    return escape(visible(str(value)))


def make_console(**options: Any) -> Console:
    """A rich ``Console`` (``options``: its keywords) that prints ``:name:`` as typed."""
    return Console(emoji=False, **options)
