"""User-facing errors: anything a user can cause ends as one clear line, never a traceback.

Library code raises :class:`UserError` (or a subclass) for bad options, missing paths, empty
corpora and absent hardware; the CLI catches it, prints ``error: <message>`` plus an optional
hint, and exits non-zero.
"""

from __future__ import annotations


class UserError(Exception):
    """An error the user can fix: bad input, missing file, no GPU, no compiler."""

    def __init__(self, message: str, hint: str | None = None, exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code
