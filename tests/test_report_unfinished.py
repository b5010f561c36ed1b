"""Reports of unfinished runs: killed, crashed, still running or never-started arms render what
they recorded, under a banner that says where and why each arm stopped.

python -m pytest -q tests/test_report_unfinished.py

One tiny real cascade (12 updates, a few seconds on CPU) is run once; each test copies it and
edits files to look like the state it needs (the same files a killed or crashed run leaves).
One test kills a real ``andrea-diag cascade`` with SIGKILL.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from andrea_diag.cli import app
from andrea_diag.config import RunConfig
from andrea_diag.errors import UserError
from andrea_diag.experiments.cascade import CascadeSpec, run_cascade
from andrea_diag.report import render_cascade, render_report
from andrea_diag.report.banner import arm_status
from andrea_diag.runlock import LOCK_NAME

STEPS = 12
KEPT_ROWS = 7  # the killed arm's metrics.jsonl keeps its first 7 rows


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny cascade (none, global), run once for the module."""
    out = tmp_path_factory.mktemp("unfinished") / "done"
    spec = CascadeSpec(
        base=RunConfig(size="tiny", steps=STEPS, device="cpu"), clips=["none", "global"], out=out
    )
    run_cascade(spec, console=Console(stderr=True, quiet=True))
    return out


@pytest.fixture
def cascade(finished: Path, tmp_path: Path) -> Path:
    """A private copy of the finished cascade, for a test to break."""
    return Path(shutil.copytree(finished, tmp_path / "c"))


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _set_status(cascade: Path, status: str) -> None:
    """Rewrite cascade.json's status, as an interrupted cascade leaves it."""
    meta = json.loads((cascade / "cascade.json").read_text())
    (cascade / "cascade.json").write_text(json.dumps({**meta, "status": status}))


def _unfinish(arm: Path, rows: int = KEPT_ROWS, lock_pid: int | None = None) -> None:
    """Make ``arm`` look stopped after ``rows`` updates: no summary, schedule or parquet (close()
    never ran), metrics.jsonl cut back, and a lock naming ``lock_pid`` when given."""
    for name in ("summary.json", "schedule.json", "metrics.parquet"):
        (arm / name).unlink()
    lines = (arm / "metrics.jsonl").read_text().splitlines(keepends=True)
    (arm / "metrics.jsonl").write_text("".join(lines[:rows]))
    if lock_pid is not None:
        lock = {"pid": lock_pid, "host": socket.gethostname(), "started": "2025-01-02T03:04:05"}
        (arm / LOCK_NAME).write_text(json.dumps(lock))


def _banner(page: str) -> list[str]:
    """The banner's lines (unescaped), or [] when the page has none."""
    m = re.search(r"<div class='banner' id='run-status'[^>]*>(.*?)</div>", page, re.S)
    if not m:
        return []
    items = re.findall(r"<li>(.*?)</li>", m.group(1), re.S)
    return [i.replace("&#x27;", "'").replace("&amp;", "&") for i in items]


def _meta(page: str) -> dict:
    """The page's report-meta JSON (figure count, arms, per-arm state)."""
    return json.loads(re.search(r"id='report-meta'>(.*?)</script>", page).group(1))


def test_finished_cascade_shows_no_banner(cascade: Path) -> None:
    page = render_cascade(cascade).read_text()
    assert _banner(page) == [] and "id='run-status'" not in page
    assert [s["state"] for s in _meta(page)["status"]] == ["finished", "finished"]


def test_killed_arm_renders_with_banner_naming_update_and_dead_pid(cascade: Path) -> None:
    dead = _dead_pid()
    _unfinish(cascade / "global", lock_pid=dead)
    _set_status(cascade, "running")
    page = render_cascade(cascade).read_text()
    assert _banner(page) == [
        f"none: finished at update {STEPS} of {STEPS}",
        f"global: stopped at update {KEPT_ROWS} of {STEPS} — killed "
        f"(no summary, lock left by dead process {dead})",
    ]
    assert "cascade.json status: running" in page
    meta = _meta(page)
    assert meta["arms"] == ["none", "global"] and meta["figures"] >= 5
    assert "no summary.json for global: the run did not finish" in page


