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

A library caller's own ``Console`` (``run_cascade(spec, console)``) may have the codes on, as
rich's default has: :func:`as_typed` is that console printing the toolkit's lines with them
off, everything else (its file, width, recording, quiet, live display) its own, and the
caller's console itself left as it was.

    console = as_typed(console, stderr=True)   # the caller's, or make_console's when None
"""

from __future__ import annotations

import shlex
from typing import Any, cast

from rich.console import Console
from rich.markup import escape

from andrea_diag.errors import visible


def shown(value: object) -> str:
    """``str(value)`` as literal console text: control characters escaped, rich markup too."""
    return escape(visible(str(value)))


def shell_word(value: object) -> str:
    """``value`` as one word of a command the user may paste: quoted as the shell needs it
    (a space, a ``$``), and a relative name that starts with ``-`` as ``./-name``, so the
    command does not read it as an option. Console-safe too (:func:`shown`).

    >>> shell_word("-tb"), shell_word("my runs/a"), shell_word("/abs/-x")
    ('./-tb', "'my runs/a'", '/abs/-x')
    """
    text = str(value)
    if text.startswith("-"):
        text = "./" + text
    return shown(shlex.quote(text))


def make_console(**options: Any) -> Console:
    """A rich ``Console`` (``options``: its keywords) that prints ``:name:`` as typed."""
    return Console(emoji=False, **options)


class _AsTyped:
    """A caller's ``Console`` whose ``print`` and ``log`` take ``emoji=False`` unless told
    otherwise; every other attribute, the context manager and attribute writes are the
    console's own (rich's ``Live`` and ``Progress`` drive it through them)."""

    def __init__(self, console: Console) -> None:
        object.__setattr__(self, "_console", console)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._console, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._console, name, value)  # ``console.quiet = ...`` reaches the console

    def __enter__(self) -> _AsTyped:
        self._console.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._console.__exit__(*exc)

    def print(self, *objects: Any, emoji: bool | None = False, **options: Any) -> None:
        self._console.print(*objects, emoji=emoji, **options)

    def log(self, *objects: Any, emoji: bool | None = False, **options: Any) -> None:
        # one frame further up: the line logged is the caller's, not this method's
        offset = options.pop("_stack_offset", 1) + 1
        self._console.log(*objects, emoji=emoji, _stack_offset=offset, **options)


def as_typed(console: Console | None, **options: Any) -> Console:
    """``console`` (a library caller's) printing ``:name:`` as typed, the caller's own object
    untouched; ``make_console(**options)`` when it is None."""
    if console is None:
        return make_console(**options)
    if isinstance(console, _AsTyped):
        return cast(Console, console)
    return cast(Console, _AsTyped(console))
