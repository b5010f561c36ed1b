"""Nothing lost: a tiny cascade killed with SIGKILL at several points and resumed gives the
uninterrupted run's artifacts bit for bit (wall-clock and process-memory fields excepted)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.record import WALL_CLOCK_COLUMNS, WALL_CLOCK_SUMMARY

STEPS, EVERY = 24, 4
ARGS = ["cascade", "--steps", str(STEPS), "--checkpoint-every", str(EVERY), "--lr", "3e-3",
        "--inject", "outlier@14"]  # fmt: skip
ARMS = ("none", "global")


def _cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "andrea_diag.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _rows(path: Path) -> int:
    return sum(1 for _ in open(path)) if path.exists() else 0


def _kill_at(out: Path, arm: str, rows: int) -> None:
    """Start the cascade and SIGKILL it once ``arm`` has written ``rows`` metric rows."""
    proc = _cli(*ARGS, "--out", str(out))
    deadline = time.monotonic() + 300
    while _rows(out / arm / "metrics.jsonl") < rows:
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the run ended before {arm} reached {rows} rows")
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def _artifacts(out: Path) -> dict:
    got = {}
    for arm in ARMS:
        metrics = pd.read_parquet(out / arm / "metrics.parquet").drop(
            columns=list(WALL_CLOCK_COLUMNS)
        )
        summary = json.loads((out / arm / "summary.json").read_text())
        for key in WALL_CLOCK_SUMMARY:
            summary.pop(key)
        for key in ("wall_s", "share_of_run"):  # the held-out evaluation's wall clock
            summary.get("eval", {}).pop(key, None)
        # process facts, not results: memory high-water marks, and the checkpoint's size (pickle
        # shares repeated strings by object identity, which differs from process to process)
        summary["run_sheet"].pop("peaks")
        summary["run_sheet"].pop("checkpoint_bytes")
        got[arm] = {
            "metrics": metrics.to_json(orient="split", double_precision=15),
            "metrics_exact": metrics,
            "events": (out / arm / "events.jsonl").read_bytes(),
            "samples": (out / arm / "samples.jsonl").read_bytes(),
            "schedule": (out / arm / "schedule.json").read_bytes(),
            "summary": summary,
        }
    return got


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("ref") / "c"
    assert _cli(*ARGS, "--out", str(out)).wait() == 0
    return _artifacts(out)


# kill points: mid first arm, mid second arm, right after the first arm, just after a checkpoint
rng = random.Random(0)
KILLS = [("none", rng.randint(EVERY + 1, STEPS - 2)), ("global", rng.randint(2, STEPS - 2)),
         ("global", 1), ("none", 2 * EVERY + 1)]  # fmt: skip


@pytest.mark.parametrize(("arm", "rows"), KILLS, ids=[f"{a}@{r}" for a, r in KILLS])
def test_killed_and_resumed_cascade_is_bit_identical(
    reference: dict, tmp_path: Path, arm: str, rows: int
) -> None:
    out = tmp_path / "c"
    _kill_at(out, arm, rows)
    # a fresh process, as a user would resume (the built-in repo-docs text is read from the
    # installed packages, which look different from inside pytest)
    res = subprocess.run([sys.executable, "-m", "andrea_diag.cli", "cascade", "--resume", str(out)],
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    got = _artifacts(out)
    for a in ARMS:
        pd.testing.assert_frame_equal(got[a]["metrics_exact"], reference[a]["metrics_exact"],
                                      check_exact=True)  # fmt: skip
        for key in ("events", "samples", "schedule", "summary"):
            if key == "summary" and got[a][key] != reference[a][key]:
                diff = {k: (got[a][key]["run_sheet"].get(k), v)
                        for k, v in reference[a][key]["run_sheet"].items()
                        if got[a][key]["run_sheet"].get(k) != v}  # fmt: skip
                raise AssertionError(f"{a} summary differs; run_sheet diff {diff}")
            assert got[a][key] == reference[a][key], (a, key)
    assert json.loads((out / "cascade.json").read_text())["status"] == "done"


def test_resume_refuses_options_that_differ_from_the_run(tmp_path: Path) -> None:
    out = tmp_path / "c"
    res = CliRunner().invoke(app, ["cascade", "--steps", "6", "--out", str(out)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["cascade", "--resume", str(out), "--steps", "8"])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "--steps 8 differs from the run's 6" in res.output


def test_a_corrupt_checkpoint_is_one_clear_line(tmp_path: Path) -> None:
    out = tmp_path / "c"
    _kill_at(out, "none", EVERY + 2)
    *older, ckpt = sorted((out / "none" / "checkpoints").glob("ckpt-*.pt"))
    # the only one: a torn newest checkpoint with an older one kept falls back to that (a
    # test of its own); a slow machine can let the run write a second before the kill
    for path in older:
        path.unlink()
    ckpt.write_bytes(ckpt.read_bytes()[:100])  # a torn write from another tool
    res = CliRunner().invoke(app, ["cascade", "--resume", str(out)])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert f"checkpoint {ckpt} cannot be read" in res.output


def test_a_checkpoint_from_another_size_is_refused(tmp_path: Path) -> None:
    from andrea_diag.errors import UserError
    from andrea_diag.train.checkpoint import Checkpointer, load_checkpoint

    (tmp_path / "config.json").write_text(json.dumps({"size": "12m"}))
    path = Checkpointer(tmp_path, every=1).save({"identity": {"size": "12m"}}, 1)
    (tmp_path / "config.json").unlink()  # the resuming run's config: not there, not compared
    with pytest.raises(UserError, match="from another run: size '12m', this run 'tiny'"):
        load_checkpoint(path, expect={"size": "tiny"})
