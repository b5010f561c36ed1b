"""A UserError that echoes a user's value stays one readable line (review of bad input, round
25): ``errors.error_text``, applied where every UserError is made, cuts a message or hint past
``MOST_SHOWN`` characters to its head and tail and shows control characters escaped.

Before, a 1 MB value (a path, an option) came back whole in its ``error:`` line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_refusals import empty_fixture, refused  # noqa: F401 (empty)

from andrea_diag.errors import MOST_SHOWN, UserError, error_text

SLACK = 60  # the " … [N characters cut] … " note


def _parts(text: str) -> tuple[str, int, str]:
    """A cut text's head, the count of characters cut, and its tail."""
    head, rest = text.split(" … [", 1)
    count, tail = rest.split(" characters cut] … ", 1)
    return head, int(count.replace(",", "")), tail


def test_a_megabyte_message_is_cut_to_its_head_and_tail_with_the_count_cut() -> None:
    value = "a" * 1_000_000
    e = UserError(f"--out {value!r} is not a folder", hint=f"try {value}/runs")
    assert len(e.message) <= MOST_SHOWN + SLACK and len(e.hint or "") <= MOST_SHOWN + SLACK
    assert e.message.startswith("--out 'aaa") and e.message.endswith("' is not a folder")
    assert e.hint is not None and e.hint.endswith("/runs")
    head, count, tail = _parts(e.message)
    assert count == 1_000_000 + len("--out '' is not a folder") - len(head) - len(tail)
    assert str(e) == e.message  # what every other reader of the error shows


def test_only_text_past_the_limit_is_cut_and_normal_text_is_unchanged() -> None:
    assert error_text("x" * MOST_SHOWN) == "x" * MOST_SHOWN
    assert error_text("--steps must be at least 1") == "--steps must be at least 1"
    assert "characters cut" in error_text("x" * (MOST_SHOWN + 1))


def test_control_characters_count_as_shown_and_no_escape_is_split() -> None:
    """250 ESCs show as 1000 characters (``\\x1b`` each): the limit is on what is printed."""
    text = "\x1b" * 100_000 + "config.json"
    out = error_text(text)
    assert "\x1b" not in out and "\n" not in out and len(out) <= MOST_SHOWN + SLACK
    head, count, tail = _parts(out)
    assert head == "\\x1b" * (len(head) // 4)  # whole escapes only
    escapes = tail.removesuffix("config.json")
    assert tail.endswith("config.json") and escapes == "\\x1b" * (len(escapes) // 4)
    assert count == len(text) - len(head) // 4 - len(escapes) // 4 - len("config.json")


def test_a_huge_value_with_newlines_prints_as_one_short_line_at_the_command_line(
    monkeypatch: pytest.MonkeyPatch, empty: Path
) -> None:
    value = "dir\n" * 50_000 + "config.json"
    line = refused(["train", "--hf-config", value], monkeypatch, empty)
    assert len(line) <= len("error: ") + MOST_SHOWN + SLACK
    assert "--hf-config" in line and "characters cut" in line and "config.json" in line


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u202e", "\u200b", "\U000e0001"])
def test_an_error_quoting_a_line_separator_or_format_character_shows_it_escaped(
    char: str,
) -> None:
    """errors.visible escaped C0 and C1 only: a name with U+2028 split the ``error:`` line in
    two, a bidi override (U+202E) reordered it on screen; only report's echo lines escaped
    them. Now every UserError, echo line and name check shares the one set."""
    from andrea_diag.console_text import shown
    from andrea_diag.errors import visible

    escaped = f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"
    e = UserError(f"cell a{char}b is damaged", hint=f"delete a{char}b")
    assert e.message == f"cell a{escaped}b is damaged" and e.hint == f"delete a{escaped}b"
    assert shown(f"x{char}y") == f"x{escaped}y" and visible("plain é") == "plain é"
