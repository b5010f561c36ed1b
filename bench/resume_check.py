"""Kill a run with SIGKILL, resume it, and compare with the same run uninterrupted.

    (on the device, repo root)  python3 bench/resume_check.py OUT_DIR [size] [steps] [kill_at]

Runs ``train --clip global`` through the CLI, as a user would: uninterrupted, twice (on CUDA two
identical runs already differ: atomics in reductions, so the second run is the noise floor);
then again, killed (SIGKILL) once ``kill_at`` metric rows exist, then ``--resume``. Prints and
writes ``resume-check.json``: per metric, the largest absolute and relative difference of the
resumed run and of the repeat against the first run, and whether the batches were identical.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd


def cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "andrea_diag.cli", *args])


def main(out: Path, size: str = "12m", steps: int = 300, kill_at: int = 170) -> dict:
    common = ["train", "--size", size, "--steps", str(steps), "--clip", "global"]
    assert cli(*common, "--out", str(out / "full")).wait() == 0
    assert cli(*common, "--out", str(out / "repeat")).wait() == 0
    proc = cli(*common, "--out", str(out / "killed"))
    rows = out / "killed" / "global" / "metrics.jsonl"
    while not rows.exists() or rows.read_bytes().count(b"\n") < kill_at:
        if proc.poll() is not None:
            raise SystemExit("the run ended before the kill")
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert cli("train", "--resume", str(out / "killed")).wait() == 0
    a = pd.read_parquet(out / "full" / "global" / "metrics.parquet")
    result: dict = {"size": size, "steps": steps, "killed_after_rows": kill_at}
    for name in ("killed", "repeat"):  # the resumed run, and the noise floor
        b = pd.read_parquet(out / name / "global" / "metrics.parquet")
        r: dict = {
            "rows": len(b),
            "same_batches": a["batch_hash"].tolist() == b["batch_hash"].tolist(),
        }
        for col in ("loss", "grad_norm", "m_norm", "v_norm", "update_rms"):
            if col in a and col in b:
                d = (a[col] - b[col]).abs()
                rel = d / a[col].abs()
                r[col] = {"max_abs": float(d.max()), "max_rel": float(rel.max()),
                          "max_rel_first_50": float(rel.iloc[:50].max())}  # fmt: skip
        result["resumed" if name == "killed" else "repeat"] = r
    (out / "resume-check.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(sys.argv[2:3] or ["12m"]), *map(int, sys.argv[3:5]))
