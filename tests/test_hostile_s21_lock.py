"""A ``run.lock`` from someone else's run dir (round 21): a pid past what a process id can be
(``os.kill`` raised OverflowError on it) reads as a corrupt lock, so ``report`` still renders a
stopped run and a writer takes the lock over, instead of a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_dirs import cli, run_fixture  # noqa: F401 (run_fixture is the ``run`` fixture)

from andrea_diag.runlock import LOCK_NAME, RunLock, holder_alive, lock_state, pid_alive, read_lock

HUGE = [2**31, 2**63, 10**23, -(10**23)]


@pytest.mark.parametrize("pid", HUGE)
def test_a_lock_naming_a_pid_past_any_process_id_is_corrupt_and_taken_over(
    tmp_path: Path, pid: int
) -> None:
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": None}))
    assert read_lock(tmp_path).pid is None
    assert lock_state(tmp_path) == "killed"
    with RunLock(tmp_path) as lock:
        assert lock.held and lock.took_over_from is None


@pytest.mark.parametrize("pid", HUGE)
def test_pid_alive_of_a_pid_past_any_process_id_is_false(pid: int) -> None:
    assert not pid_alive(pid)


def test_a_stopped_runs_lock_with_a_huge_pid_still_renders_its_report(run: Path) -> None:
    (run / "summary.json").unlink()
    (run / LOCK_NAME).write_text(json.dumps({"pid": 10**23, "host": None}))
    assert not holder_alive(read_lock(run))
    code, out = cli("report", str(run))
    assert code == 0, out
    assert "a corrupt lock file" in (run / "report.html").read_text()
