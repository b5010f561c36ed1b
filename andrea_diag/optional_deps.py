"""The optional extras (wandb, mlflow, tensorboardX, submitit), imported when a command needs
one: absent, or installed but broken, each is one :class:`~andrea_diag.errors.UserError` line.

    wandb = optional_module("wandb", missing="this sink needs wandb",
                            hint="pip install 'andrea-diag[wandb]'")

Why a module of its own: a broken install (a protobuf too new for the installed wandb raises
``TypeError: Descriptors cannot be created directly``; a dependency of mlflow missing) raised
something other than "not installed", and every caller caught only ``ImportError`` of the
package itself, so the command ended in a traceback instead of a line that names the package.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from andrea_diag.errors import UserError


def _top(name: str) -> str:
    return name.partition(".")[0]


def not_installed(exc: BaseException, name: str) -> bool:
    """``exc`` (raised importing ``name``) says the package itself is absent, not broken."""
    return isinstance(exc, ModuleNotFoundError) and _top(exc.name or "") == _top(name)


def broken_install(name: str, exc: BaseException) -> UserError:
    """The one line for a package that is there but fails to import (its own first line)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    said = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return UserError(
        f"{_top(name)} is installed but fails to import ({said})"[:300],
        hint=f"repair it (pip install --force-reinstall {_top(name)}, and check the versions "
        "of what it needs, e.g. protobuf), or uninstall it",
    )


def optional_module(name: str, *, missing: str, hint: str) -> ModuleType:
    """``importlib.import_module(name)``; absent: ``UserError(missing, hint=hint)``; there but
    failing to import (any exception from its own code): :func:`broken_install`'s line."""
    try:
        return importlib.import_module(name)
    except Exception as exc:  # a broken package can raise anything while it imports
        if not_installed(exc, name):
            raise UserError(missing, hint=hint) from None
        raise broken_install(name, exc) from None
