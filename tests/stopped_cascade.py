"""The tiny cascade the ``--resume`` tests stop and continue (tests/test_hostile*_resume.py):
its arguments, and a copy of a finished one made to look stopped. The finished cascade itself is
the session fixture ``finished_cascade`` (conftest.py): trained once for every module that
resumes it, never changed (each test stops a copy)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

# arms none and global, 6 updates, checkpoints at updates 2 and 4 (both kept), every row flushed
ARGS = ["cascade", "--clip", "none,global", "--steps", "6", "--checkpoint-every", "2",
        "--flush-every", "1", "--lr", "3e-3"]  # fmt: skip


def stopped(finished: Path, dest: Path) -> Path:
    """A copy of the finished cascade ``finished`` under ``dest`` with arm ``none`` made to look
    stopped after its update 6 (no summary, parquet or schedule; cascade.json "running")."""
    out = dest / "c"
    shutil.copytree(finished, out)
    for name in ("summary.json", "metrics.parquet", "schedule.json"):
        (out / "none" / name).unlink()
    meta = json.loads((out / "cascade.json").read_text())
    (out / "cascade.json").write_text(json.dumps({**meta, "status": "running"}))
    return out
