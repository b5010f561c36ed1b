"""User-facing errors: anything a user can cause ends as one clear line, never a traceback.

Library code raises :class:`UserError` (or a subclass) for bad options, missing paths, empty
corpora and absent hardware; the CLI catches it, prints ``error: <message>`` plus an optional
hint, and exits non-zero.

A message or hint may quote a name read from someone else's run dir (an arm, a cell, a path),
so :func:`visible` shows every control character in it as an escape (``\\x1b``): printed raw,
an ESC would drive the user's terminal (set its title, clear the line that said "error:").
"""

from __future__ import annotations

import re

# C0 (newline and tab included: the error is one line), DEL and C1 (0x9b is a one-byte CSI)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every C0, DEL and C1 control character as a visible ``\\xNN`` escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class UserError(Exception):
    """An error the user can fix: bad input, missing file, no GPU, no compiler."""

    def __init__(self, message: str, hint: str | None = None, exit_code: int = 2) -> None:
        # escaped here, not only where the CLI prints it: every other reader of a UserError
        # (a sweep's "page not rendered" line, a resume warning) shows the same safe text
        message = visible(str(message))
        super().__init__(message)
        self.message = message
        self.hint = visible(str(hint)) if hint else hint
        self.exit_code = exit_code


class CellsCrashed(UserError):
    """Some cells of a sweep crashed and every other cell finished: the sweep's tables and
    ``sweep.json`` were written, so its page can still show them (any other UserError of a
    sweep is a refusal before or between cells, with no new table to show)."""


def capture_refused(what: str, exc: BaseException) -> UserError:
    """The one line for a CUDA graph torch refused to capture (``--cuda-graph``): ``what`` could
    not be captured, the first line of torch's reason, and the way out."""
    return UserError(
        f"--cuda-graph: {what} cannot be captured as a CUDA graph "
        f"({str(exc).splitlines()[0][:200]})",
        hint="run it with --no-cuda-graph",
    )