def test_never_started_arm_is_named_and_the_other_arm_plotted(cascade: Path) -> None:
    _unfinish(cascade / "none", lock_pid=_dead_pid())
    shutil.rmtree(cascade / "global")
    _set_status(cascade, "running")
    page = render_cascade(cascade).read_text()
    banner = _banner(page)
    assert banner[0].startswith(f"none: stopped at update {KEPT_ROWS} of {STEPS} — killed")
    assert banner[1] == "global: never started (no run directory)"
    assert _meta(page)["arms"] == ["none"]


def test_arm_with_config_but_no_metric_row_counts_as_never_started(cascade: Path) -> None:
    _unfinish(cascade / "global", rows=0)
    page = render_cascade(cascade).read_text()
    assert _banner(page)[1] == "global: never started (no metric rows)"
    assert _meta(page)["arms"] == ["none"]


def test_crashed_arm_shows_error_and_probe_failures(cascade: Path) -> None:
    _unfinish(cascade / "global")
    failure = {"update": 5, "probe": "pollution", "hook": "after_step", "error": "ValueError: x"}
    partial = {"status": "crashed", "error": "RuntimeError", "probe_failures": [failure]}
    (cascade / "global" / "partial_summary.json").write_text(json.dumps(partial))
    line = _banner(render_cascade(cascade).read_text())[1]
    assert line == (
        f"global: stopped at update {KEPT_ROWS} of {STEPS} — crashed (RuntimeError); probe "
        "failures: pollution at update 5 in after_step (ValueError: x)"
    )


def test_crash_without_recorded_error_still_says_crashed(cascade: Path) -> None:
    _unfinish(cascade / "global")
    (cascade / "global" / "partial_summary.json").write_text('{"status": "crashed"}')
    line = _banner(render_cascade(cascade).read_text())[1]
    assert "— crashed (error not recorded" in line


def test_live_lock_reads_as_still_running(cascade: Path) -> None:
    _unfinish(cascade / "global", lock_pid=os.getpid())  # this process: alive
    line = _banner(render_cascade(cascade).read_text())[1]
    assert line == (
        f"global: at update {KEPT_ROWS} of {STEPS} so far — still running (process {os.getpid()})"
    )


def test_no_lock_and_no_summary_says_it_cannot_tell_killed_from_running(cascade: Path) -> None:
    _unfinish(cascade / "global")
    line = _banner(render_cascade(cascade).read_text())[1]
    assert line == (
        f"global: stopped at update {KEPT_ROWS} of {STEPS} "
        "(killed or still running; no lock to tell which)"
    )


def test_single_killed_run_dir_renders_inside_it_with_banner(cascade: Path) -> None:
    _unfinish(cascade / "global", lock_pid=_dead_pid())
    before = (
        (cascade / "report.html").stat().st_mtime_ns if (cascade / "report.html").exists() else None
    )
    res = CliRunner().invoke(app, ["report", str(cascade / "global")])
    assert res.exit_code == 0, res.output
    page = (cascade / "global" / "report.html").read_text()  # inside the run (issue 24 item 7)
    after = (
        (cascade / "report.html").stat().st_mtime_ns if (cascade / "report.html").exists() else None
    )
    assert before == after  # the cascade's own page, beside the run, is not touched
    assert _banner(page)[0].startswith(f"global: stopped at update {KEPT_ROWS} of {STEPS}")


def test_missing_optional_files_and_a_torn_row_still_render(cascade: Path) -> None:
    arm = cascade / "global"
    _unfinish(arm, lock_pid=_dead_pid())
    for name in ("events.jsonl", "data.json", "env.json"):
        (arm / name).unlink()
    (arm / "samples.jsonl").write_text("")
    with open(arm / "metrics.jsonl", "a") as f:
        f.write('{"update": 8, "loss": 3.')  # SIGKILL mid-write
    page = render_cascade(cascade).read_text()
    assert _banner(page)[1].startswith(f"global: stopped at update {KEPT_ROWS} of {STEPS}")
    status = arm_status(arm, "global")
    assert (status.state, status.last_update, status.steps) == ("killed", KEPT_ROWS, STEPS)


