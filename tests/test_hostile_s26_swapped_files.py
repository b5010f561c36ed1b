"""A run's file swapped between the check and the read (round 26, from a hostile-dir audit):
``rundir.read_text`` (every JSON side file: summary.json, config.json, cascade.json, ...)
checked the path with a ``stat`` and then opened it with a blocking ``open``. A file swapped
for a FIFO in between hung ``report`` forever (reproduced with a loop of atomic renames). It now
sizes and reads what it opened (``O_NONBLOCK``, ``fstat``), and so do the readers of a run's
JSONL tables and of a sweep's ``sweep.csv``, which had the same check-then-open.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from andrea_diag import jsonl_read, rundir, runread, sweep_table
from andrea_diag.errors import UserError


@pytest.fixture
def no_hang() -> Iterator[None]:
    """A read that blocks fails the test after 10 s instead of hanging the suite."""

    def timed_out(*args: object) -> None:
        raise TimeoutError("the read blocked")

    old = signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _swap_after_the_check(monkeypatch: pytest.MonkeyPatch, swap) -> None:
    real = rundir.regular_file

    def checked_then_swapped(path: Path, what: str) -> Path:
        out = real(path, what)
        swap(Path(path))
        return out

    monkeypatch.setattr(rundir, "regular_file", checked_then_swapped)
    # the table readers held their own name for it before (the old code's check)
    monkeypatch.setattr(runread, "regular_file", checked_then_swapped, raising=False)


def _to_fifo(p: Path) -> None:
    fifo = p.with_name("fifo")
    os.mkfifo(fifo)
    os.replace(fifo, p)


def test_a_file_swapped_for_a_fifo_after_its_check_is_refused_not_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_hang: None
) -> None:
    path = tmp_path / "summary.json"
    path.write_text("{}")
    _swap_after_the_check(monkeypatch, _to_fifo)
    with pytest.raises(UserError, match="is not a regular file"):
        rundir.read_json(path, "the arm's summary")


@pytest.mark.parametrize("name", ["metrics.jsonl", "sweep.csv"])
def test_a_table_swapped_for_a_fifo_after_its_check_is_refused_not_waited_on(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_hang: None
) -> None:
    path = tmp_path / name
    path.write_text('{"update": 1}\n' if name.endswith("jsonl") else "cell,size\nc,tiny\n")
    _swap_after_the_check(monkeypatch, _to_fifo)
    with pytest.raises(UserError, match="is not a regular file"):
        if name == "sweep.csv":
            sweep_table.read_sweep_csv(tmp_path)
        else:
            runread.read_jsonl(path)


def test_a_dangling_table_link_is_one_line_not_a_file_not_found_traceback(tmp_path: Path) -> None:
    """Found by review of the first fix: sizing the path before opening it raised a raw
    FileNotFoundError for a link to nothing."""
    path = tmp_path / "metrics.jsonl"
    path.symlink_to(tmp_path / "gone.jsonl")
    with pytest.raises(UserError, match="is missing"):
        runread.read_jsonl(path)


@pytest.mark.parametrize("name", ["metrics.jsonl", "sweep.csv"])
def test_a_table_swapped_for_a_larger_one_after_its_check_is_sized_as_opened(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caps are lowered to the small file's size: the swapped-in file is past them."""
    monkeypatch.setattr(jsonl_read, "MAX_TABLE_BYTES", 64)  # read_jsonl's home since round 27
    monkeypatch.setattr(sweep_table, "MAX_SWEEP_CSV_BYTES", 64)
    path = tmp_path / name
    row = '{"update": 1}\n' if name.endswith("jsonl") else "cell,size\n"

    def grow(p: Path) -> None:
        big = p.with_name("big")
        big.write_text(row * 1000)
        os.replace(big, p)

    path.write_text(row)
    _swap_after_the_check(monkeypatch, grow)
    with pytest.raises(UserError, match="more than"):
        if name == "sweep.csv":
            sweep_table.read_sweep_csv(tmp_path)
        else:
            runread.read_jsonl(path)
