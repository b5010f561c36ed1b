"""Turn user-caused errors into one clear line and a non-zero exit code, never a traceback."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from andrea_diag.errors import UserError

F = TypeVar("F", bound=Callable[..., Any])
err_console = Console(stderr=True)


def one_line(e: UserError) -> None:
    """Print ``error: <message>`` (and ``hint: ...``) on stderr."""
    # escaped: a message may hold brackets (pip extras, paths) that are not markup
    err_console.print(f"[bold red]error:[/] {escape(e.message)}", highlight=False, soft_wrap=True)
    if e.hint:
        err_console.print(f"[dim]hint:[/] {escape(e.hint)}", highlight=False, soft_wrap=True)


def friendly_errors(fn: F) -> F:
    """Decorator for typer commands: UserError -> ``error: ...`` (+ hint) and exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            one_line(e)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]: everything recorded so far is kept")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]
