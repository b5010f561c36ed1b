"""Turn user-caused errors into one clear line and a non-zero exit code, never a traceback.

Ctrl-C, SIGTERM and SIGHUP end the same way: what was recorded is kept (the trainer's crash
path flushes and writes ``partial_summary.json``, the locks are released on the way out), one
line, and the shell's code for the signal (130, 143, 129).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.markup import escape

from andrea_diag.console_text import make_console
from andrea_diag.errors import UserError, visible
from andrea_diag.signals import Terminated, stop_on_signals

F = TypeVar("F", bound=Callable[..., Any])
err_console = make_console(stderr=True)


def one_line(e: UserError) -> None:
    """Print ``error: <message>`` (and ``hint: ...``) on stderr."""
    # escaped: a message may hold brackets (pip extras, paths) that are not markup; visible():
    # UserError made it so already, again here for a message set after (rich keeps ESC)
    message = escape(visible(str(e.message)))
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    if e.hint:
        hint = escape(visible(str(e.hint)))
        err_console.print(f"[dim]hint:[/] {hint}", highlight=False, soft_wrap=True)


def friendly_errors(fn: F, after_stop: str | None = None) -> F:
    """Decorator for typer commands: UserError -> ``error: ...`` (+ hint) and exit code.

    ``after_stop``: how to go on after Ctrl-C or a signal (``continue with --resume DIR``), for
    a command that records work; None for one that has nothing to continue (an export, a
    benchmark): the stop is said, with no advice that would not work."""
    kept = "everything recorded so far is kept" + (f"; {after_stop}" if after_stop else "")

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with stop_on_signals():
                return fn(*args, **kwargs)
        except UserError as e:
            one_line(e)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt as e:
            _said_stop("[yellow]interrupted[/]", e)
            raise typer.Exit(130) from None
        except Terminated as e:
            _said_stop(f"[yellow]stopped by {e.name}[/]", e)
            raise typer.Exit(e.exit_code) from None

    def _said_stop(said: str, e: BaseException) -> None:
        if getattr(e, "nothing_written", False):  # signals.before_any_output
            said += ": nothing was written yet"
        elif after_stop:
            said += f": {kept}"
        err_console.print(said, highlight=False, soft_wrap=True)

    return wrapper  # type: ignore[return-value]
