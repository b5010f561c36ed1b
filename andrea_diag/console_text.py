"""Names read from a run directory, made safe to print through rich: the one choke point.

    from andrea_diag.console_text import shown

    console.print(f"[bold green]report:[/] {shown(path)}")   # the name prints literally

A run directory is untrusted input (``rundir``): a folder, a cell or an arm may be named
``[red]x`` or ``[link=https://evil.example]x``, which rich would read as its own markup, or hold
an ESC (``\\x1b[2J``), which the terminal would obey. :func:`shown` is
:func:`~andrea_diag.errors.visible` (control characters as ``\\xNN``, as an error line shows
them) and then :func:`rich.markup.escape`, in that order: the escapes ``visible`` adds are
plain text that ``escape`` leaves alone.
"""

from __future__ import annotations

from rich.markup import escape

from andrea_diag.errors import visible


def shown(value: object) -> str:
    """``str(value)`` as literal console text: control characters escaped, rich markup too."""
    return escape(visible(str(value)))