def test_run_dir_without_metric_rows_is_one_line_error(cascade: Path) -> None:
    _unfinish(cascade / "global", rows=0)
    res = CliRunner().invoke(app, ["report", str(cascade / "global")])
    assert res.exit_code != 0
    assert "error: no metric rows in" in res.output and "Traceback" not in res.output
    with pytest.raises(UserError, match="no metric rows"):
        render_report([cascade / "global"], cascade / "r.html")


def test_cascade_with_no_started_arm_is_one_line_error(cascade: Path) -> None:
    shutil.rmtree(cascade / "none")
    shutil.rmtree(cascade / "global")
    res = CliRunner().invoke(app, ["report", str(cascade)])
    assert res.exit_code != 0
    assert "error: no metric rows in any arm of" in res.output
    assert "never started" in res.output and "Traceback" not in res.output


def test_corrupt_cascade_json_is_one_line_error(cascade: Path) -> None:
    (cascade / "cascade.json").write_text("{")
    res = CliRunner().invoke(app, ["report", str(cascade)])
    assert res.exit_code != 0 and "is not valid JSON" in res.output
    assert "Traceback" not in res.output


def test_report_after_a_real_sigkill_says_where_the_run_stopped(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "andrea_diag.cli", "cascade", "--steps", "200", "--out", str(out)]
    log = tmp_path / "stderr.txt"  # a file, not a pipe: an unread pipe could block the child
    metrics = out / "none" / "metrics.jsonl"
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        try:
            # a guard against a hung child, not a timing assertion
            deadline = time.monotonic() + 180
            while not (metrics.exists() and metrics.read_bytes().count(b"\n") >= 5):
                assert proc.poll() is None, f"cascade exited early: {log.read_text()[-2000:]}"
                assert time.monotonic() < deadline, "no 5 metric rows within 180 s"
                time.sleep(0.1)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    res = CliRunner().invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    banner = _banner((out / "report.html").read_text())
    assert re.match(r"none: stopped at update \d+ of 200\b", banner[0]), banner
    # without a lock (older runs) the banner cannot tell; with one it says killed
    assert "killed" in banner[0]
    assert banner[1] == "global: never started (no run directory)"


@pytest.mark.parametrize(
    "failures", ["not a list", [1, "x", None], [{"probe": "pollution"}, 7]], ids=str
)
def test_a_crash_record_of_an_odd_shape_still_renders_its_banner(
    cascade: Path, failures: object
) -> None:
    """partial_summary.json is untrusted: probe failures that are not a list of objects are
    dropped (the objects among them kept), never a page refused for them."""
    _unfinish(cascade / "global")
    partial = {"status": "crashed", "error": "RuntimeError", "probe_failures": failures}
    (cascade / "global" / "partial_summary.json").write_text(json.dumps(partial))
    line = _banner(render_cascade(cascade).read_text())[1]
    assert line.startswith(f"global: stopped at update {KEPT_ROWS} of {STEPS} — crashed")
    kept = isinstance(failures, list) and any(isinstance(f, dict) for f in failures)
    assert ("pollution at close" in line) == kept


@pytest.mark.parametrize(
    "steps", ["Infinity", "-Infinity", "NaN", "1e400", "1" + "0" * 400, "1e300", "true"]
)
def test_a_config_with_steps_past_any_count_renders_the_banner_without_of(
    cascade: Path, steps: str
) -> None:
    """``steps: Infinity`` in config.json (int() of it is an OverflowError) leaves out the
    banner's "of N", it does not refuse the page."""
    _unfinish(cascade / "global")
    config = cascade / "global" / "config.json"
    text = re.sub(r'"steps": \d+', f'"steps": {steps}', config.read_text())
    assert text != config.read_text()
    config.write_text(text)
    line = _banner(render_cascade(cascade).read_text())[1]
    assert line.startswith(f"global: stopped at update {KEPT_ROWS} ")
    assert " of " not in line.split("(")[0]  # no "of N" from a count that is none
