"""``--hf-config PATH`` checked as a file before any work starts: one line, never a traceback.

    check_hf_config("llama-tiny/config.json")   # or the folder holding it

The checks are the loader's own (``integrations/hf_model.read_config``: a regular file of a
config's size, JSON that parses, a ``model_type``, size fields in range), one owner for this
pre-flight and for Python callers; here they run before the run's folder is made, so a bad
config is refused before anything is written or trained.
"""

from __future__ import annotations

from andrea_diag.integrations.hf_model import read_config


def check_hf_config(path: str) -> None:
    """``path`` (a config.json, or a folder holding one) is a config the loader accepts."""
    read_config(path)
