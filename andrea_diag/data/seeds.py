"""Seeds derived from (tag, seed, update): the one derivation every draw of data uses.

    >>> from andrea_diag.data.seeds import batch_seed
    >>> batch_seed(0, 1) == batch_seed(0, 1) and batch_seed(0, 1) != batch_seed(0, 2)
    True

A leaf module, so the batch plan (``batches.py``) and the held-out set (``heldout.py``) share it
without importing each other.
"""

from __future__ import annotations

import hashlib


def batch_seed(seed: int, update: int, tag: str = "batch") -> int:
    """A 63-bit generator seed derived from (tag, seed, update) only."""
    digest = hashlib.sha256(f"{tag}:{seed}:{update}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)
