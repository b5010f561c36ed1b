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
