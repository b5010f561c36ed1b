"""A run's JSON file is parsed only where the memory free holds what it parses into (round 26):
``rundir.read_json`` caps a file at the memory free / ``JSON_EXPANSION`` as well as at
``MAX_JSON_BYTES``.

Before, any JSON file under 1 GiB was parsed: 1 GiB of ``[{},{},...]`` in a planted
``summary.json`` parses into ~25 GiB of dicts, past a laptop's memory, and ``report DIR`` ran
until the kernel's OOM killer ended it without a word. The tests lower the "memory free"
instead of planting a gigabyte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_dirs import one_line_error, run_fixture  # noqa: F401 (run_fixture: the run)

from andrea_diag import rundir
from andrea_diag.errors import UserError


def test_a_json_file_that_would_parse_past_the_memory_free_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "summary.json"
    path.write_text("[" + ",".join(["{}"] * 100_000) + "]")  # 300 kB: 25x that, parsed
    monkeypatch.setattr(rundir, "available_memory", lambda: 4 << 20)  # 4 MiB "free"
    monkeypatch.setattr(rundir, "JSON_FLOOR", 0)  # no 16 MiB floor: the file stays small
    monkeypatch.setattr(rundir.json, "loads", _never)
    with pytest.raises(UserError, match=r"is 0\.3 MiB, more than 4\.0 MiB of free memory may "
                       r"parse \(0\.125 MiB\)"):  # fmt: skip
        rundir.read_json(path, "the arm's summary")


def test_the_same_file_parses_where_the_memory_free_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps([{}] * 1000))
    monkeypatch.setattr(rundir, "available_memory", lambda: 64 << 20)
    assert rundir.read_json(path, "the arm's summary") == [{}] * 1000


def test_a_json_file_the_process_cannot_parse_is_one_line_not_a_memory_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past an address-space limit (``ulimit -v``) the memory free does not show."""
    path = tmp_path / "summary.json"
    path.write_text("{}")

    def out_of_memory(text: str) -> None:
        raise MemoryError

    monkeypatch.setattr(rundir.json, "loads", out_of_memory)
    with pytest.raises(UserError, match="of JSON, more than this process can parse"):
        rundir.read_json(path, "the arm's summary")


def test_report_of_a_run_whose_summary_parses_past_the_memory_free_is_one_line(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (run / "summary.json").write_text("[" + ",".join(["{}"] * 100_000) + "]")
    monkeypatch.setattr(rundir, "available_memory", lambda: 4 << 20)
    monkeypatch.setattr(rundir, "JSON_FLOOR", 0)
    out = one_line_error("report", str(run))
    assert "of free memory may parse" in out and "free memory, then retry" in out, out


def test_a_json_file_under_the_floor_is_parsed_however_little_memory_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy host (free / 32 below a big run's batch plan) still reads files of a run's size."""
    path = tmp_path / "batch_plan.json"
    path.write_text(json.dumps({"records": [{"update": i} for i in range(1, 50_001)]}))
    monkeypatch.setattr(rundir, "available_memory", lambda: 64 << 20)  # 2 MiB parsable
    assert len(rundir.read_json(path, "the batch plan")["records"]) == 50_000


def _never(text: str) -> None:
    raise AssertionError("a JSON file past the memory free was parsed")


_UNDER_A_LIMIT = """
import pathlib, resource, sys
from andrea_diag import rundir
rundir.available_memory = lambda: 64 << 30  # the cap is then MAX_JSON_BYTES: 1 GiB
path = pathlib.Path(sys.argv[1])
with open("/proc/self/status") as f:
    vm = next(int(x.split()[1]) for x in f if x.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), vm + (256 << 20)))
print(rundir.read_json(path, "the arm's summary"))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmSize from /proc")
def test_a_small_json_file_reads_under_an_address_space_limit_below_the_cap(
    tmp_path: Path,
) -> None:
    """Before: read(cap + 1) reserved the whole 1 GiB cap for a 9-byte file, and a process
    under a 256 MiB ulimit died in a MemoryError traceback."""
    import subprocess
    import sys

    path = tmp_path / "summary.json"
    path.write_text('{"a": 1}')
    root = Path(__file__).resolve().parent.parent
    res = subprocess.run([sys.executable, "-c", _UNDER_A_LIMIT, str(path)], cwd=root,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0 and res.stdout.strip() == "{'a': 1}", res.stderr[-2000:]
