"""An error line shows a lone surrogate (a folder named in another encoding) as an escape."""

from __future__ import annotations


def test_an_error_line_shows_a_lone_surrogate_as_its_escape() -> None:
    from andrea_diag.errors import visible

    shown = visible("runs/arm\udcff")  # a folder named in Latin-1, as Python reads it
    assert shown == "runs/arm\\udcff"
    shown.encode("utf-8")  # printable: a raw surrogate raised UnicodeEncodeError here
