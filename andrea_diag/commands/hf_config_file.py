"""``--hf-config PATH`` checked as a file before any work starts: one line, never a traceback.

    check_hf_config("llama-tiny/config.json")   # or the folder holding it

The loader (``integrations/hf_model.read_config``) reads the JSON whole and catches only
``JSONDecodeError`` and ``UnicodeDecodeError``: a deeply nested file ended in a
``RecursionError`` traceback, an integer past Python's 4300-digit limit in a ``ValueError``
one, and a sparse 40 GiB "config.json" in a ``MemoryError``. Here the file is refused as such
(a missing one is left to the loader's "does not exist").
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from andrea_diag.errors import UserError

# a model's config.json is a few kB; a long one (token maps) a few hundred
MAX_HF_CONFIG_BYTES = 16 << 20
_HINT = "give a model's config.json or the folder holding it"


def check_hf_config(path: str) -> None:
    """``path`` (a config.json, or a folder holding one) is a regular file of JSON that the
    loader can read, if it is there at all."""
    p = Path(path).expanduser()
    if os.path.isdir(p):
        p = p / "config.json"
    if os.path.islink(p) and not os.path.exists(p):
        raise UserError(f"--hf-config: {str(p)!r} is a dangling symbolic link")
    if not os.path.exists(p):
        return  # said by the loader, where the model is built
    if not os.path.isfile(p):
        raise UserError(f"--hf-config: {str(p)!r} is not a regular file", hint=_HINT)
    size = os.path.getsize(p)
    if size > MAX_HF_CONFIG_BYTES:
        raise UserError(
            f"--hf-config: {str(p)!r} is {size:,} bytes, not a config.json "
            f"(at most {MAX_HF_CONFIG_BYTES:,})",
            hint=_HINT,
        )
    _parses(p)


def _parses(p: Path) -> None:
    """The file's JSON parses: the loader's own errors are one line already, these are not."""
    try:
        json.loads(p.read_bytes())
    except RecursionError:
        raise UserError(f"--hf-config: {str(p)!r} is nested too deeply to be a config",
                        hint=_HINT) from None  # fmt: skip
    except json.JSONDecodeError:
        return  # the loader says where, in its own line
    except UnicodeDecodeError:
        return  # likewise
    except ValueError as exc:  # an integer past int()'s digit limit
        raise UserError(f"--hf-config: {str(p)!r} cannot be read as JSON ({str(exc).split(':')[0]})",
                        hint=_HINT) from None  # fmt: skip
    except OSError as exc:
        raise UserError(f"--hf-config: cannot read {str(p)!r} ({exc.strerror})") from None
