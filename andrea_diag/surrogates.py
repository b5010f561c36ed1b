"""Lone UTF-16 surrogates in a run's JSON, replaced as it is read: no text of them reaches a
frame, a page or an export.

    value = mended(json.loads(text), text)   # "\\ud800": "\\ufffd" in a string, its escape in a key

JSON may spell a character as a ``\\uXXXX`` escape, and ``json.loads`` decodes half a UTF-16
pair with no other half (``"\\ud800"``) to a str that no UTF-8 encoder takes. One such string in
a run's file ended everything downstream of it: pandas (3.x stores text with pyarrow) refused
the table it was in, so ``report`` said "unexpected shape (UnicodeEncodeError)" for a whole
run, a resumed run's close lost its summary, and a page holding it could not be written. No
writer of ours puts one there (a Python str from a tokenizer is whole characters). It becomes
U+FFFD, the character the table readers already give an undecodable byte (``"replace"``).

Only text holding a surrogate's escape is walked (the walk is a loop, not a recursion: the
value may be nested as deep as ``json.loads`` went), so a run's own files cost one search.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any

_ESCAPE = re.compile(
    r"\\u[dD][89a-fA-F]"
)  # "\\ud800".."\\udfff"; "\\\\ud8.." over-counts: harmless
_LONE = re.compile("[\ud800-\udfff]")  # what is left unpaired once parsed (a pair is one char)
REPLACEMENT = "\ufffd"


def mended(value: Any, text: str) -> Any:
    """``value`` (parsed from ``text``) with every lone surrogate in its strings and keys as
    U+FFFD; ``value`` itself, unwalked, when ``text`` spells no surrogate."""
    if not _ESCAPE.search(text):
        return value
    if isinstance(value, str):
        return _fix(value)
    stack = [value] if isinstance(value, (dict, list)) else []
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            items = [(_fix_key(k), v) for k, v in node.items()]
            node.clear()  # rebuilt in place: the keys' order is the columns' order
            node.update(items)
            keys: Any = list(node)
        else:
            keys = range(len(node))
        for k in keys:
            v = node[k]
            if isinstance(v, str):
                node[k] = _fix(v)
            elif isinstance(v, (dict, list)):
                stack.append(v)
    return value


def replaced(text: str) -> str:
    """``text`` with every lone surrogate as U+FFFD: also what Python makes of a file name's
    undecodable bytes (``os.fsdecode``), which no UTF-8 writer takes either."""
    return _fix(text)


def _fix(text: str) -> str:
    return _LONE.sub(REPLACEMENT, text) if _LONE.search(text) else text


def _fix_key(key: Any) -> Any:
    """A key's lone surrogates as their escapes (``\\ud800``), not U+FFFD: two keys differing
    only in one (``a\\ud800``, ``a\\ud801``) were one column, the other's values lost."""
    if not isinstance(key, str) or not _LONE.search(key):
        return key
    return _LONE.sub(lambda m: f"\\u{ord(m.group()):04x}", key)


def text_values(value: Any) -> Any:
    """``value`` (a str, or a dict of them) with every string valid UTF-8 (:func:`replaced`):
    a run folder's name that is not (its bytes surrogate-escaped by Python) crashed W&B's
    settings with a UnicodeEncodeError, after it had begun writing (sinks.py)."""
    if isinstance(value, str):
        return replaced(value)
    if isinstance(value, dict):
        return {text_values(k): text_values(v) for k, v in value.items()}
    return value


@contextlib.contextmanager
def argv_as_text() -> Iterator[None]:
    """``sys.argv`` as valid text for the block: W&B records the command's arguments when a
    run starts, and a run folder named in undecodable bytes made its settings raise."""
    saved = sys.argv
    sys.argv = [replaced(a) for a in saved]
    try:
        yield
    finally:
        sys.argv = saved
