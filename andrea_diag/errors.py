"""User-facing errors: anything a user can cause ends as one clear line, never a traceback.

Library code raises :class:`UserError` (or a subclass) for bad options, missing paths, empty
corpora and absent hardware; the CLI catches it, prints ``error: <message>`` plus an optional
hint, and exits non-zero.

A message or hint may quote a name read from someone else's run dir (an arm, a cell, a path),
so :func:`visible` shows every control character in it as an escape (``\\x1b``): printed raw,
an ESC would drive the user's terminal (set its title, clear the line that said "error:"); a
line separator or a bidi override (``\\u2028``, ``\\u202e``) would split or reorder the line.
:func:`error_text` also cuts a message or hint past :data:`MOST_SHOWN` characters to its head
and tail: a value echoed back (a 1 MB ``--out``, a config's whole field) buried its own line.
"""

from __future__ import annotations

import re
import unicodedata

# C0 (newline and tab included: the error is one line), DEL and C1 (0x9b is a one-byte CSI)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Unicode's line and paragraph separators (U+2028, U+2029: a second line) and its invisible
# format characters (a bidi override U+202E reorders the line on screen, a zero-width space
# hides in a name), and a lone surrogate ("Cs": a folder named in another encoding, read as
# "\udcff"; printed raw it is an encoding error, not a character): past ASCII, so a plain name
# costs no lookup
_INVISIBLE = ("Zl", "Zp", "Cf", "Cs")


def _unicode_escape(char: str) -> str:
    if unicodedata.category(char) not in _INVISIBLE:
        return char
    return f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"


# What no name, title or project may hold (refused, not only escaped): the controls above, the
# line and paragraph separators, the bidi embeddings, overrides and isolates (they reorder a
# line on screen), and the zero-width space and BOM (two names that look alike). Zero-width
# (non-)joiners, used in Persian and Indic words and emoji sequences, and the soft hyphen are
# text: escaped in an error line, never refused. HIDDEN (a regex class body) is the non-control
# part, shared with the pages' escapes (report/safe.py); it holds the direction marks too
# (LRM, RLM, ALM: invisible, and they move the neutral characters around them).
HIDDEN = "\u2028\u2029\u202a-\u202e\u2066-\u2069\u200b\u200e\u200f\u061c\ufeff"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{HIDDEN}]")


def unsafe(text: str) -> bool:
    """Whether ``text`` holds a character no name or title may (:data:`_UNSAFE`).

    >>> unsafe("a\\nb"), unsafe("run\\u202egpj.html"), unsafe("گزارش\\u200cها")
    (True, True, False)
    """
    return _UNSAFE.search(text) is not None


def has_control(text: str) -> bool:
    """Whether ``text`` holds a C0, DEL or C1 control character (a newline, a tab, an ESC).

    >>> has_control("a\\x1bb"), has_control("a\\u2028b"), has_control("plain")
    (True, False, False)
    """
    return _CONTROL.search(text) is not None


def visible(text: str) -> str:
    """``text`` with every C0, DEL and C1 control character as a visible ``\\xNN`` escape, and
    every Unicode separator or format character as ``\\uNNNN``: one line, shown as it is."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return text if text.isascii() else "".join(map(_unicode_escape, text))


# the longest error text shown whole: far past any message of the toolkit's own (a long path,
# a list of choices), short enough that the line ending in a 1 MB value is still read
MOST_SHOWN = 1000


def _width(char: str) -> int:
    """Characters ``char`` takes once shown: 4 for ``\\x1b``, 6 for ``\\u2028``, else 1."""
    return len(visible(char))


def _fits(chars: str, budget: int) -> int:
    """How many of ``chars``, from the start, fit in ``budget`` shown characters."""
    used = 0
    for n, char in enumerate(chars):
        used += _width(char)
        if used > budget:
            return n
    return len(chars)


def error_text(text: str, most: int = MOST_SHOWN) -> str:
    """``text`` as an error line shows it: :func:`visible`, and past ``most`` shown characters
    its head and tail around a note of how much was cut (the tail kept: a path's file name,
    the end of a value). Cut on characters, not escapes, so no ``\\xNN`` is split."""
    if len(text) <= most // 4 or len(visible(text)) <= most:  # the common case: whole
        return visible(text)
    head = _fits(text[:most], most * 2 // 3)
    tail = _fits(text[: -most - 1 : -1], most // 3)  # the last ``most`` characters, reversed
    end = len(text) - tail
    return f"{visible(text[:head])} … [{end - head:,} characters cut] … {visible(text[end:])}"


class UserError(Exception):
    """An error the user can fix: bad input, missing file, no GPU, no compiler."""

    def __init__(self, message: str, hint: str | None = None, exit_code: int = 2) -> None:
        # escaped here, not only where the CLI prints it: every other reader of a UserError
        # (a sweep's "page not rendered" line, a resume warning) shows the same safe text
        message = error_text(str(message))
        super().__init__(message)
        self.message = message
        self.hint = error_text(str(hint)) if hint else hint
        self.exit_code = exit_code


class BadArgument(UserError, ValueError):
    """A value of the right type that cannot be used (an empty path, a file for a folder, a
    threshold out of its bounds): the CLI's one line, and the ``ValueError`` Python code
    catches."""


class BadType(UserError, TypeError):
    """A value of the wrong type for a Python caller's argument or config field (``True`` for a
    count, ``"1e-3"`` for a rate): the CLI's one line, and the ``TypeError`` Python code
    catches."""


class OutOfRange(BadArgument):
    """A positive option outside :data:`~andrea_diag.fields.POSITIVE_RANGE`, raised by
    ``fields.check_bounds``. It carries the flag and the value: a run saved before that range
    existed is then told so at ``--resume`` (``commands/options.resumed``), not called
    corrupt."""

    def __init__(self, message: str, flag: str, value: object) -> None:
        super().__init__(message)
        self.flag, self.value = flag, value


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
