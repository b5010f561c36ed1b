"""``bench-kernels`` keeps what it timed: the JSON is written after each (size, dtype) set,
marked ``meta.partial``, so a run stopped part-way (Ctrl-C, a device call's time limit) keeps
every set before the stop. Before, nothing was written until every set was timed.

    pytest tests/test_bench_kernels_partial.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from andrea_diag.bench import clip as bench_clip
from andrea_diag.commands.bench_kernels import bench_kernels


def test_a_run_stopped_after_its_first_set_keeps_that_sets_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = bench_clip.bench_case
    timed: list[str] = []

    def stop_at_the_second(size: str, dt: str, *args: object, **kwargs: object) -> list:
        if timed:
            raise KeyboardInterrupt  # the user's Ctrl-C, in the second set's timing
        timed.append(f"{size} {dt}")
        return real(size, dt, *args, **kwargs)

    monkeypatch.setattr(bench_clip, "bench_case", stop_at_the_second)
    out = tmp_path / "bk"
    with pytest.raises(KeyboardInterrupt):
        bench_kernels(out=out, sizes="tiny", dtypes="fp32,bf16", reps=1, device="cpu",
                      cases="clip")  # fmt: skip
    doc = json.loads((out / "bench-kernels.json").read_text())
    assert doc["meta"]["partial"] is True
    assert "--dtypes fp32,bf16" in doc["meta"]["command"]
    sets = {(r["size"], r["dtype"]) for r in doc["rows"] if r["size"] != "-"}
    assert sets == {("tiny", "fp32")}  # the first set, whole; nothing of the second
    assert not (out / "bench-kernels.html").exists()


def test_a_whole_run_is_marked_not_partial(tmp_path: Path) -> None:
    out = tmp_path / "bk"
    bench_kernels(out=out, sizes="tiny", dtypes="fp32,bf16", reps=1, device="cpu", cases="clip")
    doc = json.loads((out / "bench-kernels.json").read_text())
    assert doc["meta"]["partial"] is False
    assert {(r["size"], r["dtype"]) for r in doc["rows"] if r["size"] != "-"} == {
        ("tiny", "fp32"), ("tiny", "bf16")}  # fmt: skip
    assert (out / "bench-kernels.html").exists()


def test_the_stop_line_says_where_the_timed_sets_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from andrea_diag.cli import app

    def stopped(*args: object, **kwargs: object) -> list:
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_clip, "bench_case", stopped)
    res = CliRunner().invoke(app, ["bench-kernels", "--out", str(tmp_path / "bk"), "--sizes",
                                   "tiny", "--reps", "1", "--device", "cpu", "--cases", "clip"])  # fmt: skip
    assert res.exit_code == 130, res.output
    assert (
        "interrupted: everything recorded so far is kept; each set timed before the stop is in "
        "--out's bench-kernels.json (meta.partial)" in " ".join(res.output.split())
    ), res.output
